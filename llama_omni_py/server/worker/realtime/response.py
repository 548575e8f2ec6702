"""The server events of one Realtime API response, in the order the API sends them, written once
for the half-duplex (realtime.py) and full-duplex (realtime_duplex.py) faces of /v1/realtime."""

from __future__ import annotations

import numpy as np

from ... import realtime_events as R


class ResponseEvents:
    """``start()``, then ``text()`` / ``audio()`` as the reply comes, then ``finish()``.
    ``send(event)`` writes an event; ``item_added(item)`` announces a conversation item (the
    connection keeps the item order)."""

    def __init__(self, send, item_added, cfg: R.RealtimeConfig, modality: str):
        self.send, self.item_added, self.cfg, self.modality = send, item_added, cfg, modality
        self.id, self.item_id = R.new_id("resp"), R.new_id("item")
        self.ids = {"response_id": self.id, "item_id": self.item_id, "output_index": 0, "content_index": 0}
        self.transcript: list[str] = []
        self.audio_samples = 0

    async def start(self) -> None:
        created = R.response(self.id, "in_progress", self.cfg, self.modality)
        await self.send(R.event("response.created", response=created))
        item = R.assistant_item(self.item_id, "in_progress", self.modality)
        await self.send(R.event("response.output_item.added", response_id=self.id, output_index=0, item=item))
        await self.item_added(item)
        part = {"type": "audio" if self.modality == "audio" else "text", "transcript": ""}
        await self.send(R.event("response.content_part.added", **self.ids, part=part))

    async def text(self, delta: str) -> None:
        if not delta:
            return
        self.transcript.append(delta)
        kind = "response.output_audio_transcript.delta" if self.modality == "audio" else "response.output_text.delta"
        await self.send(R.event(kind, **self.ids, delta=delta))

    async def audio(self, samples: np.ndarray) -> None:
        if samples.size and self.modality == "audio":
            self.audio_samples += samples.size
            await self.send(R.event("response.output_audio.delta", **self.ids, delta=R.pcm16_out(samples)))

    @property
    def audio_ms(self) -> int:
        return round(self.audio_samples / (R.RATE / 1000))

    async def finish(self, status: str, details=None, usage=None, text: str | None = None) -> dict:
        """The closing events; ``text`` (default: the deltas sent) is the item's transcript. A
        cancelled audio response also reports where it was cut (conversation.item.truncated)."""
        text = "".join(self.transcript) if text is None else text
        if self.modality == "audio":
            await self.send(R.event("response.output_audio.done", **self.ids))
            await self.send(R.event("response.output_audio_transcript.done", **self.ids, transcript=text))
            part = {"type": "audio", "transcript": text}
        else:
            await self.send(R.event("response.output_text.done", **self.ids, text=text))
            part = {"type": "text", "text": text}
        await self.send(R.event("response.content_part.done", **self.ids, part=part))
        item_status = "completed" if status == "completed" else "incomplete"
        done = R.assistant_item(self.item_id, item_status, self.modality, text)
        await self.send(R.event("response.output_item.done", response_id=self.id, output_index=0, item=done))
        await self.send(R.event("conversation.item.done", item=done, previous_item_id=None))
        if status == "cancelled" and self.modality == "audio":  # where the reply was cut: the audio sent
            at = {"item_id": self.item_id, "content_index": 0, "audio_end_ms": self.audio_ms}
            await self.send(R.event("conversation.item.truncated", **at))
        final = R.response(self.id, status, self.cfg, self.modality, [done], details, usage)
        await self.send(R.event("response.done", response=final))
        return done
