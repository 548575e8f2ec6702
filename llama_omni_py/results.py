"""What a request returns: :class:`SpeechChunk` while streaming, :class:`SpeakResult` for a whole
reply, and the :class:`Timings` of the request (on the last chunk and on the result).

Each stage hands its counts on with its last item as a small frozen record (:class:`LlmStats`,
:class:`TtsStats`, ...); :meth:`Timings.build` is the one place that turns them, with the
pipeline's stage events, into a request's Timings."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field, fields

import numpy as np

from .constants import OUTPUT_SAMPLE_RATE


@dataclass(frozen=True)
class LlmStats:
    """The LLM stage's counts for one reply (on its final text chunk)."""

    prefill_ms: float = 0.0
    n_tokens: int = 0  # tokens generated
    prompt_cached: int = 0  # prompt positions the KV cache still held from the previous request
    beam_steps: int = 0  # a beam search's decode rounds (num_beams tokens each)
    beam_copies: int = 0  # KV sequence copies it made (reordering beams)
    beam_score: float | None = None  # the best beam's length-normalised log-probability


@dataclass(frozen=True)
class TtsStats:
    """The TTS stage's counts for one reply (on its final code chunk)."""

    n_tts_tokens: int = 0  # speech codes handed to Token2Wav
    tts_slides: int = 0  # times the TTS context dropped its oldest chunks


@dataclass(frozen=True)
class MediaStats:
    """What encoding a request's media cost and gave."""

    apm_ms: float = 0.0
    vpm_ms: float = 0.0
    vision_slices: int = 0  # vision encoder inputs: each image's overview and slices, each video frame
    vision_tokens: int = 0  # LLM embedding rows they gave (64 per input)
    video_frames: int = 0  # frames the request's videos gave (stacked images included)
    audio_segments: int = 0  # audio segments of its videos
    audio_tokens: int = 0  # LLM embedding rows of all its audio (clips and segments)


@dataclass(frozen=True)
class PromptStats:
    """The prompt a request ran with."""

    prompt_tokens: int = 0  # positions (tokens and embedding rows)
    history_dropped: int = 0  # earlier messages left out so the prompt fits the LLM context


STATS = (LlmStats, TtsStats, MediaStats, PromptStats)


@dataclass(frozen=True)
class Timings:
    """Where one request's time went. Stage times are compute (not queue waits); the RTFs are
    defined in docs/benchmark-schema.md: wall RTF = time of the last audio / audio duration,
    compute RTF = stage compute / audio over the steady chunks."""

    seed: int = 0  # the seed the request ran with (drawn when -1 was asked)
    wall_s: float = 0.0
    # Time to first audio, step by step (seconds after the request started): the prompt's
    # prefill ends, the first 10 speaking tokens are out, the first 25 speech codes are out (with
    # the 3 silence codes, Token2Wav's first 28-code window), the first window's audio is out.
    prefill_ms: float = 0.0
    first_text_s: float | None = None
    first_codes_s: float | None = None
    time_to_first_audio_s: float | None = None
    llm_ms: float = 0.0
    tts_ms: float = 0.0
    token2wav_ms: float = 0.0
    apm_ms: float = 0.0
    vpm_ms: float = 0.0
    prompt_tokens: int = 0  # positions of the prompt (tokens and embedding rows)
    prompt_cached: int = 0  # of which the KV cache still held from the previous request
    n_tokens: int = 0  # LLM tokens generated
    beam_steps: int = 0  # beam search only: decode rounds, KV copies, the best beam's score
    beam_copies: int = 0
    beam_score: float | None = None
    n_tts_tokens: int = 0  # speech codes generated
    history_dropped: int = 0  # earlier messages left out so the prompt fits the LLM context
    tts_slides: int = 0  # times the TTS context dropped its oldest chunks
    vision_slices: int = 0  # vision encoder inputs: each image's overview and slices, each video frame
    vision_tokens: int = 0  # LLM embedding rows they gave (64 per input)
    video_frames: int = 0  # frames the request's videos gave (stacked images included)
    audio_segments: int = 0  # audio segments of its videos
    audio_tokens: int = 0  # LLM embedding rows of all its audio (clips and segments)
    audio_s: float = 0.0
    wall_rtf: float | None = None
    compute_rtf: float | None = None
    # (stage, start, end) per pipeline item in perf_counter seconds, with "<stage>.wait" and
    # "<stage>.blocked" queue times: the raw material of profiles and benchmarks.
    events: tuple = field(default=(), repr=False, compare=False)

    def as_dict(self) -> dict:
        d = asdict(self)
        d.pop("events")
        return d

    @classmethod
    def build(cls, stats=(), **measured) -> Timings:
        """Timings from the stages' stat records (each record's fields are Timings fields of the
        same name) and the measured times; a field given twice is an error."""
        values = dict(measured)
        for record in stats:
            for f in fields(record):
                if f.name in values:
                    raise ValueError(f"Timings field {f.name!r} given twice")
                values[f.name] = getattr(record, f.name)
        return cls(**values)


@dataclass(frozen=True)
class SpeechChunk:
    """A piece of a streamed reply: its text and the audio that became ready (24 kHz float32, may
    be empty). The last chunk has ``is_final`` and the request's ``timings``; ``prompt_tokens`` is
    the request's prompt length, known before its first chunk."""

    text_delta: str
    audio: np.ndarray
    index: int
    is_final: bool
    timings: Timings | None = None
    prompt_tokens: int | None = None
    # The stages' stat records, carried by the final chunk to where Timings are built.
    stats: tuple = field(default=(), repr=False, compare=False)


@dataclass(frozen=True)
class SpeakResult:
    """A whole reply: its text, 24 kHz float32 audio and timings."""

    text: str
    audio: np.ndarray
    sample_rate: int = OUTPUT_SAMPLE_RATE
    timings: Timings = field(default_factory=Timings)

    def save(self, path: str | os.PathLike) -> None:
        """Writes the audio as a WAV file (float32 samples)."""
        import soundfile as sf

        sf.write(str(path), self.audio, self.sample_rate)

    @classmethod
    def collect(cls, chunks) -> SpeakResult:
        """Joins streamed chunks into one result."""
        texts, parts, timings = [], [], Timings()
        for chunk in chunks:
            texts.append(chunk.text_delta)
            parts.append(chunk.audio)
            if chunk.timings is not None:
                timings = chunk.timings
        wav = np.concatenate(parts) if parts else np.zeros(0, np.float32)
        return cls("".join(texts), wav, OUTPUT_SAMPLE_RATE, timings)
