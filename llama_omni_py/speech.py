"""Text -> speech tokens: the LLM (libllama) writes the reply and its hidden states; every 10
speaking tokens go to the TTS, which generates audio codes until its EOS (at most
`max_audio_per_chunk`); after the reply a second TTS pass (text_eos, audio_bos) closes the turn
(engine-spec §3). Used by the pipeline; runnable alone for tests and benchmarks.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import numpy as np

from . import modelspec as ms
from ._native import core
from .backend import resolve_device
from .errors import ConfigError, InvalidArgumentError
from .models import discover, validate
from .prompt import Prompt, SpecialTokens, simplex_speech_prompt

AUDIO_EOS = 6561      # relative id of the audio end token
TEXT_CHUNK = 10       # speaking LLM tokens per TTS chunk


@dataclass(frozen=True)
class SpeechCoreConfig:
    max_new_tokens: int = 256
    n_ctx: int = 4096
    threads: int = 0                  # <= 0: libllama's default
    llm_temperature: float = 0.7
    llm_top_k: int = 20
    llm_top_p: float = 0.95
    llm_repeat_penalty: float = 1.0
    tts_temperature: float = 0.8
    tts_repetition_penalty: float = 1.05
    tts_window: int = 8
    duplex_sampler: bool = False      # top-p 0.85, top-k 25, window 16 (llama.cpp-omni's duplex mode)
    max_audio_per_chunk: int = 500
    seed: int = 0
    exact: bool = False               # F32 weights and KV (tests); else the files' F16

    def __post_init__(self):
        def check(name, ok, msg):
            if not ok:
                raise ConfigError(name, msg)
        check("max_new_tokens", isinstance(self.max_new_tokens, int) and self.max_new_tokens > 0, "must be a positive integer")
        check("n_ctx", isinstance(self.n_ctx, int) and 256 <= self.n_ctx <= 1 << 20, "must be an integer in 256..1048576")
        check("llm_temperature", 0 <= self.llm_temperature <= 10, "must be in 0..10")
        check("tts_temperature", 0 <= self.tts_temperature <= 10, "must be in 0..10")
        check("tts_repetition_penalty", self.tts_repetition_penalty > 0, "must be > 0")
        check("max_audio_per_chunk", isinstance(self.max_audio_per_chunk, int) and self.max_audio_per_chunk > 0,
              "must be a positive integer")
        check("seed", isinstance(self.seed, int) and 0 <= self.seed < 2**32, "must be an integer in 0..2**32-1")


@dataclass
class SpeechChunkTokens:
    """One TTS chunk: the text it speaks and the audio codes (0..6560) it produced."""

    text: str
    audio_tokens: list[int]
    final: bool
    timings: dict = field(default_factory=dict)


class SpeechCore:
    """LLM + projector + TTS over one module set on one device."""

    def __init__(self, model_dir: str | Path, device: str = "cpu", config: SpeechCoreConfig | None = None):
        self.config = config or SpeechCoreConfig()
        self.device = resolve_device(device)
        model_set = discover(model_dir)
        validate(model_set, ["llm", "tts", "projector"], self.device)
        c = self.config
        self.llm_model = core.LlmModel(str(model_set.llm), self.device)
        self.llm = core.Llm(self.llm_model, c.n_ctx, 512, c.threads, c.exact)
        self.tts = core.Tts(str(model_set.path("tts")), str(model_set.path("projector")), self.device,
                            max(1, c.threads), 4096, c.exact)
        self.special = SpecialTokens.resolve(self.llm_model)
        self.last_prefill_ms, self.last_n_tokens = 0.0, 0  # of the latest llm_chunks() (server metrics)
        if self.tts.dims.llm_embd != self.llm_model.info.n_embd:
            raise InvalidArgumentError(f"TTS projector expects {self.tts.dims.llm_embd}-d hidden states, "
                                       f"the LLM has {self.llm_model.info.n_embd}")

    def _llm_sampling(self, seed: int) -> None:
        c = self.config
        s = core.SamplingOptions()
        s.temperature, s.top_k, s.top_p, s.min_p = c.llm_temperature, c.llm_top_k, c.llm_top_p, 0.0
        s.repeat_penalty, s.seed = c.llm_repeat_penalty, seed
        self.llm.set_sampling(s)

    def tts_sampler(self, seed: int):
        c = self.config
        t = core.TtsSamplerOptions()
        t.temperature, t.repetition_penalty, t.seed = c.tts_temperature, c.tts_repetition_penalty, seed
        t.window = 16 if c.duplex_sampler else c.tts_window
        if c.duplex_sampler:
            t.top_k, t.top_p = 25, 0.85
        return core.TtsSampler(t)

    def _prefill(self, prompt: Prompt, max_new_tokens: int) -> None:
        self.llm.keep(0)
        if prompt.token_count() + max_new_tokens > self.llm.n_ctx:
            raise InvalidArgumentError(f"the prompt ({prompt.token_count()} tokens) plus max_new_tokens "
                                       f"({max_new_tokens}) exceeds the context ({self.llm.n_ctx})")
        for kind, part in prompt.segments:
            if len(part) == 0:
                continue
            if kind == "tokens":
                self.llm.eval_tokens(part)
            else:
                self.llm.eval_embeddings(part)

    def _tts_codes(self, rows: np.ndarray, sampler) -> list[int]:
        codes: list[int] = []
        logits = self.tts.forward(rows)
        for _ in range(self.config.max_audio_per_chunk):
            code = sampler.sample(logits)
            if code == AUDIO_EOS:
                break
            codes.append(code)
            logits = self.tts.forward(self.tts.code_embedding(code))
        return codes

    def llm_chunks(self, prompt: Prompt, seed: int, max_new_tokens: int | None = None
                   ) -> Iterator[tuple[list[int], list[np.ndarray], bool]]:
        """The LLM half: prefill, then (speaking tokens, their hidden states, final) every
        TEXT_CHUNK speaking tokens; the last has final=True (and may be empty)."""
        limit = self.config.max_new_tokens if max_new_tokens is None else max_new_tokens
        if not isinstance(limit, int) or limit < 1:
            raise InvalidArgumentError(f"max_new_tokens must be a positive integer, got {limit!r}")
        self._llm_sampling(seed)
        t0 = time.perf_counter()
        self._prefill(prompt, limit)
        self.last_prefill_ms, self.last_n_tokens = (time.perf_counter() - t0) * 1000, 0
        sp = self.special
        pending_tok: list[int] = []
        pending_hid: list[np.ndarray] = []
        token = self.llm.sample()
        for _ in range(limit):
            if token == sp.tts_eos or self.llm_model.is_eog(token):
                break
            nxt, hidden = self.llm.decode_step(token)
            self.last_n_tokens += 1
            if sp.speaks(token):
                pending_tok.append(token)
                pending_hid.append(hidden)
            if len(pending_tok) == TEXT_CHUNK:
                yield pending_tok, pending_hid, False
                pending_tok, pending_hid = [], []
            token = nxt
        yield pending_tok, pending_hid, True

    def speak_chunk(self, tokens: list[int], hiddens: list[np.ndarray], final: bool, sampler) -> SpeechChunkTokens:
        """The TTS half for one LLM chunk (call tts.clear() before a reply's first chunk)."""
        return self._chunk(tokens, hiddens, sampler, final)

    def generate(self, text: str, seed: int | None = None, prompt: Prompt | None = None) -> Iterator[SpeechChunkTokens]:
        """Yields TTS chunks as they are produced; the last has final=True."""
        seed = self.config.seed if seed is None else seed
        prompt = prompt or simplex_speech_prompt(self.llm_model, text)
        sampler = self.tts_sampler(seed)
        self.tts.clear()
        for tokens, hiddens, final in self.llm_chunks(prompt, seed):
            yield self._chunk(tokens, hiddens, sampler, final)

    def _chunk(self, tokens, hiddens, sampler, final: bool) -> SpeechChunkTokens:
        t0 = time.perf_counter()
        codes: list[int] = []
        if tokens:
            rows = self.tts.conditions(tokens, np.stack(hiddens).astype(np.float32), False)
            codes += self._tts_codes(rows, sampler)
        if final:  # second pass: text_eos + audio_bos closes the turn
            codes += self._tts_codes(self.tts.conditions([], np.zeros((0, self.tts.dims.llm_embd), np.float32), True),
                                     sampler)
        text = self.llm_model.detokenize(tokens) if tokens else ""
        return SpeechChunkTokens(text, codes, final, {"tts_ms": (time.perf_counter() - t0) * 1000})

    def text_to_audio_tokens(self, text: str, seed: int | None = None) -> tuple[str, list[int]]:
        """The whole reply: (text spoken, audio codes)."""
        texts, codes = [], []
        for ch in self.generate(text, seed):
            texts.append(ch.text)
            codes += ch.audio_tokens
        return "".join(texts), codes


def synthesize(core: SpeechCore, token2wav, text: str, seed: int | None = None) -> tuple[str, np.ndarray]:
    """Text -> (reply text, 24 kHz audio), sequentially: audio codes go to ``token2wav`` (a
    llama_omni_py.Token2Wav) every 25, the rest on the final flush. The threaded pipeline
    overlaps these stages; this is the plain reference path."""
    token2wav.reset()
    texts, audio, pending = [], [], []
    for chunk in core.generate(text, seed):
        texts.append(chunk.text)
        pending += chunk.audio_tokens
        while len(pending) >= 25:
            audio.append(token2wav.push(pending[:25]))
            pending = pending[25:]
    audio.append(token2wav.push(pending, final=True))
    return "".join(texts), np.concatenate(audio) if audio else np.zeros(0, np.float32)
