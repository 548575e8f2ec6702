"""The per-unit decision of full duplex: which tokens the LLM writes in one ~1 s unit, and which
of them the TTS speaks (docs/duplex.md, "Decoding a unit").

:class:`UnitDecoder` runs the unit loop over any object with the :class:`LlmFeed` methods, so a
scripted LLM can test every rule: forced listening, ``<|listen|>`` turned into ``<|tts_bos|>``
inside a turn, the two-stage draw, the token and character caps, ``<|turn_eos|>`` fed and
decoding going on, and the terminator held back for the finalize step.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from ..config import DuplexConfig
from ..errors import ConfigError
from ..modules.llm.text_stream import TextStream


class LlmFeed(Protocol):
    """What the unit loop needs from the LLM."""

    def feed(self, token: int) -> tuple[np.ndarray, np.ndarray]:
        """Evaluates one token; returns (logits after it, its final-norm hidden state)."""

    def detokenize(self, tokens: list[int]) -> str: ...

    def detokenize_bytes(self, tokens: list[int]) -> bytes: ...

    def is_special(self, token: int) -> bool: ...


@dataclass(frozen=True)
class DuplexTokens:
    """The special tokens duplex decoding uses, resolved by name from the vocabulary."""

    listen: int
    speak: int
    tts_bos: int
    turn_eos: int
    chunk_eos: int
    chunk_tts_eos: int
    tts_pad: int
    unit: int
    unit_end: int

    NAMES = {
        "listen": "<|listen|>",
        "speak": "<|speak|>",
        "tts_bos": "<|tts_bos|>",
        "turn_eos": "<|turn_eos|>",
        "chunk_eos": "<|chunk_eos|>",
        "chunk_tts_eos": "<|chunk_tts_eos|>",
        "tts_pad": "<|tts_pad|>",
        "unit": "<unit>",
        "unit_end": "</unit>",
    }

    @classmethod
    def resolve(cls, find) -> DuplexTokens:
        """``find(name) -> id`` (negative when missing); a missing token is a ModelFileError."""
        from ..errors import ModelFileError

        ids = {}
        for field_name, text in cls.NAMES.items():
            tid = find(text)
            if tid < 0:
                raise ModelFileError(f"the LLM vocabulary has no '{text}' token (duplex needs it)")
            ids[field_name] = tid
        return cls(**ids)

    @property
    def terminators(self) -> frozenset:
        return frozenset((self.listen, self.chunk_eos, self.chunk_tts_eos))


@dataclass
class UnitDecision:
    """What one unit decided."""

    is_listen: bool
    end_of_turn: bool
    text: str
    tokens: list[int]  # the fed tokens after the first (what the unit says)
    hidden: list[np.ndarray]  # their hidden states, for the TTS
    terminator: int | None  # fed with </unit> at finalize
    forced_listen: bool = False
    # <|turn_eos|> closed a turn whose end was not spoken: an interrupt before the unit, or a
    # unit that said <|turn_eos|> and then <|listen|> (reported as a plain listen, as the demo does)
    turn_eos_fed: bool = False


class TextSampler:
    """The demo's duplex text sampler: an untempered draw first over everything (it ends the unit
    if it picks <|chunk_eos|>), else the forbidden tokens masked (<|tts_pad|>, <|chunk_eos|> and
    ``cfg.forbidden_token_ids``), penalties, temperature and top-k/top-p on what may be said."""

    def __init__(self, cfg: DuplexConfig, tokens: DuplexTokens, is_special, seed: int, vocab: int | None = None):
        """``vocab``: the vocabulary size, to refuse forbidden ids past it (None: not checked)."""
        self.cfg, self.tokens, self.is_special = cfg, tokens, is_special
        self.rng = np.random.default_rng(seed)
        self.history: deque = deque(maxlen=max(cfg.repetition_window, 1))
        extra = cfg.forbidden_token_ids
        if vocab is not None and extra and extra[-1] >= vocab:
            raise ConfigError(
                "forbidden_token_ids", f"holds id {extra[-1]}, past this LLM's vocabulary ({vocab} tokens)"
            )
        self.forbidden = np.array(sorted({tokens.tts_pad, tokens.chunk_eos, *extra}))

    def _draw(self, probs: np.ndarray) -> int:
        if self.cfg.greedy:
            return int(np.argmax(probs))
        return int(self.rng.choice(probs.size, p=probs))

    def sample(self, logits: np.ndarray) -> int:
        cfg, t = self.cfg, self.tokens
        logits = np.asarray(logits, np.float64)
        first = self._draw(_softmax(logits))  # stage 1: nothing applied
        if first == t.chunk_eos:
            return first
        x = logits.copy()
        x[self.forbidden] = -np.inf
        if cfg.repetition_penalty != 1.0 and self.history:
            seen = np.fromiter({tok for tok in self.history if not self.is_special(tok)}, dtype=np.int64)
            if seen.size:
                x[seen] /= cfg.repetition_penalty  # whatever the sign, as the demo does
        lp, e = cfg.length_penalty, t.turn_eos
        if lp != 1.0 and np.isfinite(x[e]):
            x[e] = x[e] / lp if x[e] > 0 else x[e] * lp  # ending the turn gets less likely
        if cfg.listen_prob_scale != 1.0:
            x[t.listen] *= cfg.listen_prob_scale
        if cfg.greedy:
            token = int(np.argmax(x))
        else:
            token = self._draw(_top_k_top_p(x / cfg.temperature, cfg.top_k, cfg.top_p))
        self.history.append(token)
        return token


def _softmax(x: np.ndarray) -> np.ndarray:
    finite = np.isfinite(x)
    e = np.zeros_like(x)
    e[finite] = np.exp(x[finite] - x[finite].max())
    return e / e.sum()


def _top_k_top_p(x: np.ndarray, k: int, p: float) -> np.ndarray:
    """Probabilities after keeping the top k logits (ties kept), then the smallest set whose
    probability reaches p (the token that crosses p is kept)."""
    if 0 < k < x.size:
        kth = np.partition(x, -k)[-k]
        x = np.where(x >= kth, x, -np.inf)
    probs = _softmax(x)
    if p < 1.0:
        order = np.argsort(-probs, kind="stable")
        cum = np.cumsum(probs[order])
        cut = np.searchsorted(cum, p) + 1  # keep through the token that crosses p
        keep = np.zeros(probs.size, bool)
        keep[order[:cut]] = True
        probs = np.where(keep, probs, 0.0)
        probs /= probs.sum()
    return probs


class UnitDecoder:
    """The decode loop of one unit (after its inputs were prefilled)."""

    def __init__(self, cfg: DuplexConfig, tokens: DuplexTokens, llm: LlmFeed, seed: int, vocab: int | None = None):
        self.cfg, self.tokens, self.llm = cfg, tokens, llm
        self.sampler = TextSampler(cfg, tokens, llm.is_special, seed, vocab)
        self.text = TextStream(llm.detokenize_bytes)  # a character may span two units
        self.units = 0
        self.turn_open = False  # a reply has started and <|turn_eos|> has not closed it

    def reset(self) -> None:
        self.units = 0
        self.turn_open = False
        self.sampler.history.clear()
        self.text.reset()

    def decode(self, logits: np.ndarray, force_listen: bool = False) -> UnitDecision:
        """The unit's decision from the logits after its inputs. ``force_listen`` (a barge-in)
        closes an open turn with <|turn_eos|> first."""
        cfg, t = self.cfg, self.tokens
        forced = self.units < cfg.force_listen_count or force_listen
        self.units += 1
        turn_eos_fed = False
        if force_listen and self.turn_open:
            logits, _ = self.llm.feed(t.turn_eos)
            self.turn_open, turn_eos_fed = False, True
            self.text.reset()  # the cut-off turn's half character goes with it
        tokens: list[int] = []
        hidden: list[np.ndarray] = []
        terminator, end_of_turn, is_listen = None, False, False
        for j in range(cfg.max_tokens_per_unit):
            if j == cfg.max_tokens_per_unit - 1:
                terminator = t.chunk_eos  # the last slot: forced
                break
            if forced:
                tok = t.listen
            else:
                tok = self.sampler.sample(logits)
                if tok == t.listen and self.turn_open:
                    tok = t.tts_bos  # a turn in progress cannot just stop listening
            is_listen = tok == t.listen
            if tok in t.terminators:
                terminator = tok
                break
            if j > 0 and len(self.llm.detokenize(tokens + [tok])) >= cfg.max_chars_per_unit:
                terminator = t.chunk_eos  # the token that would pass the cap is dropped
                break
            self.turn_open = True
            logits, h = self.llm.feed(tok)
            if tok == t.turn_eos:
                end_of_turn, self.turn_open = True, False
            if j > 0:
                tokens.append(tok)
                hidden.append(h)
        if is_listen:
            if end_of_turn:  # the turn's last words are dropped with the unit; its speech state goes
                turn_eos_fed = True
                self.text.reset()
            return UnitDecision(True, False, "", [], [], terminator, forced, turn_eos_fed)
        text = self.text.feed(tokens, final=end_of_turn)
        return UnitDecision(False, end_of_turn, text, tokens, hidden, terminator, forced, turn_eos_fed)
