"""One WebSocket on a worker's ``/ws/duplex``: the MiniCPM-o demo's full-duplex protocol
(docs/server-protocol.md, "Full duplex"). The gateway relays its public ``/ws/duplex/{id}``
here after the queue. Messages are handled one at a time, in order, like the demo's worker: a
unit's ``result`` goes out before the next message is read. Errors in a message are an ``error``
event and the session goes on; a lost socket or ``stop`` ends it and frees its slot."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid

from websockets.exceptions import ConnectionClosed

from ....errors import ProtocolError
from ..slot_socket import EngineSocket, query
from . import protocol as D

log = logging.getLogger(__name__)
PAUSE_TIMEOUT_S = 60.0  # a paused session gives its worker back after this


class DemoDuplexConnection(EngineSocket):
    def __init__(self, ws, server):
        super().__init__(ws, server, query(ws, "session_id") or uuid.uuid4().hex)
        self.cfg = server.config
        self.duplex = None
        self.paused = False
        self._watchdog: asyncio.Task | None = None

    async def _end(self) -> None:
        """Frees the slot (idempotent)."""
        if self._watchdog is not None:
            self._watchdog.cancel()
        duplex, self.duplex = self.duplex, None
        if duplex is not None:
            await asyncio.to_thread(duplex.close)
        await self.host.release(self.id)

    async def _serve(self) -> None:
        while True:
            try:
                raw = await asyncio.wait_for(self.ws.recv(), self.cfg.idle_timeout_s)
            except asyncio.TimeoutError:
                await self.send({"type": "timeout", "reason": f"no message for {self.cfg.idle_timeout_s:g} s"})
                await self.ws.close(1000, "idle")
                return
            if await self._handle(raw):
                return

    async def _dispatch(self, msg: dict) -> str | None:
        kind = msg["type"]
        if kind == "prepare":
            start = D.parse_prepare(msg)
            if self.duplex is not None:
                await asyncio.to_thread(self.duplex.close)
            self.duplex = await self.host.open_duplex(self.session, start)
            await self.send({"type": "prepared", "prompt_length": self.duplex.context.n_keep})
        elif kind == "audio_chunk":
            if self.paused:
                raise ProtocolError("Worker is paused", "paused")
            if self.duplex is None:
                raise ProtocolError("send prepare first", "not_prepared")
            unit = D.parse_audio_chunk(msg)
            result = await asyncio.to_thread(
                self.duplex.push, unit.audio, unit.frames or None, unit.force_listen, unit.max_slice_nums
            )
            await self.send(D.result_event(result))
        elif kind == "pause":
            timeout = msg.get("timeout", PAUSE_TIMEOUT_S)
            if not isinstance(timeout, (int, float)) or not 0 < timeout <= 3600:
                raise ProtocolError("pause.timeout must be a number of seconds in (0, 3600]", "invalid_input")
            self.paused = True
            self._watchdog = asyncio.create_task(self._pause_timeout(float(timeout)))
            await self.send({"type": "paused", "timeout": float(timeout)})
        elif kind == "resume":
            self.paused = False
            if self._watchdog is not None:
                self._watchdog.cancel()
            await self.send({"type": "resumed"})
        elif kind == "interrupt":  # as the demo: answered, and nothing else (force_listen is the barge-in)
            await self.send({"type": "interrupted"})
        elif kind == "client_diagnostic":  # the demo page's playback report: kept by nobody, answered never
            log.debug("client_diagnostic: %s", str(msg)[:200])
        elif kind == "stop":
            await self._end()  # a client that hears "stopped" may start the next session at once
            await self.send({"type": "stopped"})
            await self.ws.close(1000, "stopped")
            return "stop"
        else:  # video_frame included: frames travel in audio_chunk.frame_base64_list
            raise ProtocolError(f"Unknown message type: {kind}", "unexpected_message_type")
        return None

    async def _pause_timeout(self, seconds: float) -> None:
        await asyncio.sleep(seconds)
        with contextlib.suppress(ConnectionClosed):
            await self.send({"type": "timeout", "reason": f"Pause timeout ({seconds:.1f}s)"})
            await self.ws.close(1000, "pause timeout")
