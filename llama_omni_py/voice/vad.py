"""Streaming voice activity detection with the MiniCPM-o demo's windowing and hysteresis
(docs/voice.md): audio arrives in pieces of any size, is cut into windows of one model frame
(32 ms; leftovers wait for the next piece), and each window's speech probability drives a
two-threshold state machine.

* Start: a window at or above ``threshold`` opens a segment (:class:`SpeechStarted`).
* Hysteresis: while in speech only a window below ``threshold - 0.15`` counts as silence; one
  at or above it is still speech and restarts the silence count.
* End: silence lasting ``min_silence_duration_ms`` closes the segment: :class:`SpeechStopped`
  with its audio when it held at least ``min_speech_duration_ms`` of speech, else
  :class:`SpeechDiscarded`. A segment reaching ``max_speech_duration_s`` is closed there.
* ``speech_pad_ms`` of audio is kept on both sides of the speech in the segment's audio."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

import numpy as np

from .. import checks
from ..constants import INPUT_SAMPLE_RATE
from ..errors import InvalidArgumentError
from .silero import FRAME, SileroVad

# The demo decides once per frame of its (v4) model, 1024 samples; the v5 model's frame is 512,
# so decisions come every 32 ms.
WINDOW = FRAME
HYSTERESIS = 0.15  # the silence threshold sits this far below the speech threshold
MIN_NEG_THRESHOLD = 0.01


@dataclass(frozen=True)
class VadOptions:
    """When speech starts and ends. Defaults are the demo page's; ranges: docs/voice.md."""

    threshold: float = 0.8  # speech probability that opens a segment
    min_speech_duration_ms: int = 128  # shorter speech is discarded
    min_silence_duration_ms: int = 800  # this much silence ends a segment
    speech_pad_ms: int = 30  # audio kept before the speech start and after its end
    max_speech_duration_s: float = 29.0  # a longer segment is closed here (the audio encoder holds 30 s)

    def __post_init__(self):
        checks.number_in("threshold", self.threshold, 0.05, 0.99)
        checks.int_in("min_speech_duration_ms", self.min_speech_duration_ms, 0, 10_000)
        checks.int_in("min_silence_duration_ms", self.min_silence_duration_ms, 64, 10_000)
        checks.int_in("speech_pad_ms", self.speech_pad_ms, 0, 2_000)
        checks.number_in("max_speech_duration_s", self.max_speech_duration_s, 1.0, 29.5)

    @property
    def neg_threshold(self) -> float:
        return max(self.threshold - HYSTERESIS, MIN_NEG_THRESHOLD)


@dataclass(frozen=True)
class SpeechStarted:
    """Speech began ``at_s`` seconds into the stream (the start of the window that opened it);
    the event itself comes at the end of that window."""

    at_s: float


@dataclass(frozen=True)
class SpeechStopped:
    """A whole utterance: speech from ``start_s`` to ``end_s`` (seconds into the stream), decided
    at ``decided_s``; ``audio`` (16 kHz float32) spans it with ``speech_pad_ms`` either side."""

    start_s: float
    end_s: float
    decided_s: float
    audio: np.ndarray

    @property
    def speech_duration_ms(self) -> int:
        return round(self.audio.size / INPUT_SAMPLE_RATE * 1000)


@dataclass(frozen=True)
class SpeechDiscarded:
    """Speech that ended before ``min_speech_duration_ms``: no turn."""

    start_s: float
    end_s: float


VadEvent = Union[SpeechStarted, SpeechStopped, SpeechDiscarded]


def as_samples(audio) -> np.ndarray:
    """A piece of a live stream: 1-D finite float32 samples at 16 kHz."""
    x = np.asarray(audio, dtype=np.float32)
    if x.ndim != 1:
        raise InvalidArgumentError(f"audio must be 1-D 16 kHz samples, got shape {x.shape}")
    if not np.isfinite(x).all():
        raise InvalidArgumentError("audio holds NaN or infinity")
    return x


class StreamingVad:
    """Feed 16 kHz audio in pieces of any size; ``feed`` returns what happened in them."""

    def __init__(self, options: VadOptions | None = None, model: SileroVad | None = None):
        if options is not None and not isinstance(options, VadOptions):
            raise InvalidArgumentError(f"options must be a VadOptions, got {type(options).__name__}")
        self.options = options or VadOptions()
        self.model = model or SileroVad()
        self.reset()

    def reset(self) -> None:
        """A new stream: model state, counters and kept audio cleared."""
        self.model.reset()
        self.position = 0  # samples decided so far (whole windows)
        self.speaking = False
        self._pending = np.zeros(0, np.float32)  # under a window, waiting for more
        # Audio from stream position self._kept_at on: self._buf[: self._kept_n]. The buffer grows
        # by doubling (up to the longest segment) and is reused, so that a long utterance costs a
        # few allocations instead of one copy of everything kept per 32 ms window.
        self._buf = np.zeros(0, np.float32)
        self._kept_n = 0
        self._kept_at = 0
        self._start = 0
        self._silence_at: int | None = None
        self.last_probability = 0.0

    def feed(self, audio) -> list[VadEvent]:
        x = as_samples(audio)
        buf = np.concatenate([self._pending, x]) if self._pending.size else x
        n = buf.size // WINDOW * WINDOW
        self._pending = buf[n:].copy()
        events: list[VadEvent] = []
        for i in range(0, n, WINDOW):
            event = self._window(buf[i : i + WINDOW])
            if event is not None:
                events.append(event)
        return events

    def flush(self) -> list[VadEvent]:
        """End of the stream: an open segment ends here (as if silence followed)."""
        if not self.speaking:
            return []
        return [self._close(self._silence_at if self._silence_at is not None else self.position)]

    def _window(self, w: np.ndarray) -> VadEvent | None:
        o = self.options
        at = self.position
        p = self.model(w)
        self.last_probability = p
        self.position = end = at + WINDOW
        self._keep(w, at)
        if not self.speaking:
            if p >= o.threshold:
                self.speaking, self._start, self._silence_at = True, at, None
                return SpeechStarted(at / INPUT_SAMPLE_RATE)
            return None
        if p < o.neg_threshold:
            if self._silence_at is None:
                self._silence_at = at
            if (end - self._silence_at) * 1000 >= o.min_silence_duration_ms * INPUT_SAMPLE_RATE:
                return self._close(self._silence_at)
        else:
            self._silence_at = None
        if end - self._start >= o.max_speech_duration_s * INPUT_SAMPLE_RATE:
            return self._close(self._silence_at if self._silence_at is not None else end)
        return None

    def _keep(self, w: np.ndarray, at: int) -> None:
        """Audio of the open segment (from its pad before) or, outside speech, the pad's worth."""
        pad = self.options.speech_pad_ms * INPUT_SAMPLE_RATE // 1000
        n = self._kept_n
        if n + w.size > self._buf.size:  # the longest segment: its speech, both pads, two windows
            most = round(self.options.max_speech_duration_s * INPUT_SAMPLE_RATE) + 2 * (pad + WINDOW)
            grown = np.empty(max(n + w.size, min(2 * self._buf.size, most), 16 * WINDOW), np.float32)
            grown[:n] = self._buf[:n]
            self._buf = grown
        self._buf[n : n + w.size] = w
        self._kept_n = n = n + w.size
        if not self.speaking:
            self._drop(n - (pad + WINDOW))
        if self._kept_at + self._kept_n != at + WINDOW:  # kept audio always ends at this window
            raise AssertionError("VAD audio bookkeeping out of step")

    def _drop(self, n: int) -> None:
        """Forgets the oldest ``n`` kept samples (none when n <= 0)."""
        if n <= 0:
            return
        left = self._kept_n - n
        self._buf[:left] = self._buf[n : self._kept_n]  # numpy copies overlapping ranges correctly
        self._kept_n, self._kept_at = left, self._kept_at + n

    def _close(self, speech_end: int) -> VadEvent:
        o = self.options
        pad = o.speech_pad_ms * INPUT_SAMPLE_RATE // 1000
        start, decided = self._start, self.position
        self.speaking, self._silence_at = False, None
        lo = max(start - pad, self._kept_at) - self._kept_at
        hi = min(speech_end + pad, decided) - self._kept_at
        audio = self._buf[lo:hi].copy()
        self._drop(self._kept_n - (pad + WINDOW))  # what stays is the next segment's pad
        s = INPUT_SAMPLE_RATE
        if (speech_end - start) * 1000 < o.min_speech_duration_ms * s:
            return SpeechDiscarded(start / s, speech_end / s)
        return SpeechStopped(start / s, speech_end / s, decided / s, audio)
