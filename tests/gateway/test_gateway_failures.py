"""When workers die: a turn that already streamed is never replayed (the client gets an error naming
the worker failure), dead local workers are started again (counted in /metrics), queued requests
fail within a bounded time when no worker is left, and workers end with their gateway. The
workers here are stand-ins (fake_worker.py) that stream text slowly and load nothing, so a test
can kill one at a known point of a turn."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
from fake_worker import FakeWorkers, gateway_config
from gateway_checks import metric
from server_client import chat_request, http, wait_until
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from llama_omni_py.server.gateway import BackgroundGateway, GatewayConfig

_config = gateway_config


async def _chat_until_end(url: str, on_chunk=None, closes=None) -> list[dict]:
    """The messages of one /ws/chat turn up to done or error; ``closes`` gets the close code."""
    msgs: list[dict] = []
    async with connect(url.replace("http://", "ws://") + "/ws/chat") as ws:
        await ws.send(json.dumps(chat_request("tell me a story")))
        try:
            while True:
                m = json.loads(await asyncio.wait_for(ws.recv(), 30))
                msgs.append(m)
                if m["type"] == "chunk" and on_chunk is not None:
                    on_chunk(sum(x["type"] == "chunk" for x in msgs))
                if m["type"] in ("done", "error"):
                    break
            if closes is not None:
                with contextlib.suppress(ConnectionClosed):
                    await asyncio.wait_for(ws.recv(), 30)
                closes.append(ws.close_code)
        except ConnectionClosed:
            pass
    return msgs


def test_a_turn_that_lost_its_worker_is_not_replayed_and_the_worker_comes_back():
    workers = FakeWorkers(2, "--deltas", "400", "--delay", "0.01")
    with BackgroundGateway(_config(), [workers]) as g:
        assert g.wait_ready(60) == "ready"

        def kill_serving(n_chunks: int) -> None:
            if n_chunks == 5:
                serving = next(i for i, w in enumerate(workers.workers) if w.leased)
                os.kill(workers.procs[serving].pid, signal.SIGKILL)

        closes = []
        msgs = asyncio.run(_chat_until_end(g.url, kill_serving, closes))
        texts = [m["text_delta"] for m in msgs if m["type"] == "chunk" and m.get("text_delta")]
        assert msgs[-1]["type"] == "error" and msgs[-1]["code"] == "worker_failed", msgs[-1]
        assert closes == [1008]  # an error ends the connection as a policy close
        assert "incomplete" in msgs[-1]["error"]
        assert not any(m["type"] == "done" for m in msgs)
        assert len(texts) == len(set(texts))  # nothing was sent twice: the turn was not run again
        assert texts == [f"w{i} " for i in range(len(texts))]
        assert metric(g.url, "omni_worker_failures_total") == 1
        # the dead process is reaped (no zombie), started again, and serves
        wait_until(lambda: sum(w.restarts for w in workers.workers) == 1 and g.wait_ready(1) == "ready", 30)
        assert metric(g.url, "omni_worker_restarts_total") == 1
        assert all(p.poll() is None for p in workers.procs)
        again = asyncio.run(_chat_until_end(g.url))
        assert again[-1]["type"] == "done"


def test_api_chat_whose_worker_dies_mid_reply_is_a_502_not_a_replay():
    # /api/chat answers whole; the worker still streams to the gateway, so a death after its first
    # piece is known and the turn is not run again on the other worker.
    workers = FakeWorkers(2, "--deltas", "400", "--delay", "0.01")
    with BackgroundGateway(_config(), [workers]) as g:
        assert g.wait_ready(60) == "ready"

        def kill_when_serving() -> None:
            wait_until(lambda: any(w.leased for w in workers.workers), 30)
            time.sleep(0.5)  # some pieces are out
            serving = next(i for i, w in enumerate(workers.workers) if w.leased)
            os.kill(workers.procs[serving].pid, signal.SIGKILL)

        killer = threading.Thread(target=kill_when_serving)
        killer.start()
        status, body = http(g.url + "/api/chat", "POST", json.dumps(chat_request("tell me a story")).encode())
        killer.join()
        assert status == 502 and body["error"] == "worker_failed" and body["success"] is False, body
        assert metric(g.url, "omni_worker_failures_total") == 1
        assert sum(w.total_requests for w in workers.workers) == 1  # it ran once, on the worker that died


def test_dead_workers_restart_in_parallel_each_on_its_own_backoff():
    # worker_0 dies twice and waits out a long backoff; worker_1 dies meanwhile and is back after
    # its own short one, not after worker_0's.
    workers = FakeWorkers(2)
    cfg = GatewayConfig(port=0, health_interval_s=0.2, restart_backoff_s=(0.2, 60.0))
    with BackgroundGateway(cfg, [workers]) as g:
        assert g.wait_ready(60) == "ready"
        w0, w1 = workers.workers
        os.kill(workers.procs[0].pid, signal.SIGKILL)
        wait_until(lambda: w0.restarts == 1 and w0.status == "idle", 30)
        os.kill(workers.procs[0].pid, signal.SIGKILL)  # its second failure in a row: 60 s
        time.sleep(1.0)
        os.kill(workers.procs[1].pid, signal.SIGKILL)
        t0 = time.monotonic()
        wait_until(lambda: w1.restarts == 1 and w1.status == "idle", 30)
        assert time.monotonic() - t0 < 15 and w0.restarts == 1 and w0.status == "offline"
        assert asyncio.run(_chat_until_end(g.url))[-1]["type"] == "done"  # served by worker_1 meanwhile


def test_queued_requests_fail_in_bounded_time_when_no_worker_is_left():
    # One worker, never started again (a backoff longer than the test): every request behind the
    # dead worker gets a clear error once no live worker could serve it for no_worker_grace_s.
    workers = FakeWorkers(1, "--deltas", "400", "--delay", "0.02")
    cfg = GatewayConfig(port=0, health_interval_s=0.2, restart_backoff_s=(600.0,), no_worker_grace_s=1.0)
    with BackgroundGateway(cfg, [workers]) as g:
        assert g.wait_ready(60) == "ready"

        async def three():
            first = asyncio.create_task(_chat_until_end(g.url))
            await asyncio.sleep(0.5)  # the first holds the worker
            queued = [asyncio.create_task(_chat_until_end(g.url)) for _ in range(2)]
            await asyncio.sleep(0.5)
            assert len(g.gateway.pool.queue) == 2
            os.kill(workers.procs[0].pid, signal.SIGKILL)
            t0 = time.monotonic()
            results = await asyncio.gather(first, *queued)
            return results, time.monotonic() - t0

        (first, *queued), took = asyncio.run(three())
        assert first[-1]["type"] == "error" and first[-1]["code"] == "worker_failed"
        for msgs in queued:
            assert msgs[0]["type"] == "queued" and msgs[-1]["type"] == "error", msgs
            assert msgs[-1]["code"] == "no_worker" and "no worker is left" in msgs[-1]["error"]
        assert took < 10.0  # the 1 s grace, health checks every 0.2 s
        assert http(g.url + "/health")[0] == 503


LOAD_ERROR = "FileNotFoundError: [Errno 2] No such file or directory: 'MiniCPM-o-4_5.gguf'"


def test_a_worker_whose_load_fails_is_restarted_on_the_backoff_of_a_dead_one():
    # Its load fails (after 0.3 s): it reports the error and exits; the gateway shows it as error
    # with the cause and starts it again after 0.2 s. Its second failure in a row waits 60 s.
    workers = FakeWorkers(1, "--fail-load", LOAD_ERROR, "--load-s", "0.3")
    cfg = GatewayConfig(port=0, health_interval_s=0.2, restart_backoff_s=(0.2, 60.0))
    with BackgroundGateway(cfg, [workers]) as g:
        w = workers.workers[0]
        wait_until(lambda: w.restarts == 1, 30)
        first = workers.procs[0].pid
        wait_until(lambda: w.status == "error" and workers.procs[0].poll() is not None, 30)
        assert workers.procs[0].returncode == 3 and workers.procs[0].pid == first
        time.sleep(1.0)  # well past the first backoff: the second one holds
        assert w.restarts == 1 and metric(g.url, "omni_worker_restarts_total") == 1
        status, body = http(g.url + "/health")
        assert status == 503 and body["status"] == "unavailable"
        assert body["workers"][0]["status"] == "error"
        assert body["workers"][0]["error"] == f"its engine failed to load: {LOAD_ERROR}"


def test_a_client_waiting_for_a_worker_that_fails_to_load_is_told_the_cause():
    # The client queues while the only worker loads; the load fails, and so does the restart's
    # wait: once no worker could serve for no_worker_grace_s the client gets an error naming it.
    workers = FakeWorkers(1, "--fail-load", LOAD_ERROR, "--load-s", "1.5")
    cfg = GatewayConfig(port=0, health_interval_s=0.2, restart_backoff_s=(0.2,), no_worker_grace_s=0.5)
    with BackgroundGateway(cfg, [workers]) as g:
        assert http(g.url + "/health")[1]["status"] == "loading"
        t0 = time.monotonic()
        msgs = asyncio.run(_chat_until_end(g.url))
        took = time.monotonic() - t0
        assert msgs[0]["type"] == "queued" and msgs[-1]["type"] == "error", msgs
        assert msgs[-1]["code"] == "no_worker" and "no worker is left" in msgs[-1]["error"]
        assert f"worker_0: its engine failed to load: {LOAD_ERROR}" in msgs[-1]["error"]
        assert took < 10.0  # 1.5 s of loading, then the 0.5 s grace (a restart loading meanwhile)
        # a new request while it is down is refused at once, with the same cause
        wait_until(lambda: workers.workers[0].status == "error", 30)
        status, body = http(g.url + "/api/chat", "POST", json.dumps(chat_request("hi")).encode())
        assert status == 503 and body["error"] == "no_worker" and LOAD_ERROR in body["detail"], body


def test_workers_end_with_their_gateway(tmp_path):
    """SIGKILL the gateway process: its workers (children told --parent-pid) end within seconds."""
    script = tmp_path / "gateway.py"
    script.write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(Path(__file__).parents[1] / 'support')!r})\n"
        "from fake_worker import FakeWorkers\n"
        "from llama_omni_py.server.gateway import GatewayConfig, run_gateway\n"
        "run_gateway(GatewayConfig(port=int(sys.argv[1])), [FakeWorkers(2)])\n"
    )
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, str(script), str(port)], cwd=tmp_path)
    try:
        wait_until(lambda: _ready(port), 60)
        children = psutil.Process(proc.pid).children()
        assert len(children) == 2
        proc.kill()
        proc.wait(10)
        gone, alive = psutil.wait_procs(children, timeout=15)
        assert not alive, [c.pid for c in alive]
    finally:
        if proc.poll() is None:
            proc.kill()


def _ready(port: int) -> bool:
    try:
        return http(f"http://127.0.0.1:{port}/status")[1].get("idle_workers") == 2
    except OSError:
        return False
