"""``WS /ws/duplex/{session_id}`` and ``WS /ws/half_duplex/{session_id}``: sessions that hold a
worker's slot for their whole life. The queue part is the demo's (``queued``, ``queue_update`` every few
seconds, always ``queue_done``); what runs on the worker is a handler registered for the
session type by the engine that serves it (``register``). Until a worker advertises the
capability, these routes answer with an error and close (1013). A worker that cannot be
reached when the session starts is marked offline and the session goes to another one; a worker
that dies during the session is told to the client in its protocol's failure shape (``Face``)
and the socket closes (1011). See docs/serving.md.
``POST /api/half_duplex/stop`` cuts the running reply of a half-duplex session."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re

from starlette.responses import JSONResponse
from starlette.websockets import WebSocket

from .. import jsonio
from ..auth import authorization_header
from .backend_client import WorkerUnavailable
from .bodies import SMALL_BODY_BYTES, body_error, read_json
from .client_channel import ClientChannel, SlowReader
from .pool import NoWorkerFor, QueueFull

log = logging.getLogger(__name__)
HANDLERS: dict = {}  # session type -> async handler(websocket, channel, lease, gateway, face)
STOP_TIMEOUT_S = 10.0  # how long a relay waits for the worker to confirm the end of a session
WORKER_FAILED = 1011  # the close code after the worker of a session died
BINARY_REFUSED = "binary frames are not part of this protocol: send JSON text"


class WorkerLost(Exception):
    """The worker of a running session went away (its connection dropped without a close)."""


class Face:
    """How a whole-life session's protocol speaks to its client: the demo's messages (queue
    messages, ``{"type": "error"}``, ``{"type": "timeout"}``) here; the Realtime API has its own
    (realtime_api.py). One per connection: ``seen`` follows the worker's events on their way."""

    queue_messages = True  # queued / queue_update / queue_done
    subprotocol: str | None = None  # echoed in the handshake when the client offers it

    def error(self, message: str, code: str) -> dict:
        return {"type": "error", "error": message, "code": code}

    def timeout(self, idle: float) -> dict:
        return {"type": "timeout", "reason": f"idle for {idle:.0f} s"}

    def seen(self, event: dict) -> None:
        """A worker event on its way to the client."""

    def worker_lost(self, message: str) -> list[dict]:
        """What the client is told when the worker of its session died."""
        return [self.error(f"worker_failed: {message}", "worker_failed")]


def register(session_type: str, handler) -> None:
    """Plugs in the engine side of a whole-life session type ("omni_duplex", "audio_duplex",
    "half_duplex_audio"). The handler relays between the client and ``lease.worker`` until the
    session ends; it calls ``lease.touch()`` on client activity so idle reclaim can tell. It
    raises WorkerUnavailable when the worker cannot be reached before anything was relayed (the
    session is then tried on another worker) and WorkerLost when it died later."""
    HANDLERS[session_type] = handler


def _clean(session_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", session_id)[:128]


async def ws_duplex(websocket: WebSocket) -> None:
    sid = _clean(websocket.path_params["session_id"])
    await whole_life(websocket, "audio_duplex" if sid.startswith("adx_") else "omni_duplex", sid)


async def ws_half_duplex(websocket: WebSocket) -> None:
    await whole_life(websocket, "half_duplex_audio", _clean(websocket.path_params["session_id"]))


async def whole_life(websocket: WebSocket, type_name: str, sid: str, face: Face | None = None) -> None:
    """Accepts, queues (telling the client when ``face.queue_messages``), runs the session type's
    handler for the session's life, gives the worker back. Refusals, the idle reclaim and a
    failed worker reach the client in ``face``'s shapes."""
    gw = websocket.app.state.gateway
    cfg = gw.config
    face = face or Face()
    offered = websocket.scope.get("subprotocols") or ()
    await websocket.accept(subprotocol=face.subprotocol if face.subprotocol in offered else None)
    channel = ClientChannel(websocket, cfg.send_buffer_bytes, cfg.send_timeout_s)
    notify = channel.send if face.queue_messages else None
    gw.clients[channel] = face  # told when the gateway shuts down
    try:
        for attempt in (1, 2):  # a worker unreachable at the start: the session goes to another
            if await _hold(websocket, gw, type_name, sid, face, channel, notify if attempt == 1 else None, attempt):
                break
    except (NoWorkerFor, QueueFull, WorkerUnavailable) as e:
        code = "queue_full" if isinstance(e, QueueFull) else "no_worker"
        if isinstance(e, QueueFull):
            gw.metrics.refusals.labels(reason="queue_full").inc()
            gw.refusal_log("queue_full", "duplex session refused: %s", e)
        with contextlib.suppress(SlowReader):
            channel.put(face.error(str(e), code))
        channel.close(1013, "Queue full" if isinstance(e, QueueFull) else "No worker available")
    except SlowReader:
        pass
    finally:
        gw.clients.pop(channel, None)
        channel.close(1000, "session ended")
        await channel.closed(cfg.send_timeout_s + 1)


async def _hold(websocket, gw, type_name: str, sid: str, face: Face, channel, notify, attempt: int) -> bool:
    """One lease of a worker for the session, its handler run for the session's life; False when
    the worker could not be reached (marked offline; the caller tries once more)."""
    cfg = gw.config
    async with gw.pool.lease(type_name, sid, notify=notify, always_done=notify is not None) as lease:
        handler = HANDLERS.get(type_name)
        if handler is None:  # a worker advertises the capability but no engine side is plugged in
            raise NoWorkerFor(f"this gateway has no handler for {type_name} sessions")
        try:
            await gw.pool.hold_for_life(
                lease,
                handler(websocket, channel, lease, gw, face),
                cfg.idle_release_s,
                cfg.idle_timeout_s,
                lambda idle: channel.put(face.timeout(idle)),
            )
        except WorkerUnavailable as e:  # nothing was relayed yet: another worker may serve
            gw.pool.mark_down(lease.worker, "offline", str(e))
            log.warning("worker %s unavailable for a %s session: %s", lease.worker.id, type_name, e)
            if attempt == 2:
                raise
            return False
        except WorkerLost as e:
            gw.pool.mark_down(lease.worker, "offline", str(e))
            gw.metrics.worker_failures.inc()
            log.warning("worker %s failed during a %s session: %s", lease.worker.id, type_name, e)
            for event in face.worker_lost(f"the worker serving this session failed ({e})"):
                channel.put(event)
            channel.close(WORKER_FAILED, "worker failed")
    return True


async def relay_duplex(websocket: WebSocket, channel: ClientChannel, lease, gw, face: Face) -> None:
    """The full-duplex handler: relays messages verbatim between the client and the worker's
    ``/ws/duplex`` until either side ends; ``pause``/``resume`` also set the worker's state."""
    await relay(websocket, channel, lease, face, "/ws/duplex")


async def relay_half_duplex(websocket: WebSocket, channel: ClientChannel, lease, gw, face: Face) -> None:
    """The half-duplex handler: relays messages verbatim to and from the worker's
    ``/ws/half_duplex``."""
    await relay(websocket, channel, lease, face, "/ws/half_duplex")


def worker_ws_url(worker, path: str, session_id: str | None, query: dict | None = None) -> str:
    from urllib.parse import urlencode

    params = urlencode({"session_id": session_id or "", **(query or {})})
    return worker.url.replace("http://", "ws://", 1) + f"{path}?{params}"


async def _open_upstream(url: str, headers: dict):
    """The worker's side of the session; WorkerUnavailable when it cannot be reached."""
    from websockets.asyncio.client import connect
    from websockets.exceptions import InvalidHandshake, InvalidURI

    try:
        return await connect(url, max_size=None, open_timeout=10, ping_interval=None, additional_headers=headers)
    except (OSError, asyncio.TimeoutError, InvalidHandshake, InvalidURI) as e:
        raise WorkerUnavailable(f"{url.split('?', 1)[0]}: {e}") from None


async def relay(websocket: WebSocket, channel: ClientChannel, lease, face: Face, path: str, query=None) -> None:
    """Relays text messages verbatim between the client and the worker's ``path`` until either
    side ends; a client that leaves without ``stop`` has the worker's session stopped for it. A
    binary frame from the client is refused with an error and the session goes on. Raises
    WorkerLost when the worker's connection dropped without a close (the worker died)."""
    from websockets.exceptions import ConnectionClosed, ConnectionClosedError

    worker = lease.worker
    url = worker_ws_url(worker, path, lease.ticket.session_id, query)
    upstream = await _open_upstream(url, authorization_header(worker.secret))
    async with upstream:

        async def client_to_worker() -> None:
            while True:
                msg = await websocket.receive()
                if msg["type"] == "websocket.disconnect":
                    return
                lease.touch()
                text = msg.get("text")
                if text is None:
                    channel.put(face.error(BINARY_REFUSED, "invalid_json"))
                    continue
                kind = None
                with contextlib.suppress(jsonio.BadJson, AttributeError):
                    kind = jsonio.loads(text).get("type")
                if kind == "client_diagnostic":  # the demo's gateway keeps these to itself: no reply
                    log.debug("client_diagnostic from %s: %s", lease.ticket.session_id, text[:200])
                    continue
                if kind in ("pause", "resume"):
                    lease.status = "duplex_paused" if kind == "pause" else lease.type.busy_status
                with contextlib.suppress(ConnectionClosed):  # the worker's side ends the relay
                    await upstream.send(text)

        async def worker_to_client() -> None:
            try:
                async for text in upstream:
                    event = json.loads(text)
                    face.seen(event)
                    channel.put(event)
            except ConnectionClosedError as e:
                if e.rcvd is None:  # no close frame: the worker's process or host went away
                    raise WorkerLost(f"its connection dropped: {e}") from None
                # the worker closed with an error code: it said why in its own events

        tasks = [asyncio.create_task(client_to_worker()), asyncio.create_task(worker_to_client())]
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            if tasks[0] in done and not tasks[1].done():
                # The client left without `stop`: end the worker's session the same way, so that
                # its slot is free before the gateway gives it to the next session.
                with contextlib.suppress(ConnectionClosed):
                    await upstream.send(json.dumps({"type": "stop"}))
                    await asyncio.wait({tasks[1]}, timeout=STOP_TIMEOUT_S)
            for t in done:
                if not t.cancelled() and t.exception() is not None:
                    raise t.exception()
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)


async def half_duplex_stop(request) -> JSONResponse:
    """``POST /api/half_duplex/stop {"session_id"}``: cuts the running reply of that session (the
    session goes on listening), as the demo's stop button does."""
    from .backend_client import http_json

    try:
        body = await read_json(request, SMALL_BODY_BYTES)
    except ValueError as e:
        status, message = body_error(e)
        return JSONResponse({"success": False, "message": message}, status)
    sid = body.get("session_id") if isinstance(body, dict) else None
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
