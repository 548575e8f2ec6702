"""The bodies of the three pipeline stages, written once: the threaded pipeline runs them on
their own threads, :func:`synthesize` runs the same bodies one after the other (the reference
path the pipeline must equal).

    LLM        prompt -> TextChunk (10 speaking tokens + hidden states)
    TTS        TextChunk -> CodeChunk (its speech codes)
    Token2Wav  CodeChunk -> SpeechChunk (audio, 25 codes per Token2Wav push, the rest at the end)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from .config import LlmSampling, TtsSampling
from .constants import CODES_PER_SECOND
from .llm import LanguageModel, TextChunk
from .prompt import Prompt
from .results import SpeechChunk
from .token2wav import Token2Wav
from .tts import CodeChunk, TtsModel

Emit = Callable[[object], bool]


@dataclass(frozen=True)
class Reply:
    """What one reply needs: its prompt, sampling, seed and limits."""

    prompt: Prompt
    seed: int
    max_new_tokens: int
    max_audio_per_chunk: int
    llm: LlmSampling
    tts: TtsSampling


def llm_stage(llm: LanguageModel, reply: Reply):
    def body(emit: Emit) -> None:
        for chunk in llm.chunks(reply.prompt, reply.llm, reply.seed, reply.max_new_tokens):
            if not emit(chunk):
                return

    return body


def tts_stage(tts: TtsModel, reply: Reply):
    tts.start_turn()
    sampler = tts.sampler(reply.tts, reply.seed)

    def body(chunk: TextChunk, emit: Emit) -> None:
        emit(tts.speak(chunk, sampler, reply.max_audio_per_chunk))

    return body


class Token2WavStage:
    """Speech codes -> audio: one Token2Wav push per 25 codes (a second of audio), the codes left
    over when the reply ends in the final flush. ``n_codes`` counts what it was given."""

    def __init__(self, token2wav: Token2Wav):
        self.token2wav = token2wav
        self.pending: list[int] = []
        self.index = 0
        self.n_codes = 0
        token2wav.reset()

    def __call__(self, chunk: CodeChunk, emit: Emit) -> None:
        self.n_codes += len(chunk.codes)
        self.pending += chunk.codes
        parts = []
        while len(self.pending) >= CODES_PER_SECOND:
            parts.append(self.token2wav.push(self.pending[:CODES_PER_SECOND]))
            del self.pending[:CODES_PER_SECOND]
        if chunk.final:
            parts.append(self.token2wav.push(self.pending, final=True))
            self.pending.clear()
        audio = np.concatenate(parts) if parts else np.zeros(0, np.float32)
        self.index += 1
        emit(SpeechChunk(chunk.text, audio, self.index - 1, chunk.final))


def text_stage():
    """speech=False: the LLM's text, no TTS."""
    index = 0

    def body(chunk: TextChunk, emit: Emit) -> None:
        nonlocal index
        index += 1
        emit(SpeechChunk(chunk.text, np.zeros(0, np.float32), index - 1, chunk.final))

    return body


def synthesize(llm: LanguageModel, tts: TtsModel, token2wav: Token2Wav, reply: Reply) -> tuple[str, np.ndarray]:
    """The stages one after the other on this thread: (reply text, 24 kHz audio)."""
    out: list[SpeechChunk] = []
    codes: list[CodeChunk] = []
    tts_body, t2w_body = tts_stage(tts, reply), Token2WavStage(token2wav)
    llm_stage(llm, reply)(lambda chunk: tts_body(chunk, codes.append) or True)
    for chunk in codes:
        t2w_body(chunk, out.append)
    audio = np.concatenate([c.audio for c in out]) if out else np.zeros(0, np.float32)
    return "".join(c.text_delta for c in out), audio
