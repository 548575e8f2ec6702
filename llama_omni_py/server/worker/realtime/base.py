"""What both modes of ``/v1/realtime`` share: the session's configuration from the query
(``model``; the gateway names the session), errors as Realtime ``error`` events, and the event
loop -- an idle client is closed, a malformed or refused event is an error event and the session
goes on, the gateway's own ``stop`` (its client left) ends it."""

from __future__ import annotations

import asyncio

from ....errors import MediaError, OmniError, ProtocolError
from ... import jsonio
from ... import realtime_events as R
from ..slot_socket import EngineSocket, query

DEFAULT_MODEL = "minicpm-o-4.5"


class RealtimeSocket(EngineSocket):
    """Subclasses implement ``_dispatch(event)`` (returns "stop" to end the session)."""

    def __init__(self, ws, server, **config):
        cfg = R.RealtimeConfig(model=query(ws, "model") or DEFAULT_MODEL, **config)
        super().__init__(ws, server, query(ws, "session_id") or cfg.id)
        self.cfg = cfg
        self.via_gateway = query(ws, "session_id") is not None  # the gateway names the session

    def refusal(self, code: str, message: str) -> dict:
        return R.error(message, code, kind="server_error")

    def _recv_timeout(self) -> float | None:
        """How long to wait for the next event before closing an idle session (None: forever)."""
        return self.server.config.idle_timeout_s

    async def _serve(self) -> None:
        while True:
            try:
                raw = await asyncio.wait_for(self.ws.recv(), self._recv_timeout())
            except asyncio.TimeoutError:
                await self.send(R.error("no event for too long; closing", "idle_timeout"))
                await self.ws.close(1000, "idle")
                return
            event_id = None
            try:
                msg = jsonio.loads(raw, "the event")
                event_id = msg.get("event_id") if isinstance(msg.get("event_id"), str) else None
                if not isinstance(msg.get("type"), str):
                    raise ProtocolError("events are JSON objects with a string `type`", "invalid_json")
                if msg["type"] == "stop" and self.via_gateway:  # the gateway's own: its client has left
                    await self._end()
                    await self.ws.close(1000, "client left")
                    return
                if await self._dispatch(msg) == "stop":
                    return
            except (ValueError, ProtocolError, MediaError, OmniError) as e:  # the session goes on
                code, param = getattr(e, "code", "invalid_value"), getattr(e, "param", None)
                await self.send(R.error(str(e), code, event_id, param))
