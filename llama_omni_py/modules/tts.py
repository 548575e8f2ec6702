"""The TTS stage: MiniCPM-o's speech decoder (projector + 20-layer LLaMA + audio-code head, our
own ggml graph). Each text chunk's tokens and LLM hidden states become condition rows; the
decoder then samples speech codes until its end code or a limit, in one native call that hands
the codes back in groups. After the reply's last chunk a second pass (text end + audio start)
closes the turn (docs/speech-path.md).

Replies of any length: the decoder's KV cache holds ``n_ctx`` positions. Before a chunk would
not fit, the oldest finished chunks (their condition rows and codes) are dropped until at most
half the context is used, and the kept ones are evaluated again from position 0, so a reply of
any length completes."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from .._native import core
from ..config import TtsSampling
from ..constants import CODES_PER_SECOND
from ..errors import InvalidArgumentError
from .native_options import fill

log = logging.getLogger(__name__)

KV_POSITIONS = 4096  # the decoder's default context (its position table is 4096 long)


def to_native(sampling: TtsSampling, seed: int):
    """The core's TtsSamplerOptions: the sampling's fields and the request's seed."""
    return fill("TtsSamplerOptions", sampling, seed=seed)


@dataclass
class CodeChunk:
    """Speech codes (0..6560) on their way to Token2Wav; ``final`` ends the reply and carries the
    upstream stages' stat records (``stats``)."""

    codes: list[int]
    final: bool
    stats: tuple = ()


@dataclass
class _Unit:
    """What one evaluation put into the KV cache: condition rows and the codes fed after them."""

    rows: np.ndarray
    codes: list[int]

    @property
    def positions(self) -> int:
        return len(self.rows) + len(self.codes)


class TtsModel:
    """The TTS decoder (and its projector) on one device.

    :meth:`new_slot` gives another TtsModel over the same weights with a KV cache of its own; slots
    generating at the same time from different threads evaluate their code steps together in one
    graph, whose sums may run in another order than a lone step's. ``batch_invariant=True`` gives
    every slot exactly its lone logits, so the same seed gives the same codes (docs/slots.md#tts)."""

    def __init__(
        self,
        tts_path: str | Path,
        projector_path: str | Path | None,
        device: str,
        threads: int = 1,
        exact: bool = False,
        n_ctx: int = KV_POSITIONS,
        batch_invariant: bool = False,
    ):
        native = core.Tts(str(tts_path), str(projector_path or ""), device, threads, n_ctx, exact, batch_invariant)
        self._attach(native, n_ctx)

    def _attach(self, native, n_ctx: int) -> None:
        self.tts = native
        self.n_ctx = n_ctx
        self._units: list[_Unit] = []
        self.slides = 0  # context slides in the current reply

    def new_slot(self, n_ctx: int | None = None) -> TtsModel:
        """Another TTS over the same weights, with an empty KV cache of ``n_ctx`` positions
        (default: this one's) and its own reply state."""
        n_ctx = self.n_ctx if n_ctx is None else n_ctx
        slot = TtsModel.__new__(TtsModel)
        slot._attach(self.tts.new_slot(n_ctx), n_ctx)
        return slot

    @property
    def weight_bytes(self) -> int:
        """Bytes of the weights on the device, shared by every slot."""
        return self.tts.weight_bytes

    @property
    def kv_bytes(self) -> int:
        """Bytes of this slot's KV cache on the device."""
        return self.tts.kv_bytes

    @property
    def batch_invariant(self) -> bool:
        return self.tts.batch_invariant

    @property
    def step_batches(self) -> tuple[int, int]:
        """(graphs, rows) of the code steps all slots of these weights evaluated so far."""
        return tuple(self.tts.step_batches)

    @property
    def dims(self):
        return self.tts.dims

    def sampler(self, sampling: TtsSampling, seed: int):
        return core.TtsSampler(to_native(sampling, seed))

    def start_turn(self) -> None:
        """Empties the KV cache: a new reply."""
        self.tts.clear()
        self._units.clear()
        self.slides = 0

    def _make_room(self, positions: int) -> None:
        """Drops the oldest units until ``positions`` more fit, then evaluates the kept ones again."""
        if positions + 1 > self.n_ctx:
            raise InvalidArgumentError(
                f"one TTS chunk needs {positions} positions, more than the TTS context "
                f"({self.n_ctx}); lower max_audio_per_chunk or raise tts_ctx"
            )
        if self.tts.n_past + positions + 1 <= self.n_ctx:
            return
        # Down to half the context, so the next slide is far away (each slide evaluates the kept
        # units again).
        kept = list(self._units)
        while kept and sum(u.positions for u in kept) + positions + 1 > self.n_ctx // 2:
            kept.pop(0)
        self.tts.clear()
        self._units = kept
        self.slides += 1
        log.debug("TTS context slide: %d units kept (%d positions)", len(kept), sum(u.positions for u in kept))
        if kept:  # the kept units in their original order; only what precedes them differs
            parts = [p for u in kept for p in (u.rows, *(self.tts.code_embedding(c) for c in u.codes))]
            self.tts.forward(np.ascontiguousarray(np.concatenate(parts), dtype=np.float32))

    def generate(
        self,
        rows: np.ndarray,
        sampler,
        limit: int,
        on_codes: Callable[[list[int]], bool] | None = None,
        min_codes: int = 0,
        group: int = CODES_PER_SECOND,
    ) -> list[int]:
        """Evaluates condition rows, then samples codes until the end code or ``limit`` codes, in
        one native call; ``on_codes`` gets every ``group`` codes (and the rest at the end) and
        stops the loop by returning False. The end code cannot come before ``min_codes`` codes."""
        self._make_room(len(rows) + limit)
        codes = list(self.tts.generate(rows, sampler, limit, group, on_codes, min_codes))
        self._units.append(_Unit(rows, codes))
        return codes

    def conditions(self, tokens: list[int], hidden: np.ndarray, text_end: bool = False) -> np.ndarray:
        """The condition rows of text tokens and their LLM hidden states (n, n_embd); ``text_end``
        appends the text end and audio start that close a reply."""
        return self.tts.conditions(tokens, np.ascontiguousarray(hidden, dtype=np.float32), text_end)

    def speak(
        self,
        tokens: list[int],
        hidden: np.ndarray,
        sampler,
        limit: int,
        on_codes: Callable[[list[int]], bool] | None = None,
        min_codes: int = 0,
        group: int = CODES_PER_SECOND,
    ) -> list[int]:
        """The speech codes of text tokens with their hidden states (see :meth:`generate`)."""
        return self.generate(self.conditions(tokens, hidden), sampler, limit, on_codes, min_codes, group)

    def close_reply(
        self, sampler, limit: int, on_codes: Callable[[list[int]], bool] | None = None, group: int = CODES_PER_SECOND
    ) -> list[int]:
        """The pass after a reply's last text chunk: text end + audio start, then its codes."""
        empty = np.zeros((0, self.dims.llm_embd), np.float32)
        return self.generate(self.conditions([], empty, True), sampler, limit, on_codes, 0, group)
