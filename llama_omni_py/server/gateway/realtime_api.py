"""``WS /v1/realtime?model=...``: the OpenAI Realtime API over the worker pool. A connection holds
a worker for its life (session type ``realtime``, served by workers with the ``half_duplex``
capability); it waits in the queue silently (the API has no queue events) and is then relayed
to the worker's ``/v1/realtime`` (server/realtime.py; with ``?mode=full_duplex``
server/realtime_duplex.py). Refusals are Realtime ``error`` events
and a close (1013). API keys apply as on every /v1 route. docs/serving.md."""

from __future__ import annotations

from starlette.websockets import WebSocket

from ..realtime_events import error, new_id
from .duplex_api import register, relay, whole_life


def _error(message: str, code: str) -> dict:
    return error(message, code, kind="server_error")


def _timeout(idle: float) -> dict:
    return error(f"no event for {idle:.0f} s: the session was closed", "idle_timeout")


async def realtime(websocket: WebSocket) -> None:
    """``?mode=full_duplex`` runs the session on a full-duplex engine session instead of the
    voice activity detector (session type ``realtime_duplex``)."""
    full = websocket.query_params.get("mode") == "full_duplex"
    await whole_life(websocket, "realtime_duplex" if full else "realtime", new_id("rt"), False, _error, _timeout)


async def relay_realtime(websocket: WebSocket, channel, lease, gw) -> None:
    model = websocket.query_params.get("model") or "minicpm-o-4.5"
    query = {"model": model[:128]}
    if lease.type.name == "realtime_duplex":
        query["mode"] = "full_duplex"
    await relay(websocket, channel, lease, "/v1/realtime", query)


register("realtime", relay_realtime)
register("realtime_duplex", relay_realtime)
