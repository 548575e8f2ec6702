"""Transcripts of the audio replies the OpenAI API handed out, by audio id, until they expire:
a follow-up request may name an earlier reply as ``{"role": "assistant", "audio": {"id": ...}}``."""

from __future__ import annotations

import time
import uuid
from collections import OrderedDict

MAX_ENTRIES = 10000


class AudioStore:
    def __init__(self, ttl_s: float):
        self.ttl_s = ttl_s
        self._items: OrderedDict[str, tuple[float, str]] = OrderedDict()

    def add(self, transcript: str) -> tuple[str, int]:
        """A new audio id for ``transcript`` and its expiry (Unix seconds)."""
        self._expire()
        audio_id = f"audio_{uuid.uuid4().hex}"
        expires = time.time() + self.ttl_s
        self._items[audio_id] = (expires, transcript)
        while len(self._items) > MAX_ENTRIES:
            self._items.popitem(last=False)
        return audio_id, int(expires)

    def add_as(self, audio_id: str, transcript: str) -> None:
        """Sets the transcript of an id handed out before the reply was finished (streaming)."""
        if audio_id in self._items:
            self._items[audio_id] = (self._items[audio_id][0], transcript)

    def transcript(self, audio_id: str) -> str | None:
        self._expire()
        item = self._items.get(audio_id)
        return None if item is None else item[1]

    def _expire(self) -> None:
        now = time.time()
        while self._items and next(iter(self._items.values()))[0] < now:
            self._items.popitem(last=False)
