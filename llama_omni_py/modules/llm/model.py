"""The LLM stage: MiniCPM-o's Qwen3 through libllama. It prefills a prompt and writes the reply in
chunks of 10 speaking tokens, each with the final-norm hidden states the TTS is conditioned on
(docs/speech-path.md)."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...config import LlmSampling
from ...constants import TEXT_CHUNK
from ...errors import InvalidArgumentError
from ...results import LlmStats
from ..native_options import fill
from .beam_search import BeamSearch, search
from .context import LlmContext, LlmSlot
from .prompt import Prompt, SpecialTokens
from .text_stream import TextStream


def to_native(sampling: LlmSampling, seed: int):
    """The core's SamplingOptions: the sampling's fields and the request's seed."""
    return fill("SamplingOptions", sampling, seed=seed)


@dataclass
class TextChunk:
    """Up to 10 speaking tokens of the reply, their hidden states (n, n_embd) and their text; the
    reply's last chunk has ``final`` (and may be empty) and the reply's ``stats``."""

    tokens: list[int]
    hidden: np.ndarray
    text: str
    final: bool
    stats: LlmStats | None = None


def _position_keys(prompt: Prompt) -> list:
    """One comparable key per prompt position: the token id, or a digest of the embedding row."""
    keys: list = []
    for kind, part in prompt.segments:
        if kind == "tokens":
            keys += [int(t) for t in part]
        else:
            rows = np.ascontiguousarray(part, dtype=np.float32)
            keys += [hashlib.blake2b(row.tobytes(), digest_size=16).digest() for row in rows]
    return keys


class LanguageModel:
    """One LLM conversation on one device: tokenizer, prefill, sampling and chunked generation.
    Built alone (its own context) or as a slot of an engine's shared context (:meth:`slot`)."""

    def __init__(
        self,
        path: str | Path,
        device: str,
        n_ctx: int = 4096,
        threads: int = 0,
        exact: bool = False,
        prompt_cache: bool = True,
    ):
        self._attach(LlmContext(path, device, n_ctx, threads, exact).slot(0), prompt_cache)

    @classmethod
    def slot(cls, context: LlmContext, seq: int, prompt_cache: bool = True) -> LanguageModel:
        """Slot ``seq`` of a shared context (its weights and scheduler)."""
        self = cls.__new__(cls)
        self._attach(context.slot(seq), prompt_cache)
        return self

    def _attach(self, slot: LlmSlot, prompt_cache: bool) -> None:
        self.context = slot.context
        self.model = slot.context.model
        self.llm = slot
        self.special = SpecialTokens.resolve(self.model)
        self.prompt_cache = prompt_cache
        self._cached: list = []  # position keys of the prompt the KV cache holds
        self.reused_positions = 0  # prompt positions the last prefill took from the cache
        self._max_token_bytes: int | None = None

    def forget(self) -> None:
        """Empties the KV cache (the beams' sequences too) and the prompt cache's memory of it (a
        slot's next session starts as a lone session would)."""
        self.llm.keep(0)
        self.llm.clear_beams()
        self._cached = []

    @property
    def n_ctx(self) -> int:
        return self.llm.n_ctx

    @property
    def n_embd(self) -> int:
        return self.model.info.n_embd

    def detokenize(self, tokens: list[int]) -> str:
        return self.model.detokenize(tokens) if tokens else ""

    def detokenize_bytes(self, tokens: list[int]) -> bytes:
        return self.model.detokenize_bytes(tokens) if tokens else b""

    @property
    def max_token_bytes(self) -> int:
        """The most UTF-8 bytes one token of the vocabulary spells (at least 32, what a special
        token's name takes); read from the vocabulary once."""
        if self._max_token_bytes is None:
            pieces = (len(self.model.detokenize_bytes([t])) for t in range(self.model.info.n_vocab))
            self._max_token_bytes = max(32, *pieces)
        return self._max_token_bytes

    def check_text_fits(self, n_bytes: int, max_new_tokens: int) -> None:
        """InvalidArgumentError, before anything is tokenized, when ``n_bytes`` of text cannot fit
        with the reply: it is at least n_bytes / max_token_bytes tokens. (Tokenizing a 30 MiB text
        takes seconds; this takes none.)"""
        room = self.n_ctx - max_new_tokens
        if n_bytes <= room:  # a text this short may fit whatever its tokens
            return
        least = -(-n_bytes // self.max_token_bytes)
        if least > room:
            raise InvalidArgumentError(
                f"the text ({n_bytes} bytes, at least {least} tokens) plus max_new_tokens ({max_new_tokens}) exceeds "
                f"the context ({self.n_ctx} tokens): shorten the input or lower max_new_tokens"
            )

    def check_fits(self, prompt: Prompt, max_new_tokens: int) -> None:
        """InvalidArgumentError when the prompt and the reply cannot fit the context."""
        if prompt.token_count() + max_new_tokens > self.n_ctx:
            raise InvalidArgumentError(
                f"the prompt ({prompt.token_count()} tokens) plus max_new_tokens ({max_new_tokens}) exceeds the "
                f"context ({self.n_ctx} tokens): shorten the input or lower max_new_tokens"
            )

    def _set_sampling(self, s: LlmSampling, seed: int) -> None:
        self.llm.set_sampling(to_native(s, seed))

    def prefill(self, prompt: Prompt) -> None:
        """Evaluates the prompt. With the prompt cache on, the longest prefix it shares with the
        previous prompt (the system prompt, a voice, the earlier turns of a chat) stays in the KV
        cache and is not evaluated again; at least the last position is, for its logits. (A
        position evaluated in a smaller batch can differ from a cold prefill in the last bits, so
        the cache trades bit-reproducibility across requests for a shorter prefill.)"""
        keys = _position_keys(prompt) if self.prompt_cache else []
        common = 0
        for a, b in zip(keys, self._cached):
            if a != b:
                break
            common += 1
        common = min(common, len(keys) - 1, self.llm.n_past)
        self.llm.keep(max(common, 0))
        self._cached = keys
        self.reused_positions = max(common, 0)
        pos = 0
        for kind, part in prompt.segments:
            n = len(part)
            skip = min(max(common - pos, 0), n)
            pos += n
            if skip == n:
                continue
            if kind == "tokens":
                self.llm.eval_tokens(list(part[skip:]))
            else:
                self.llm.eval_embeddings(np.ascontiguousarray(part[skip:]))

    def check_beams(self, sampling: LlmSampling) -> None:
        """InvalidArgumentError when the slot has fewer KV sequences than the search's beams."""
        have = len(self.llm.beam_seqs)
        if sampling.num_beams > have:
            raise InvalidArgumentError(
                f"num_beams={sampling.num_beams} needs {sampling.num_beams} LLM KV sequences per slot and this "
                f"engine has {have}: build it with EngineConfig(max_beams={sampling.num_beams}) (each beam "
                "decodes in a sequence of its own)"
            )

    def chunks(
        self,
        prompt: Prompt,
        sampling: LlmSampling,
        seed: int,
        max_new_tokens: int,
        forced: list[int] | None = None,
        cancelled: Callable[[], bool] = lambda: False,
    ) -> Iterator[TextChunk]:
        """Prefill, then a TextChunk every 10 speaking tokens; the last has final=True. Generation
        stops at <|tts_eos|>, an end-of-generation token or max_new_tokens. ``forced``: the reply's
        tokens are given (teacher forcing): each is evaluated for its hidden state, none sampled.
        Otherwise a beam search (``sampling.num_beams`` > 1) yields its reply as one final chunk of
        text when the search ends, without tokens for the TTS; nothing when ``cancelled()`` turns
        true first."""
        self.check_fits(prompt, max_new_tokens)
        if forced is None and sampling.beam_search:
            chunk = self._beam_reply(prompt, sampling, max_new_tokens, cancelled)
            if chunk is not None:
                yield chunk
            return
        self._set_sampling(sampling, seed)
        t0 = time.perf_counter()
        self.prefill(prompt)
        prefill_ms, n_tokens = (time.perf_counter() - t0) * 1000, 0
        sp = self.special
        text = TextStream(self.detokenize_bytes)
        tokens: list[int] = []
        hidden: list[np.ndarray] = []
        given = iter(forced) if forced is not None else None
        token = next(given, None) if given is not None else self.llm.sample()
        with self.llm.looping():  # the other slots' steps wait (briefly) for this one's
            for _ in range(max_new_tokens):
                if token is None or (given is None and (token == sp.tts_eos or self.model.is_eog(token))):
                    break
                nxt, h = self.llm.decode_step(token)
                n_tokens += 1
                if sp.speaks(token):
                    tokens.append(token)
                    hidden.append(h)
                if len(tokens) == TEXT_CHUNK:
                    chunk = self._chunk(tokens, hidden, text, False)
                    with self.llm.away():  # handing it on may block on the next stage
                        yield chunk
                    tokens, hidden = [], []
                token = next(given, None) if given is not None else nxt
        last = self._chunk(tokens, hidden, text, True)
        last.stats = LlmStats(prefill_ms, n_tokens, self.reused_positions)
        yield last

    def _beam_reply(
        self, prompt: Prompt, sampling: LlmSampling, max_new_tokens: int, cancelled: Callable[[], bool]
    ) -> TextChunk | None:
        """The best beam as the reference's chat() reads it: the stop token dropped, the text cut
        at <|tts_eos|>, and (as for a sampled reply) only the tokens that carry speech."""
        self.check_beams(sampling)
        t0 = time.perf_counter()
        self.prefill(prompt)
        prefill_ms = (time.perf_counter() - t0) * 1000
        sp = self.special
        rules = BeamSearch(
            sampling.num_beams,
            sp.reference_eos,
            max_new_tokens,
            sampling.repeat_penalty,
            sampling.length_penalty,
            sampling.early_stopping,
        )
        found = search(self.llm, self.llm.logits(), rules, cancelled)
        if found is None:
            return None
        tokens = list(found.best.tokens)
        if tokens[-1] in sp.reference_eos:
            tokens.pop()
        n_tokens = len(tokens)
        if sp.tts_eos in tokens:
            tokens = tokens[: tokens.index(sp.tts_eos)]
        text = TextStream(self.detokenize_bytes).feed([t for t in tokens if sp.speaks(t)], True)
        chunk = TextChunk([], np.zeros((0, self.n_embd), np.float32), text, True)
        chunk.stats = LlmStats(prefill_ms, n_tokens, self.reused_positions, found.steps, found.copies, found.best.score)
        return chunk

    def _chunk(self, tokens: list[int], hidden: list[np.ndarray], text: TextStream, final: bool) -> TextChunk:
        rows = np.stack(hidden).astype(np.float32) if hidden else np.zeros((0, self.n_embd), np.float32)
        return TextChunk(tokens, rows, text.feed(tokens, final), final)
