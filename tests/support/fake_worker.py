"""A stand-in worker for the gateway's failure tests: the worker side of the backend protocol
that the gateway uses (GET /health, WebSocket /backend with session.init -> session.created and
input.append -> `--deltas` text deltas `--delay` s apart, then response.done; POST
/sessions/{id}/close), `--slots` sessions at once (one more is refused as busy, as a real worker
does), and `--parent-pid` like a real worker. With `--voice` it also serves the whole-life
sessions of the half_duplex capability: /ws/half_duplex (prepare -> prepared; audio_chunk ->
`--deltas` chunks, then turn_done; stop) and /v1/realtime (session.created; response.create ->
response.created, `--deltas` text deltas, response.done; the gateway's stop). It loads no
model, so tests can kill it mid-turn at a known point. With `--fail-load ERROR` its load fails
after `--load-s`: it reports the error on stdout and exits, as a gateway's worker does.

    python fake_worker.py --port 0 [--parent-pid PID] [--deltas 40] [--delay 0.05] [--load-s 0] [--slots 1] [--voice]
                          [--fail-load ERROR]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import signal
import sys
import time
from http import HTTPStatus

from websockets.asyncio.server import serve
from websockets.datastructures import Headers
from websockets.http11 import Response

from llama_omni_py.server.gateway.workers import LocalWorkers
from llama_omni_py.server.lifeline import EXIT_LOAD_FAILED, LOAD_FAILED


class FakeWorkers(LocalWorkers):
    """LocalWorkers whose processes are this script (the tests' gateway over fake workers)."""

    def __init__(self, n: int, *fake_args: str):
        super().__init__(["cpu"] * n, [], pin=False)
        self.fake_args = list(fake_args)

    def command(self, device: str) -> list[str]:
        import os

        return [sys.executable, __file__, "--port", "0", "--parent-pid", str(os.getpid()), *self.fake_args]


def gateway_config(**kw):
    """A gateway that checks its workers often and restarts them at once."""
    from llama_omni_py.server.gateway import GatewayConfig

    return GatewayConfig(**{"port": 0, "health_interval_s": 0.2, "restart_backoff_s": (0.2,), **kw})


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--parent-pid", type=int)
    ap.add_argument("--deltas", type=int, default=40)
    ap.add_argument("--delay", type=float, default=0.05)
    ap.add_argument("--load-s", type=float, default=0.0, help="seconds /health says loading")
    ap.add_argument("--slots", type=int, default=1, help="sessions served at once")
    ap.add_argument("--voice", action="store_true", help="serve /ws/half_duplex and /v1/realtime too")
    ap.add_argument("--reject-ws", action="store_true", help="/health says ready; every WebSocket gets 503")
    ap.add_argument(
        "--fail-load", metavar="ERROR", help="after --load-s, report this load error and exit, as a real one"
    )
    args, _ = ap.parse_known_args()
    if args.parent_pid is not None:
        from llama_omni_py.server.lifeline import die_with_parent

        die_with_parent(args.parent_pid)
    started = time.monotonic()
    state = {"active": set(), "sessions": 0, "turns": 0, "most": 0}

    def reply(status: int, body: dict) -> Response:
        data = json.dumps(body).encode()
        headers = Headers([("Content-Type", "application/json"), ("Content-Length", str(len(data)))])
        return Response(status, HTTPStatus(status).phrase, headers, data)

    def process_request(connection, request):
        if request.path == "/health":
            if args.fail_load or time.monotonic() - started < args.load_s:
                return reply(503, {"status": "loading"})
            busy = len(state["active"])
            return reply(
                200,
                {
                    "status": "ready",
                    "session_active": busy > 0,
                    "slots": args.slots,
                    "slots_busy": busy,
                    "slots_free": args.slots - busy,
                    "most_at_once": state["most"],  # the most sessions it ever held at once
                    "capabilities": ["turn_based", *(["half_duplex"] if args.voice else [])],
                },
            )
        m = re.fullmatch(r"/sessions/([^/]+)/close", request.path)
        if m:
            state["active"].discard(m.group(1))
            return reply(200, {"ok": True})
        path = request.path.split("?", 1)[0]
        if args.reject_ws:
            return reply(503, {"error": "not now"})
        if path != "/backend" and not (args.voice and path in ("/ws/half_duplex", "/v1/realtime")):
            return reply(404, {"error": "no route"})
        return None

    async def deltas(ws, make) -> None:
        for i in range(args.deltas):
            await ws.send(json.dumps(make(i)))
            await asyncio.sleep(args.delay)

    async def half_duplex(ws):
        async for raw in ws:
            msg = json.loads(raw)
            if msg["type"] == "prepare":
                await ws.send(json.dumps({"type": "prepared", "session_id": "fake", "timeout_s": 180}))
            elif msg["type"] == "audio_chunk":
                await deltas(ws, lambda i: {"type": "chunk", "chunk_index": i, "text_delta": f"w{i} "})
                await ws.send(json.dumps({"type": "turn_done", "turn_index": 1, "text": ""}))
            elif msg["type"] == "stop":
                await ws.send(json.dumps({"type": "stopped"}))
                return

    async def realtime(ws):
        await ws.send(json.dumps({"type": "session.created", "session": {"type": "realtime"}}))
        async for raw in ws:
            msg = json.loads(raw)
            if msg["type"] == "response.create":
                response = {"id": "resp_fake", "object": "realtime.response", "status": "in_progress", "output": []}
                await ws.send(json.dumps({"type": "response.created", "response": response}))
                await deltas(ws, lambda i: {"type": "response.output_text.delta", "delta": f"w{i} "})
                await ws.send(json.dumps({"type": "response.done", "response": {**response, "status": "completed"}}))
            elif msg["type"] == "stop":
                return
            else:
                await ws.send(json.dumps({"type": "error", "error": {"code": "invalid_event", "message": msg["type"]}}))

    async def backend(ws):
        path = ws.request.path.split("?", 1)[0]
        if path != "/backend":
            await (half_duplex if path == "/ws/half_duplex" else realtime)(ws)
            return
        sid = None
        try:
            async for raw in ws:
                msg = json.loads(raw)
                if msg["type"] == "session.init":
                    if len(state["active"]) >= args.slots:
                        closed = {"type": "session.closed", "reason": "session_busy", "diagnostic": {"message": "busy"}}
                        await ws.send(json.dumps(closed))
                        await ws.close(1013, "session_busy")
                        return
                    sid = f"fake_{state['sessions']}"
                    state["sessions"] += 1
                    state["active"].add(sid)
                    state["most"] = max(state["most"], len(state["active"]))
                    await ws.send(json.dumps({"type": "session.created", "session_id": sid}))
                elif msg["type"] == "input.append":
                    rid = f"{sid}_resp"
                    for i in range(args.deltas):
                        ev = {"type": "response.output.delta", "kind": "text", "text": f"w{i} ", "response_id": rid}
                        await ws.send(json.dumps(ev))
                        await asyncio.sleep(args.delay)
                    state["turns"] += 1
                    done = {"type": "response.done", "response_id": rid, "text": "", "metrics": {"n_tokens": 1}}
                    await ws.send(json.dumps(done))
        finally:
            state["active"].discard(sid)

    async def run():
        from llama_omni_py.server.worker.routes import BodyConnection  # the close request's JSON body, as a worker

        async with serve(
            backend, args.host, args.port, process_request=process_request, create_connection=BodyConnection
        ) as server:
            port = server.sockets[0].getsockname()[1] if hasattr(server, "sockets") else None
            port = port or list(server.server.sockets)[0].getsockname()[1]
            print(json.dumps({"listening": f"http://{args.host}:{port}", "port": port}), flush=True)
            stop = asyncio.Event()
            for sig in (signal.SIGINT, signal.SIGTERM):
                asyncio.get_running_loop().add_signal_handler(sig, stop.set)
            if args.fail_load:
                await asyncio.sleep(args.load_s)
                print(json.dumps({LOAD_FAILED: args.fail_load}), flush=True)
                return EXIT_LOAD_FAILED
            await stop.wait()
        return 0

    sys.exit(asyncio.run(run()))


if __name__ == "__main__":
    main()
