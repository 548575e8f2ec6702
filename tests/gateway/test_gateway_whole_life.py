"""Whole-life sessions (the Realtime API, half duplex) through the gateway on stand-in workers
(fake_worker.py --voice): a worker that dies mid-session is told to the client in its
protocol's failure shape, a worker that cannot be reached is marked offline and told, a binary
frame is refused and the session goes on, the browser's subprotocol is echoed, and a gateway
that stops tells every client, running or queued, before it closes them."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from fake_worker import FakeWorkers, gateway_config
from gateway_checks import metric, uvicorn_log
from server_client import http, wait_until
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from llama_omni_py.server.gateway import BackgroundGateway
from llama_omni_py.server.gateway.backend_client import WorkerUnavailable
from llama_omni_py.server.gateway.workers import StaticWorkers


def ws(url: str, path: str) -> str:
    return url.replace("http://", "ws://") + path


async def until_closed(conn, timeout: float = 30.0) -> tuple[list[dict], int | None]:
    """Every message until the server closes, and its close code."""
    out = []
    try:
        while True:
            out.append(json.loads(await asyncio.wait_for(conn.recv(), timeout)))
    except ConnectionClosed as e:
        return out, e.rcvd.code if e.rcvd else None


async def until(conn, kind: str, timeout: float = 30.0) -> list[dict]:
    out = []
    while not out or out[-1]["type"] != kind:
        out.append(json.loads(await asyncio.wait_for(conn.recv(), timeout)))
    return out


@pytest.fixture
def slow_voice():
    workers = FakeWorkers(1, "--voice", "--deltas", "400", "--delay", "0.02")
    with BackgroundGateway(gateway_config(restart_backoff_s=(60.0,)), [workers]) as g:
        assert g.wait_ready(60) == "ready"
        g.procs = workers.procs
        yield g


def kill_worker(g) -> None:
    os.kill(g.procs[0].pid, signal.SIGKILL)


def test_realtime_worker_death_fails_the_response_and_tells_the_client(slow_voice):
    g = slow_voice

    async def go():
        async with connect(ws(g.url, "/v1/realtime?model=m"), subprotocols=["realtime"]) as conn:
            assert conn.subprotocol == "realtime"  # the browser client's subprotocol, echoed
            await until(conn, "session.created")
            await conn.send(json.dumps({"type": "response.create"}))
            await until(conn, "response.output_text.delta")
            kill_worker(g)
            return await until_closed(conn)

    msgs, code = asyncio.run(go())
    done = [m for m in msgs if m["type"] == "response.done"]
    assert len(done) == 1 and done[0]["response"]["status"] == "failed", msgs[-3:]
    assert done[0]["response"]["status_details"]["error"]["code"] == "worker_failed"
    assert msgs[-1]["type"] == "error" and msgs[-1]["error"]["code"] == "worker_failed"
    assert msgs[-1]["error"]["type"] == "server_error" and code == 1011
    assert metric(g.url, "omni_worker_failures_total") == 1
    assert http(g.url + "/workers")[1]["workers"][0]["status"] == "offline"


def test_half_duplex_worker_death_is_an_error_message(slow_voice):
    g = slow_voice

    async def go():
        async with connect(ws(g.url, "/ws/half_duplex/hdx_1")) as conn:
            await until(conn, "queue_done")
            await conn.send(json.dumps({"type": "prepare"}))
            await until(conn, "prepared")
            await conn.send(json.dumps({"type": "audio_chunk", "audio_base64": ""}))
            await until(conn, "chunk")
            kill_worker(g)
            return await until_closed(conn)

    msgs, code = asyncio.run(go())
    assert msgs[-1]["type"] == "error" and msgs[-1]["code"] == "worker_failed" and code == 1011, msgs[-2:]
    assert "failed" in msgs[-1]["error"]


def test_binary_frames_are_refused_and_the_session_goes_on():
    workers = FakeWorkers(1, "--voice", "--deltas", "2", "--delay", "0")
    with BackgroundGateway(gateway_config(), [workers]) as g:
        assert g.wait_ready(60) == "ready"

        async def binary_then(path, opened, then, answer):
            """A binary frame once the session is open, then a text event: (the refusal, the answer)."""
            async with connect(ws(g.url, path)) as conn:
                await until(conn, opened)
                await conn.send(b"\x00\x01binary")
                refused = (await until(conn, "error"))[-1]
                await conn.send(json.dumps({"type": then}))
                return refused, (await until(conn, answer))[-1]

        refused, done = asyncio.run(binary_then("/v1/realtime", "session.created", "response.create", "response.done"))
        demo_refused, prepared = asyncio.run(binary_then("/ws/half_duplex/hdx_2", "queue_done", "prepare", "prepared"))
    assert refused["error"]["code"] == "invalid_json" and refused["error"]["type"] == "invalid_request_error"
    assert "binary" in refused["error"]["message"] and done["response"]["status"] == "completed"
    assert "binary" in demo_refused["error"] and prepared["type"] == "prepared"


def test_a_worker_that_cannot_be_reached_is_told_not_a_traceback():
    from llama_omni_py.server.gateway.duplex_api import _open_upstream

    # The connection to a worker refused: WorkerUnavailable, which the gateway handles.
    with pytest.raises(WorkerUnavailable):
        asyncio.run(_open_upstream("ws://127.0.0.1:1/ws/half_duplex?session_id=x", {}))
    # A worker whose /health is ready but which refuses the session's socket: marked offline,
    # tried again, and the client told.
    script = Path(__file__).parents[1] / "support" / "fake_worker.py"
    proc = subprocess.Popen(
        [sys.executable, str(script), "--port", "0", "--voice", "--reject-ws"], stdout=subprocess.PIPE, text=True
    )
    try:
        port = json.loads(proc.stdout.readline())["port"]
        with BackgroundGateway(gateway_config(), [StaticWorkers([f"127.0.0.1:{port}"])]) as g, uvicorn_log() as log:
            assert g.wait_ready(60) == "ready"

            async def go():
                async with connect(ws(g.url, "/v1/realtime")) as conn:
                    return await until_closed(conn)

            msgs, code = asyncio.run(go())
            wait_until(lambda: http(g.url + "/health")[0] == 200)  # the gateway lives on, the worker is back
    finally:
        proc.kill()
        proc.wait()
    assert msgs[-1]["type"] == "error" and msgs[-1]["error"]["code"] == "no_worker" and code == 1013
    assert "503" in msgs[-1]["error"]["message"]
    assert not [r for r in log if r.exc_info or "Exception in ASGI application" in r.getMessage()]


def test_a_stopping_gateway_tells_running_and_queued_clients():
    workers = FakeWorkers(1, "--voice", "--deltas", "1000", "--delay", "0.02")
    g = BackgroundGateway(gateway_config(), [workers]).__enter__()
    try:
        assert g.wait_ready(60) == "ready"

        async def go():
            running = await connect(ws(g.url, "/ws/chat"))
            await running.send(json.dumps({"messages": [{"role": "user", "content": "hi"}]}))
            await until(running, "chunk")
            queued = await connect(ws(g.url, "/ws/chat"))
            await queued.send(json.dumps({"messages": [{"role": "user", "content": "hi"}]}))
            await until(queued, "queued")
            realtime = await connect(ws(g.url, "/v1/realtime"))
            await asyncio.sleep(0.3)  # waiting in the queue, silently
            stopping = asyncio.create_task(asyncio.to_thread(g.__exit__, None, None, None))
            results = await asyncio.gather(*(until_closed(c) for c in (running, queued, realtime)))
            await stopping
            return results

        results = asyncio.run(go())
    finally:
        g.__exit__(None, None, None)
    (running, r_code), (queued, q_code), (realtime, rt_code) = results
    assert running[-1] == {"type": "error", "error": running[-1]["error"], "code": "server_shutdown"}
    assert "shutting down" in running[-1]["error"] and queued[-1]["code"] == "server_shutdown"
    assert realtime[-1]["type"] == "error" and realtime[-1]["error"]["code"] == "server_shutdown"
    assert r_code == q_code == rt_code == 1012


def test_without_a_voice_worker_the_refusal_names_the_voice_extra():
    with BackgroundGateway(gateway_config(), [FakeWorkers(1)]) as g:
        assert g.wait_ready(60) == "ready"

        async def go(path):
            async with connect(ws(g.url, path)) as conn:
                return await until_closed(conn)

        (rt, rt_code), (hd, hd_code) = asyncio.run(go("/v1/realtime")), asyncio.run(go("/ws/half_duplex/hdx_3"))
    assert "pip install 'llama-omni-py[voice]'" in rt[-1]["error"]["message"] and rt_code == 1013
    assert "pip install 'llama-omni-py[voice]'" in hd[-1]["error"] and hd_code == 1013
