"""The LLM's context in a duplex session: a protected prefix (system prompt and voice), then one
span per unit. Feeding goes through here so every position is accounted for; when the context
grows past a limit the oldest whole units are dropped and the kept ones evaluated again right
after the prefix (the prefix always stays), so a session can run indefinitely.

Why evaluate again rather than shift the cached keys: a kept unit's keys and values were
computed while it could see the units now dropped; shifting them keeps that stale view. Evaluated
again, the context is exactly what a fresh prefill of the kept units gives (tested), at the cost
of one prefill of the kept part each time the limit is reached."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..modules.llm.model import LanguageModel
from ..vision.placeholder import placeholder_parts


@dataclass
class UnitSpan:
    """One unit's positions and what filled them (tokens as ints, embedding rows as arrays)."""

    start: int
    parts: list = field(default_factory=list)

    @property
    def length(self) -> int:
        return sum(1 if isinstance(p, int) else len(p) for p in self.parts)


class UnitContext:
    """LLM feeding with unit bookkeeping (the :class:`LlmFeed` of the unit decoder)."""

    def __init__(self, llm: LanguageModel):
        self.lm = llm
        self.llm = llm.llm
        self.first_added = llm.special.first_added
        self.n_keep = 0
        self.prefix: list = []
        self.units: list[UnitSpan] = []
        self.pruned_units = 0

    @property
    def n_past(self) -> int:
        return self.llm.n_past

    # -- LlmFeed -------------------------------------------------------------------------------
    def _record(self, part) -> None:
        if self.units:
            self.units[-1].parts.append(part)

    def feed(self, token: int) -> tuple[np.ndarray, np.ndarray]:
        out = self.llm.feed(int(token))  # a decode step: batched with other slots' steps
        self._record(int(token))
        return out

    def looping(self):
        """The unit's decode loop: other slots' steps wait for this one's (llm_slots.py)."""
        return self.llm.looping()

    def feed_tokens(self, tokens: list[int]) -> np.ndarray:
        self.llm.eval_tokens([int(t) for t in tokens])
        for t in tokens:
            self._record(int(t))
        return self.llm.logits()

    def feed_rows(self, rows: np.ndarray) -> np.ndarray:
        rows = np.ascontiguousarray(rows, dtype=np.float32)
        self.llm.eval_embeddings(rows)
        self._record(rows)
        return self.llm.logits()

    def detokenize(self, tokens: list[int]) -> str:
        """Text of the tokens, special tokens left out."""
        return self.lm.detokenize([t for t in tokens if t < self.first_added])

    def detokenize_bytes(self, tokens: list[int]) -> bytes:
        """Bytes of the tokens, special tokens left out (a unit may end inside a character)."""
        return self.lm.detokenize_bytes([t for t in tokens if t < self.first_added])

    def is_special(self, token: int) -> bool:
        return token >= self.first_added

    # -- session structure -----------------------------------------------------------------------
    def start(self, prefix_tokens: list[int], voice_rows: np.ndarray | None, suffix_tokens: list[int]) -> None:
        """Empties the context and prefills the protected prefix."""
        self.llm.keep(0)
        self.lm._cached = []  # the turn-based prompt cache no longer describes the KV
        self.units.clear()
        self.pruned_units = 0
        self.prefix = [list(prefix_tokens)]
        self.llm.eval_tokens(list(prefix_tokens))
        if voice_rows is not None and len(voice_rows):
            self.llm.eval_embeddings(np.ascontiguousarray(voice_rows, dtype=np.float32))
            self.prefix.append(np.asarray(voice_rows, np.float32))
        self.llm.eval_tokens(list(suffix_tokens))
        self.prefix.append(list(suffix_tokens))
        self.n_keep = self.llm.n_past

    def prefill_unit(self, unit_token: int, images: list, audio: np.ndarray, layout: str = "duplex") -> np.ndarray:
        """``<unit>``, each image (an EncodedImage: ``<image>`` overview ``</image>``, then its
        slices, laid out as ``layout`` says), then the audio rows; returns the logits after the
        last input."""
        self.units.append(UnitSpan(self.llm.n_past))
        logits = self.feed_tokens([unit_token])
        for image in images:
            for part in placeholder_parts(image.grid, layout):
                if isinstance(part, int):
                    logits = self.feed_rows(image.blocks[part])
                else:
                    logits = self.feed_tokens(list(self.lm.model.tokenize(part, True)))
        if len(audio):
            logits = self.feed_rows(audio)
        return logits

    def finalize_unit(self, terminator: int | None, unit_end: int) -> None:
        """The unit's terminator (held back while it decided) and ``</unit>``, in one evaluation."""
        self.feed_tokens(([terminator] if terminator is not None else []) + [unit_end])

    def prune(self, high: int, low: int) -> int:
        """When the context passes ``high`` positions, drops the oldest whole units until at most
        ``low`` remain (never the prefix, never the newest unit) and shifts the rest down. Returns
        the positions dropped."""
        if self.llm.n_past <= high or len(self.units) < 2:
            return 0
        drop, n = 0, 0
        while n < len(self.units) - 1 and self.llm.n_past - drop > low:
            drop += self.units[n].length
            n += 1
        if not drop:
            return 0
        del self.units[:n]
        self.llm.keep(self.n_keep)
        kept, self.units = self.units, []
        for old in kept:
            self.units.append(UnitSpan(self.llm.n_past))
            tokens: list[int] = []
            for p in old.parts:  # consecutive tokens in one evaluation
                if isinstance(p, int):
                    tokens.append(p)
                    continue
                if tokens:
                    self.feed_tokens(tokens)
                    tokens = []
                self.feed_rows(p)
            if tokens:
                self.feed_tokens(tokens)
        self.pruned_units += n
        return drop

    def kept_parts(self) -> list:
        """Everything the context now holds, in order (the prefix, then the kept units)."""
        return [*self.prefix, *(p for u in self.units for p in u.parts)]
