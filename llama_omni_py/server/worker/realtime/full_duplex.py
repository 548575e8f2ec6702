"""``/v1/realtime?mode=full_duplex``: the OpenAI Realtime API over a full-duplex session. The
model listens and speaks at once and decides itself when to take and give back the turn
(docs/duplex.md); appended audio goes to it one second at a time, and whenever it speaks the
speech is a Realtime response: ``response.created`` when it starts, transcript and audio deltas,
``response.done`` when it gives the turn back. ``response.cancel`` is barge-in (the next second
listens). There is no input buffer to commit and no server VAD: the model is the turn detector.
docs/serving.md, "OpenAI Realtime API"."""

from __future__ import annotations

import asyncio
import logging

import numpy as np

from ....constants import INPUT_SAMPLE_RATE
from ....errors import ProtocolError
from ... import realtime_events as R
from ..duplex.protocol import DuplexStart
from .base import RealtimeSocket
from .response import ResponseEvents

log = logging.getLogger(__name__)
UNIT = INPUT_SAMPLE_RATE  # one second of 16 kHz audio per duplex unit
HALF_DUPLEX_ONLY = (
    "input_audio_buffer.commit",
    "input_audio_buffer.clear",
    "conversation.item.create",
    "conversation.item.truncate",
    "response.create",
)


class RealtimeDuplexConnection(RealtimeSocket):
    def __init__(self, ws, server):
        super().__init__(ws, server, turn_detection=None)
        self.duplex = None
        self.heard = np.zeros(0, np.float32)  # appended audio under one unit
        self.units = 0
        self.out: ResponseEvents | None = None  # the response being spoken
        self.last_item: str | None = None
        self.cancelled = False

    async def _open(self) -> None:
        self.duplex = await self.host.open_duplex(self.session, DuplexStart())
        await self.send(R.event("session.created", session=self.cfg.session()))

    async def _end(self) -> None:
        duplex, self.duplex = self.duplex, None
        if duplex is not None:
            await asyncio.to_thread(duplex.close)
        await self.host.release(self.id)

    async def _dispatch(self, msg: dict) -> str | None:
        kind = msg["type"]
        if kind == "session.update":
            s, before = msg.get("session"), dict(self.cfg.__dict__)
            self.cfg.update(s)  # checks the whole update first
            late = self.units and self.cfg.instructions != before["instructions"]
            if self.cfg.turn_detection is not None or late:  # refused: the update changes nothing
                self.cfg.__dict__.update(before)
                why = "takes instructions only before the first audio" if late else "has no turn_detection"
                raise ProtocolError(f"full duplex {why}: the model takes turns itself", "invalid_value")
            if self.cfg.instructions != before["instructions"]:  # the system prompt opens the session
                await asyncio.to_thread(self.duplex.close)
                self.duplex = await self.host.open_duplex(self.session, DuplexStart(self.cfg.instructions or None))
            await self.send(R.event("session.updated", session=self.cfg.session()))
        elif kind == "input_audio_buffer.append":
            self.heard = np.concatenate([self.heard, R.pcm16_in(msg.get("audio"), "audio")])
            while self.heard.size >= UNIT:
                unit, self.heard = self.heard[:UNIT], self.heard[UNIT:]
                await self._unit(unit)
        elif kind == "response.cancel":
            if self.out is None:
                raise ProtocolError("there is no response in progress to cancel", "response_cancel_not_active")
            self.duplex.interrupt()  # the next second listens
            self.cancelled = True
        elif kind in HALF_DUPLEX_ONLY:
            raise ProtocolError(f"{kind} is not served in full duplex (the model takes turns itself)", "invalid_event")
        else:
            raise ProtocolError(f"unsupported event type: {kind}", "invalid_event")
        return None

    async def _item_added(self, item: dict) -> None:
        await self.send(R.event("conversation.item.added", item=item, previous_item_id=self.last_item))
        await self.send(R.event("conversation.item.done", item=item, previous_item_id=self.last_item))
        self.last_item = item["id"]

    async def _unit(self, audio: np.ndarray) -> None:
        """One second in: the model's decision, and what it said, as response events."""
        r = await asyncio.to_thread(self.duplex.push, audio)
        self.units += 1
        modality = self.cfg.output_modalities[0]
        if not r.is_listen:
            if self.out is None:
                self.out, self.cancelled = ResponseEvents(self.send, self._item_added, self.cfg, modality), False
                await self.out.start()
            await self.out.text(r.text)
            await self.out.audio(r.audio)
        if self.out is not None and (r.is_listen or r.end_of_turn):
            out, self.out = self.out, None
            details = {"type": "cancelled", "reason": "client_cancelled"} if self.cancelled else None
            await out.finish("cancelled" if self.cancelled else "completed", details)
