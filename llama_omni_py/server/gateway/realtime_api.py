"""``WS /v1/realtime?model=...``: the OpenAI Realtime API over the worker pool. A connection holds
a worker for its life (session type ``realtime``, served by workers with the ``half_duplex``
capability); it waits in the queue silently (the API has no queue events) and is then relayed
to the worker's ``/v1/realtime`` (server/realtime.py). Refusals are Realtime ``error`` events
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
    await whole_life(websocket, "realtime", new_id("rt"), False, _error, _timeout)


async def relay_realtime(websocket: WebSocket, channel, lease, gw) -> None:
    model = websocket.query_params.get("model") or "minicpm-o-4.5"
    await relay(websocket, channel, lease, "/v1/realtime", {"model": model[:128]})


register("realtime", relay_realtime)
