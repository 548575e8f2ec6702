"""The TTS stage: MiniCPM-o's speech decoder (projector + 20-layer LLaMA + audio-code head, our
own ggml graph). Each text chunk's tokens and LLM hidden states become condition rows; the
decoder then samples speech codes until its end code or a limit. After the reply's last chunk a
second pass (text end + audio start) closes the turn (docs/streaming.md)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ._native import core
from .config import TtsSampling
from .constants import AUDIO_EOS
from .llm import TextChunk

KV_POSITIONS = 4096  # the decoder's KV cache (its position table is 4096 long)


@dataclass
class CodeChunk:
    """The speech codes (0..6560) a text chunk produced, with that chunk's text."""

    text: str
    codes: list[int]
    final: bool
    timings: dict = field(default_factory=dict)


class TtsModel:
    """The TTS decoder (and its projector) on one device."""

    def __init__(
        self,
        tts_path: str | Path,
        projector_path: str | Path | None,
        device: str,
        threads: int = 1,
        exact: bool = False,
    ):
        self.tts = core.Tts(str(tts_path), str(projector_path or ""), device, threads, KV_POSITIONS, exact)

    @property
    def dims(self):
        return self.tts.dims

    def sampler(self, sampling: TtsSampling, seed: int):
        o = core.TtsSamplerOptions()
        o.temperature, o.repetition_penalty, o.window = (
            sampling.temperature,
            sampling.repetition_penalty,
            sampling.window,
        )
        o.top_k, o.top_p, o.seed = sampling.top_k, sampling.top_p, seed
        return core.TtsSampler(o)

    def start_turn(self) -> None:
        """Empties the KV cache: a new reply."""
        self.tts.clear()

    def codes(self, rows: np.ndarray, sampler, limit: int) -> list[int]:
        """Evaluates condition rows, then samples codes until the end code or ``limit`` codes."""
        out: list[int] = []
        logits = self.tts.forward(rows)
        for _ in range(limit):
            code = sampler.sample(logits)
            if code == AUDIO_EOS:
                break
            out.append(code)
            logits = self.tts.forward(self.tts.code_embedding(code))
        return out

    def speak(self, chunk: TextChunk, sampler, limit: int) -> CodeChunk:
        """The speech codes of one text chunk (plus the closing pass after the final one)."""
        t0 = time.perf_counter()
        codes: list[int] = []
        if chunk.tokens:
            codes += self.codes(self.tts.conditions(chunk.tokens, chunk.hidden, False), sampler, limit)
        if chunk.final:  # text end + audio start close the turn
            empty = np.zeros((0, self.dims.llm_embd), np.float32)
            codes += self.codes(self.tts.conditions([], empty, True), sampler, limit)
        return CodeChunk(chunk.text, codes, chunk.final, {"tts_ms": (time.perf_counter() - t0) * 1000})
