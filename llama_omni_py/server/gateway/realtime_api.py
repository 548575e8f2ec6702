"""``WS /v1/realtime?model=...``: the OpenAI Realtime API over the worker pool. A connection holds
a worker for its life (session type ``realtime``, served by workers with the ``half_duplex``
capability); it waits in the queue silently (the API has no queue events) and is then relayed
to the worker's ``/v1/realtime`` (server/realtime.py; with ``?mode=full_duplex``
server/realtime_duplex.py). Browsers offer the subprotocol ``realtime`` (echoed) and may give
their API key as the subprotocol ``openai-insecure-api-key.KEY``. Refusals are Realtime
``error`` events and a close (1013); a worker that dies ends the running response as ``failed``
and the session with an ``error`` (1011). API keys apply as on every /v1 route. docs/serving.md."""

from __future__ import annotations

from starlette.websockets import WebSocket

from ..realtime_events import error, event, new_id
from .duplex_api import Face, register, relay, whole_life

CLIENT_CODES = frozenset({"invalid_json"})  # the client's fault; every other refusal is the server's


class RealtimeFace(Face):
    """The Realtime API's shapes: no queue messages, ``error`` events, and a worker's death ends
    the response in progress as ``failed`` before the ``error``."""

    queue_messages = False
    subprotocol = "realtime"

    def __init__(self):
        self.response: dict | None = None  # the response the worker has started and not finished

    def error(self, message: str, code: str) -> dict:
        return error(message, code, kind="invalid_request_error" if code in CLIENT_CODES else "server_error")

    def timeout(self, idle: float) -> dict:
        return error(f"no event for {idle:.0f} s: the session was closed", "idle_timeout")

    def seen(self, ev: dict) -> None:
        if ev.get("type") == "response.created" and isinstance(ev.get("response"), dict):
            self.response = ev["response"]
        elif ev.get("type") == "response.done":
            self.response = None

    def worker_lost(self, message: str) -> list[dict]:
        out = []
        failure = {"type": "server_error", "code": "worker_failed", "message": message}
        if self.response is not None:
            failed = {**self.response, "status": "failed", "status_details": {"type": "failed", "error": failure}}
            out.append(event("response.done", response={**failed, "output": []}))
            self.response = None
        return out + [self.error(message, "worker_failed")]


async def realtime(websocket: WebSocket) -> None:
    """``?mode=full_duplex`` runs the session on a full-duplex engine session instead of the
    voice activity detector (session type ``realtime_duplex``)."""
    full = websocket.query_params.get("mode") == "full_duplex"
    await whole_life(websocket, "realtime_duplex" if full else "realtime", new_id("rt"), RealtimeFace())


async def relay_realtime(websocket: WebSocket, channel, lease, gw, face: Face) -> None:
    model = websocket.query_params.get("model") or "minicpm-o-4.5"
    query = {"model": model[:128]}
    if lease.type.name == "realtime_duplex":
        query["mode"] = "full_duplex"
    await relay(websocket, channel, lease, face, "/v1/realtime", query)


register("realtime", relay_realtime)
register("realtime_duplex", relay_realtime)
