"""The bodies of the three pipeline stages, written once: the threaded pipeline runs them on
their own threads, :func:`synthesize` runs the same bodies one after the other (the reference
path the pipeline must equal).

    LLM        prompt -> TextChunk (10 speaking tokens + hidden states); its text goes straight
               to the caller as a SpeechChunk, without waiting for the audio
    TTS        TextChunk -> CodeChunk: 25 speech codes at a time (one second of audio), the
               rest with the reply's end
    Token2Wav  CodeChunk -> SpeechChunk: one window of audio (at most one second) per push

``handoff="text_chunk"`` hands the TTS's codes on once per text chunk instead (all of a chunk's
speech before Token2Wav sees any): the older, burstier schedule, kept for comparison.
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
_NO_AUDIO = np.zeros(0, np.float32)


@dataclass(frozen=True)
class TextDelta:
    """Text of the reply on its way straight to the caller (ahead of its audio)."""

    text: str


@dataclass(frozen=True)
class Reply:
    """What one reply needs: its prompt, sampling, seed and limits."""

    prompt: Prompt
    seed: int
    max_new_tokens: int
    max_audio_per_chunk: int
    llm: LlmSampling
    tts: TtsSampling
    handoff: str = "window"


def llm_stage(llm: LanguageModel, reply: Reply, text_to_caller: bool = True):
    """Emits TextChunks; with ``text_to_caller`` each chunk's text also goes straight out."""

    def body(emit) -> None:
        for chunk in llm.chunks(reply.prompt, reply.llm, reply.seed, reply.max_new_tokens):
            if text_to_caller and chunk.text and not emit.output(TextDelta(chunk.text)):
                return
            if not emit(chunk):
                return

    return body


class TtsStage:
    """Text chunks -> code chunks of exactly 25 codes (the rest on the reply's end)."""

    def __init__(self, tts: TtsModel, reply: Reply):
        tts.start_turn()
        self.tts, self.reply = tts, reply
        self.sampler = tts.sampler(reply.tts, reply.seed)
        self.pending: list[int] = []

    def __call__(self, chunk: TextChunk, emit: Emit) -> None:
        by_window = self.reply.handoff == "window"

        def on_codes(codes: list[int]) -> bool:  # called from the native loop every 25 codes
            self.pending += codes
            while len(self.pending) >= CODES_PER_SECOND:
                if not emit(CodeChunk(self.pending[:CODES_PER_SECOND], False)):
                    return False
                del self.pending[:CODES_PER_SECOND]
            return True

        codes = self.tts.speak(chunk, self.sampler, self.reply.max_audio_per_chunk, on_codes if by_window else None)
        if not by_window:
            self.pending += codes
            if not chunk.final:
                emit(CodeChunk(self.pending, False))
                self.pending = []
        if chunk.final:
            emit(CodeChunk(self.pending, True))
            self.pending = []


class Token2WavStage:
    """Speech codes -> audio: one Token2Wav push per 25 codes (a second of audio), the codes left
    over when the reply ends in the final flush. ``n_codes`` counts what it was given."""

    def __init__(self, token2wav: Token2Wav):
        self.token2wav = token2wav
        self.pending: list[int] = []
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
        audio = np.concatenate(parts) if parts else _NO_AUDIO
        emit(SpeechChunk("", audio, 0, chunk.final))


def text_stage():
    """speech=False: the LLM's text, no TTS."""

    def body(chunk: TextChunk, emit: Emit) -> None:
        emit(SpeechChunk(chunk.text, _NO_AUDIO, 0, chunk.final))

    return body


class _Collect(list):
    """A list that stands in for a pipeline emitter (synthesize)."""

    def __call__(self, item) -> bool:
        self.append(item)
        return True

    def output(self, item) -> bool:
        self.append(item)
        return True


def synthesize(llm: LanguageModel, tts: TtsModel, token2wav: Token2Wav, reply: Reply) -> tuple[str, np.ndarray]:
    """The stages one after the other on this thread: (reply text, 24 kHz audio)."""
    texts, codes, out = _Collect(), _Collect(), _Collect()
    tts_body, t2w_body = TtsStage(tts, reply), Token2WavStage(token2wav)
    llm_stage(llm, reply, text_to_caller=False)(texts)
    for chunk in texts:
        tts_body(chunk, codes)
    for chunk in codes:
        t2w_body(chunk, out)
    audio = np.concatenate([c.audio for c in out]) if out else _NO_AUDIO
    return "".join(c.text for c in texts), audio
