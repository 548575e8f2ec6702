"""``WS /ws/duplex/{session_id}`` and ``WS /ws/half_duplex/{session_id}``: sessions that hold a
worker's slot for their whole life. The queue part is the demo's (``queued``, ``queue_update`` every few
seconds, always ``queue_done``); what runs on the worker is a handler registered for the
session type by the engine that serves it (``register``). Until a worker advertises the
capability, these routes answer with an error and close (1013). See docs/serving.md.
``POST /api/half_duplex/stop`` cuts the running reply of a half-duplex session."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re

from starlette.responses import JSONResponse
from starlette.websockets import WebSocket

from .. import jsonio
from ..auth import authorization_header
from .client_channel import ClientChannel, SlowReader
from .pool import NoWorkerFor, QueueFull

log = logging.getLogger(__name__)
HANDLERS: dict = {}  # session type -> async handler(websocket, channel, lease, gateway)
STOP_TIMEOUT_S = 10.0  # how long a relay waits for the worker to confirm the end of a session


def register(session_type: str, handler) -> None:
    """Plugs in the engine side of a whole-life session type ("omni_duplex", "audio_duplex",
    "half_duplex_audio"). The handler relays between the client and ``lease.worker`` until the
    session ends; it calls ``lease.touch()`` on client activity so idle reclaim can tell."""
    HANDLERS[session_type] = handler


def _clean(session_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", session_id)[:128]


async def ws_duplex(websocket: WebSocket) -> None:
    sid = _clean(websocket.path_params["session_id"])
    await whole_life(websocket, "audio_duplex" if sid.startswith("adx_") else "omni_duplex", sid)


async def ws_half_duplex(websocket: WebSocket) -> None:
    await whole_life(websocket, "half_duplex_audio", _clean(websocket.path_params["session_id"]))


def _demo_error(message: str, code: str) -> dict:
    return {"type": "error", "error": message}


def _demo_timeout(idle: float) -> dict:
    return {"type": "timeout", "reason": f"idle for {idle:.0f} s"}


async def whole_life(
    websocket: WebSocket,
    type_name: str,
    sid: str,
    queue_messages: bool = True,
    error_event=_demo_error,
    timeout_event=_demo_timeout,
) -> None:
    """Accepts, queues (telling the client when ``queue_messages``), runs the session type's
    handler for the session's life, gives the worker back. Refusals and the idle reclaim reach
    the client as ``error_event(message, code)`` / ``timeout_event(idle_s)``."""
    gw = websocket.app.state.gateway
    cfg = gw.config
    await websocket.accept()
    channel = ClientChannel(websocket, cfg.send_buffer_bytes, cfg.send_timeout_s)
    notify = channel.send if queue_messages else None
    try:
        async with gw.pool.lease(type_name, sid, notify=notify, always_done=queue_messages) as lease:
            handler = HANDLERS.get(type_name)
            if handler is None:  # a worker advertises the capability but no engine side is plugged in
                raise NoWorkerFor(f"this gateway has no handler for {type_name} sessions")
            await gw.pool.hold_for_life(
                lease,
                handler(websocket, channel, lease, gw),
                cfg.idle_release_s,
                cfg.idle_timeout_s,
                lambda idle: channel.put(timeout_event(idle)),
            )
    except (NoWorkerFor, QueueFull) as e:
        if isinstance(e, QueueFull):
            gw.metrics.refusals.labels(reason="queue_full").inc()
            gw.refusal_log("queue_full", "duplex session refused: %s", e)
        with contextlib.suppress(SlowReader):
            channel.put(error_event(str(e), "queue_full" if isinstance(e, QueueFull) else "no_worker"))
        channel.close(1013, "Queue full" if isinstance(e, QueueFull) else "No worker available")
    except SlowReader:
        pass
    finally:
        channel.close(1000, "session ended")
        await channel.closed(cfg.send_timeout_s + 1)


async def relay_duplex(websocket: WebSocket, channel: ClientChannel, lease, gw) -> None:
    """The full-duplex handler: relays messages verbatim between the client and the worker's
    ``/ws/duplex`` until either side ends; ``pause``/``resume`` also set the worker's state."""
    await relay(websocket, channel, lease, "/ws/duplex")


async def relay_half_duplex(websocket: WebSocket, channel: ClientChannel, lease, gw) -> None:
    """The half-duplex handler: relays messages verbatim to and from the worker's
    ``/ws/half_duplex``."""
    await relay(websocket, channel, lease, "/ws/half_duplex")


def worker_ws_url(worker, path: str, session_id: str | None, query: dict | None = None) -> str:
    from urllib.parse import urlencode

    params = urlencode({"session_id": session_id or "", **(query or {})})
    return worker.url.replace("http://", "ws://", 1) + f"{path}?{params}"


async def relay(websocket: WebSocket, channel: ClientChannel, lease, path: str, query: dict | None = None) -> None:
    """Relays text messages verbatim between the client and the worker's ``path`` until either
    side ends; a client that leaves without ``stop`` has the worker's session stopped for it."""
    import json

    from starlette.websockets import WebSocketDisconnect
    from websockets.asyncio.client import connect
    from websockets.exceptions import ConnectionClosed

    worker = lease.worker
    url = worker_ws_url(worker, path, lease.ticket.session_id, query)
    headers = authorization_header(worker.secret)
    async with connect(url, max_size=None, open_timeout=10, ping_interval=None, additional_headers=headers) as upstream:

        async def client_to_worker() -> None:
            while True:
                try:
                    text = await websocket.receive_text()
                except WebSocketDisconnect:
                    return
                lease.touch()
                kind = None
                with contextlib.suppress(jsonio.BadJson):
                    kind = jsonio.loads(text).get("type")
                if kind == "client_diagnostic":  # the demo's gateway keeps these to itself: no reply
                    log.debug("client_diagnostic from %s: %s", lease.ticket.session_id, text[:200])
                    continue
                if kind in ("pause", "resume"):
                    lease.status = "duplex_paused" if kind == "pause" else lease.type.busy_status
                await upstream.send(text)

        async def worker_to_client() -> None:
            with contextlib.suppress(ConnectionClosed):
                async for text in upstream:
                    channel.put(json.loads(text))

        tasks = [asyncio.create_task(client_to_worker()), asyncio.create_task(worker_to_client())]
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            if tasks[0] in done and not tasks[1].done():
                # The client left without `stop`: end the worker's session the same way, so that
                # its slot is free before the gateway gives it to the next session.
                with contextlib.suppress(ConnectionClosed):
                    await upstream.send(json.dumps({"type": "stop"}))
                    await asyncio.wait({tasks[1]}, timeout=STOP_TIMEOUT_S)
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)


async def half_duplex_stop(request) -> JSONResponse:
    """``POST /api/half_duplex/stop {"session_id"}``: cuts the running reply of that session (the
    session goes on listening), as the demo's stop button does."""
    from .backend_client import WorkerUnavailable, http_json

    try:
        body = jsonio.loads(await request.body(), "the body")
    except jsonio.BadJson as e:
        return JSONResponse({"success": False, "message": str(e)}, 400)
    sid = body.get("session_id")
    if not isinstance(sid, str) or not sid:
        return JSONResponse({"success": False, "message": "session_id (a string) is required"}, 400)
    sid = _clean(sid)
    lease = request.app.state.gateway.pool.lease_of(sid, "half_duplex_audio")
    if lease is None:
        return JSONResponse({"success": False, "message": f"no half-duplex session {sid} is running"}, 404)
    worker = lease.worker
    try:
        status, answer = await asyncio.to_thread(
            http_json, f"{worker.url}/half_duplex/stop?session_id={sid}", "POST", None, 5.0, worker.secret
        )
    except WorkerUnavailable as e:
        return JSONResponse({"success": False, "message": str(e)}, 502)
    return JSONResponse(answer, 200 if status == 200 else 404)


register("audio_duplex", relay_duplex)
register("omni_duplex", relay_duplex)
register("half_duplex_audio", relay_half_duplex)
