"""The bodies of the three pipeline stages, written once: the threaded pipeline runs them on
their own threads, :func:`synthesize` runs the same bodies one after the other (the reference
path the pipeline must equal).

    LLM        prompt -> TextChunk (10 speaking tokens + hidden states); its text goes straight
               to the caller as a SpeechChunk, without waiting for the audio
    TTS        TextChunk -> CodeChunk: 25 speech codes at a time (one second of audio), the
               rest with the reply's end
    Token2Wav  CodeChunk -> SpeechChunk: one window of audio (at most one second) per push;
               or as two stages, Token2Mel (CodeChunk -> MelChunk, on the session device) and
               the vocoder (MelChunk -> SpeechChunk, on its CPU pool), so that the vocoder of
               window N-1 runs while Token2Mel makes window N

``handoff="text_chunk"`` hands the TTS's codes on once per text chunk instead (all of a chunk's
speech before Token2Wav sees any): the older, burstier schedule, kept for comparison.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ..config import LlmSampling, TtsSampling
from ..constants import CODES_PER_SECOND
from ..modules.llm.model import LanguageModel, TextChunk
from ..modules.llm.prompt import Prompt
from ..modules.token2wav import Token2Wav
from ..modules.tts import CodeChunk, TtsModel
from ..results import SpeechChunk, TtsStats

Emit = Callable[[object], bool]
Stage = Callable[[Any, Emit], None]
_NO_AUDIO = np.zeros(0, np.float32)


@dataclass(frozen=True)
class TextDelta:
    """Text of the reply on its way straight to the caller (ahead of its audio)."""

    text: str


@dataclass(frozen=True)
class ReplyPlan:
    """What one reply needs: its prompt, sampling, seed and limits."""

    prompt: Prompt
    seed: int
    max_new_tokens: int
    max_audio_per_chunk: int
    llm: LlmSampling
    tts: TtsSampling
    handoff: str = "window"
    first_window: int = CODES_PER_SECOND  # codes of the first hand-off (Token2WavConfig.first_window_codes)
    forced: tuple | None = None  # the reply's tokens, given (teacher forcing); None: sampled


def llm_stage(llm: LanguageModel, plan: ReplyPlan, text_to_caller: bool = True):
    """Emits TextChunks; with ``text_to_caller`` each chunk's text also goes straight out."""

    def body(emit) -> None:
        forced = list(plan.forced) if plan.forced is not None else None
        stop = lambda: emit.cancelled  # noqa: E731
        for chunk in llm.chunks(plan.prompt, plan.llm, plan.seed, plan.max_new_tokens, forced, stop):
            if text_to_caller and chunk.text and not emit.output(TextDelta(chunk.text)):
                return
            if not emit(chunk):
                return

    return body


class TtsStage:
    """Text chunks -> code chunks of exactly 25 codes (the rest on the reply's end), the first one
    of ``plan.first_window`` codes (what Token2Wav's first window needs); the final code chunk
    carries the LLM's stats and the TTS's (:class:`TtsStats`)."""

    def __init__(self, tts: TtsModel, plan: ReplyPlan):
        tts.start_turn()
        self.tts, self.plan = tts, plan
        self.sampler = tts.sampler(plan.tts, plan.seed)
        self.pending: list[int] = []
        self.n_codes = 0

    def __call__(self, chunk: TextChunk, emit: Emit) -> None:
        by_window = self.plan.handoff == "window"

        def on_codes(codes: list[int]) -> bool:  # called from the native loop every `group` codes
            self.pending += codes
            while len(self.pending) >= self._want():
                n = self._want()
                if not self._emit(emit, CodeChunk(self.pending[:n], False)):
                    return False
                del self.pending[:n]
            return True

        hand_on = on_codes if by_window else None
        group = self._want() if by_window else CODES_PER_SECOND  # the first hand-off may come early
        limit = self.plan.max_audio_per_chunk
        codes = []
        if chunk.tokens:
            codes = self.tts.speak(chunk.tokens, chunk.hidden, self.sampler, limit, hand_on, group=group)
        if chunk.final:
            codes += self.tts.close_reply(self.sampler, limit, hand_on, self._want() if by_window else CODES_PER_SECOND)
        if not by_window:
            self.pending += codes
            if not chunk.final:
                self._emit(emit, CodeChunk(self.pending, False))
                self.pending = []
        if chunk.final:
            self.n_codes += len(self.pending)
            stats = (chunk.stats, TtsStats(self.n_codes, self.tts.slides))
            emit(CodeChunk(self.pending, True, tuple(s for s in stats if s is not None)))
            self.pending = []

    def _want(self) -> int:
        """Codes of the next hand-off: the first window's, then a second's."""
        return self.plan.first_window if self.n_codes == 0 else CODES_PER_SECOND

    def _emit(self, emit: Emit, chunk: CodeChunk) -> bool:
        self.n_codes += len(chunk.codes)
        return emit(chunk)


class Token2WavStage:
    """Speech codes -> audio: the TTS hands codes on 25 at a time (a second of audio), and each
    code chunk is one push; Token2Wav itself cuts the stream into its 28-code windows."""

    def __init__(self, token2wav: Token2Wav):
        self.token2wav = token2wav
        token2wav.reset()

    def __call__(self, chunk: CodeChunk, emit: Emit) -> None:
        emit(_speech(self._push(chunk, self.token2wav.push), chunk))

    @staticmethod
    def _push(chunk: CodeChunk, push: Callable) -> list:
        """push(codes[, final=True]) for the chunk (nothing for an empty one mid-reply)."""
        if not chunk.codes and not chunk.final:
            return []
        return [push(chunk.codes, final=chunk.final)]


@dataclass(frozen=True)
class MelChunk:
    """The mel windows of one code chunk, on their way to the vocoder stage."""

    windows: list
    final: bool
    stats: tuple = ()


class Token2MelStage(Token2WavStage):
    """The first half of Token2WavStage: the same pushes, mel windows out."""

    def __call__(self, chunk: CodeChunk, emit: Emit) -> None:
        windows = [w for ws in self._push(chunk, self.token2wav.push_mel) for w in ws]
        emit(MelChunk(windows, chunk.final, chunk.stats))


class VocoderStage:
    """The second half: one SpeechChunk per MelChunk, as Token2WavStage emits them."""

    def __init__(self, token2wav: Token2Wav):
        self.token2wav = token2wav

    def __call__(self, chunk: MelChunk, emit: Emit) -> None:
        emit(_speech([self.token2wav.vocode(w) for w in chunk.windows], chunk))


def _speech(parts: list, chunk) -> SpeechChunk:
    """One chunk of a reply's audio from the windows made for ``chunk`` (none: an empty chunk);
    the final one carries the stats on."""
    return SpeechChunk("", np.concatenate(parts) if parts else _NO_AUDIO, 0, chunk.final, stats=chunk.stats)


def token2wav_stages(token2wav: Token2Wav, overlap: bool) -> list[tuple[str, Stage]]:
    """Token2Wav as one pipeline stage, or (overlap) as Token2Mel + vocoder stages."""
    if not overlap:
        return [("token2wav", Token2WavStage(token2wav))]
    return [("token2mel", Token2MelStage(token2wav)), ("vocoder", VocoderStage(token2wav))]


def text_stage():
    """speech=False: the LLM's text, no TTS."""

    def body(chunk: TextChunk, emit: Emit) -> None:
        stats = (chunk.stats,) if chunk.stats is not None else ()
        emit(SpeechChunk(chunk.text, _NO_AUDIO, 0, chunk.final, stats=stats))

    return body


class _Collect(list):
    """A list that stands in for a pipeline emitter (synthesize)."""

    cancelled = False

    def __call__(self, item) -> bool:
        self.append(item)
        return True

    def output(self, item) -> bool:
        self.append(item)
        return True


def synthesize(
    llm: LanguageModel, tts: TtsModel, token2wav: Token2Wav, plan: ReplyPlan, overlap: bool = False
) -> tuple[str, np.ndarray]:
    """The stages one after the other on this thread: (reply text, 24 kHz audio)."""
    bodies = [TtsStage(tts, plan), *(body for _, body in token2wav_stages(token2wav, overlap))]
    texts = _Collect()
    llm_stage(llm, plan, text_to_caller=False)(texts)
    items = texts
    for body in bodies:
        out = _Collect()
        for chunk in items:
            body(chunk, out)
        items = out
    audio = np.concatenate([c.audio for c in items]) if items else _NO_AUDIO
    return "".join(c.text for c in texts), audio
