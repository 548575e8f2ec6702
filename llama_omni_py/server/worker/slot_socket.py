"""What every WebSocket that holds a slot of the worker's engine shares (the demo's duplex and
half-duplex modes, the Realtime API in both its modes): JSON frames sent one at a time, a slot
claimed for the connection's life -- refused with the protocol's error frame and close code 1013
when every slot is taken -- and released however the connection ends."""

from __future__ import annotations

import asyncio
import contextlib
import json
from urllib.parse import parse_qs, urlsplit

from websockets.exceptions import ConnectionClosed

from ...errors import MediaError, OmniError, ProtocolError
from .. import jsonio


def query(ws, key: str) -> str | None:
    """The first value of ``key`` in the connection's query string (None: absent)."""
    try:
        values = parse_qs(urlsplit(ws.request.path).query).get(key)
    except AttributeError:
        return None
    return values[0][:128] if values else None


class EngineSocket:
    """Subclasses implement ``_serve`` (the message loop) and ``_end`` (frees what the session
    holds, then ``engine.release``; idempotent); ``_open`` starts their engine session on
    ``self.session`` (the claimed slot's OmniSession) and ``refusal`` writes the busy error in
    their protocol."""

    def __init__(self, ws, server, session_id: str):
        self.ws, self.server, self.host = ws, server, server.host
        self.id = session_id
        self.session = None  # the OmniSession of the slot this connection holds
        self._send_lock = asyncio.Lock()

    async def send(self, msg: dict) -> None:
        async with self._send_lock:
            await self.ws.send(json.dumps(msg))

    def refusal(self, code: str, message: str) -> dict:
        return {"type": "error", "error": message}

    async def run(self) -> None:
        try:
            self.session = await self.host.claim(self.id)
        except ProtocolError as refused:
            with contextlib.suppress(ConnectionClosed):
                await self.send(self.refusal(refused.code, str(refused)))
                await self.ws.close(1013, refused.code)
            return
        try:
            await self._open()
            await self._serve()
        except ConnectionClosed:
            pass
        finally:
            await self._end()

    async def _handle(self, raw) -> bool:
        """One message of the demo's protocols, dispatched; a malformed or refused one is an
        ``error`` message and the session goes on. True when the session ends."""
        try:
            msg = jsonio.loads(raw, "the message")
            if not isinstance(msg.get("type"), str):
                raise ProtocolError("messages are JSON objects with a string `type`", "invalid_json")
            return await self._dispatch(msg) == "stop"
        except (ValueError, ProtocolError, MediaError, OmniError) as e:
            await self.send({"type": "error", "error": str(e)})
            return False

    async def _dispatch(self, msg: dict) -> str | None:
        raise NotImplementedError

    async def _open(self) -> None:
        """Starts the connection's engine session (its slot is claimed)."""

    async def _serve(self) -> None:
        raise NotImplementedError

    async def _end(self) -> None:
        raise NotImplementedError
