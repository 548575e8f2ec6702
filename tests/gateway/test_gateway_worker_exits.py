"""Real workers (``llama-omni worker`` processes) at the edges of their life: one whose engine
fails to load (an empty model directory) exits when a gateway started it, and is restarted like
one that died; a standalone one keeps answering /health with the error (unless told to exit),
and a gateway that reaches it with --connect lists it failed and routes nothing to it; and a
worker busy on every slot ends within a second of its gateway's SIGKILL."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
from fake_worker import gateway_config
from server_client import chat_request, http, wait_until
from websockets.asyncio.client import connect

from llama_omni_py.server.gateway import BackgroundGateway
from llama_omni_py.server.gateway.workers import LocalWorkers, StaticWorkers
from llama_omni_py.server.lifeline import EXIT_LOAD_FAILED

FAKE_WORKER = str(Path(__file__).parents[1] / "support" / "fake_worker.py")


def _worker(*args: str, cwd) -> tuple[subprocess.Popen, int]:
    """A standalone ``llama-omni worker`` on the CPU and the port it announced."""
    cmd = [sys.executable, "-m", "llama_omni_py", "worker", "--port", "0", "--device", "cpu", *args]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, cwd=cwd)  # not the source tree
    line = proc.stdout.readline()
    assert line, f"the worker exited ({proc.wait()}) before it listened"
    return proc, json.loads(line)["port"]


def _health(port: int) -> tuple[int, dict]:
    try:
        return http(f"http://127.0.0.1:{port}/health")
    except OSError:
        return 0, {}


def test_a_gateway_worker_that_cannot_load_exits_and_is_restarted(tmp_path):
    empty = tmp_path / "models"
    empty.mkdir()
    workers = LocalWorkers(["cpu"], ["--model-dir", str(empty)], pin=False)
    with BackgroundGateway(gateway_config(restart_backoff_s=(0.2, 60.0)), [workers]) as g:
        w = workers.workers[0]
        wait_until(lambda: w.restarts == 1, 60)
        wait_until(lambda: workers.procs[0].poll() is not None and w.status == "error", 60)
        assert workers.procs[0].returncode == EXIT_LOAD_FAILED
        assert w.error.startswith("its engine failed to load: ") and str(empty) in w.error, w.error
        time.sleep(1.0)  # its second failure in a row waits out the 60 s step
        assert w.restarts == 1
        status, body = http(g.url + "/health")
        assert status == 503 and body["workers"][0]["status"] == "error"
        assert body["workers"][0]["error"] == w.error


def test_a_standalone_worker_that_cannot_load_keeps_its_503_unless_told_to_exit(tmp_path):
    empty = tmp_path / "models"
    empty.mkdir()
    serving, port = _worker("--model-dir", str(empty), cwd=tmp_path)
    exiting, _ = _worker("--model-dir", str(empty), "--exit-on-load-failure", cwd=tmp_path)
    try:
        assert exiting.wait(60) == EXIT_LOAD_FAILED
        report = json.loads(exiting.stdout.readline())
        assert str(empty) in report["load_failed"]
        wait_until(lambda: _health(port)[1].get("status") == "error", 60)
        time.sleep(1.0)
        assert serving.poll() is None
        status, body = _health(port)
        assert status == 503 and body["error"] == report["load_failed"]
    finally:
        for proc in (serving, exiting):
            proc.kill()
            proc.wait()


def test_a_connected_worker_that_failed_to_load_is_listed_failed_and_skipped(tmp_path):
    """--connect: the gateway cannot restart it; it lists it failed (with the cause) and
    routes every request to the worker that loaded, queueing rather than using the failed one."""
    empty = tmp_path / "models"
    empty.mkdir()
    failed, failed_port = _worker("--model-dir", str(empty), cwd=tmp_path)
    good = subprocess.Popen(
        [sys.executable, FAKE_WORKER, "--port", "0", "--deltas", "20", "--delay", "0.02"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        good_port = json.loads(good.stdout.readline())["port"]
        wait_until(lambda: _health(failed_port)[1].get("status") == "error", 60)
        cause = _health(failed_port)[1]["error"]
        source = StaticWorkers([f"127.0.0.1:{failed_port}", f"127.0.0.1:{good_port}"])
        with BackgroundGateway(gateway_config(), [source]) as g:
            assert g.wait_ready(60, workers=1) == "ready"
            status, body = http(g.url + "/health")
            assert status == 200 and body["status"] == "healthy"
            listed = {w["worker_id"]: w for w in body["workers"]}
            assert listed["worker_0"]["status"] == "error" and listed["worker_0"]["slots_free"] == 0
            assert listed["worker_0"]["error"] == f"its engine failed to load: {cause}"
            assert listed["worker_1"]["status"] == "idle"

            async def three():  # one slot on the good worker: two of them queue behind it
                async def one():
                    async with connect(g.url.replace("http://", "ws://") + "/ws/chat") as ws:
                        await ws.send(json.dumps(chat_request("hi")))
                        msgs = []
                        while not msgs or msgs[-1]["type"] not in ("done", "error"):
                            msgs.append(json.loads(await asyncio.wait_for(ws.recv(), 30)))
                        return msgs

                return await asyncio.gather(*(one() for _ in range(3)))

            results = asyncio.run(three())
            assert all(r[-1]["type"] == "done" for r in results), [r[-1] for r in results]
            assert any(r[0]["type"] == "queued" for r in results)
            served = {w["worker_id"]: w["total_requests"] for w in http(g.url + "/workers")[1]["workers"]}
            assert served == {"worker_0": 0, "worker_1": 3}
    finally:
        for proc in (failed, good):
            proc.kill()
            proc.wait()


def test_a_worker_busy_on_every_slot_ends_within_a_second_of_its_gateway(tiny_dir):
    """SIGKILL the gateway while both slots of its worker run long turns (the random set's weights,
    on the CPU): the worker is gone within 1 s -- its turns in flight do not hold it up."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "llama_omni_py", "serve", "--port", str(port), "--workers", "1", "--slots", "2"]
    # random weights never end a chunk's speech: each text chunk speaks 4000 codes, seconds of work
    cmd += [
        "--device",
        "cpu",
        "--model-dir",
        str(tiny_dir),
        "--max-new-tokens",
        "1000",
        "--max-audio-per-chunk",
        "4000",
    ]
    gateway = subprocess.Popen(cmd, cwd=tiny_dir)
    url, worker = f"http://127.0.0.1:{port}", None
    try:
        wait_until(lambda: _status(url).get("idle_workers") == 1, 120, 0.2)
        (worker,) = psutil.Process(gateway.pid).children()

        async def two_turns_then_kill() -> float:
            streaming = [asyncio.Event(), asyncio.Event()]

            async def turn(i: int):
                async with connect(url.replace("http://", "ws://") + "/ws/chat", max_size=None) as ws:
                    await ws.send(json.dumps(chat_request(f"tell me a long story {i}", tts={"enabled": True})))
                    while True:  # until the gateway dies (or the turn ends, which fails the test)
                        m = json.loads(await ws.recv())
                        if m["type"] in ("done", "error"):
                            return m
                        if m["type"] == "chunk":
                            streaming[i].set()

            turns = [asyncio.create_task(turn(i)) for i in range(2)]
            await asyncio.wait_for(asyncio.gather(*(e.wait() for e in streaming)), 60)
            assert len(_status(url)["running_tasks"]) == 2  # both slots are mid-turn
            assert not any(t.done() for t in turns), [t.result() for t in turns if t.done()]
            gateway.kill()
            await asyncio.to_thread(gateway.wait, 10)
            t0 = time.monotonic()
            while _alive(worker) and time.monotonic() - t0 < 5:
                await asyncio.sleep(0.01)
            took = time.monotonic() - t0
            await asyncio.gather(*turns, return_exceptions=True)  # their sockets dropped with the gateway
            return took

        took = asyncio.run(two_turns_then_kill())
        assert not _alive(worker)
        assert took < 1.0, f"the worker took {took:.2f} s to end after its gateway"
    finally:
        if gateway.poll() is None:
            gateway.kill()
            gateway.wait()
        if worker is not None and _alive(worker):
            worker.kill()


def _status(url: str) -> dict:
    try:
        return http(url + "/status")[1]
    except OSError:
        return {}


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
