"""Full duplex: the model listens and speaks at once, one ~1 s unit at a time.

    with omni.OmniSession(model_dir) as s, s.duplex(system_prompt="...", ref_audio="me.wav") as d:
        for second in microphone():                  # 16000 samples of 16 kHz audio each
            r = d.push(second, frame=camera())       # the unit's DuplexResult
            play(r.audio)                            # 24000 samples: speech, or silence while listening

Every unit is prefilled (``<unit>``, the frame's 64 image embeddings, 10 audio embeddings), the
LLM decides (listen, or up to 18 text tokens of the reply), the TTS speaks the unit's text as 25
speech codes, and Token2Wav turns them into one second of audio. The three stages run on their
own threads like a turn-based reply, so with :meth:`DuplexSession.send` / :meth:`results` the next unit is
prefilled while the previous one is still being spoken (docs/duplex.md).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from .. import checks
from ..config import DuplexConfig
from ..constants import OUTPUT_SAMPLE_RATE
from ..errors import InvalidArgumentError
from ..orchestration.channels import Channel, Pipeline
from ..vision import slice_counts, slices_of
from .context import UnitContext
from .decoder import DuplexTokens, UnitDecision, UnitDecoder

FIRST_UNIT_SAMPLES = 16480  # 1030 ms: the first unit's audio (left-padded with zeros when short)
UNIT_SAMPLES = 16000  # 1 s of 16 kHz audio per later unit
DEFAULT_SYSTEM_PROMPT = "You are a helpful assistant."
_STOP = object()


@dataclass(frozen=True)
class DuplexTimings:
    """Where one unit's time went (milliseconds of compute per stage) and what it held."""

    cost_apm_ms: float = 0.0
    cost_vpm_ms: float = 0.0
    cost_prefill_ms: float = 0.0
    cost_llm_ms: float = 0.0  # prefill + decode (the encoders are apart)
    cost_tts_prep_ms: float = 0.0
    cost_tts_ms: float = 0.0
    cost_token2wav_ms: float = 0.0
    wall_ms: float = 0.0  # from send() to the result
    n_tokens: int = 0  # text tokens the unit said
    n_tts_tokens: int = 0  # speech codes
    vision_slices: int = 0  # vision encoder inputs: each frame's overview and slices
    vision_tokens: int = 0  # their LLM embedding rows
    kv_cache_length: int = 0  # LLM positions after the unit

    @property
    def cost_encode_ms(self) -> float:
        return self.cost_apm_ms + self.cost_vpm_ms


@dataclass(frozen=True)
class DuplexResult:
    """One unit's outcome. ``audio`` is 24 kHz float32: the unit's speech (padded to one second
    except at the end of a turn), or one second of silence while listening."""

    unit: int  # 1-based count of units processed
    is_listen: bool
    text: str
    audio: np.ndarray
    end_of_turn: bool
    timings: DuplexTimings = field(default_factory=DuplexTimings)


@dataclass
class _Unit:
    index: int
    audio: np.ndarray
    frames: list
    force_listen: bool
    received: float
    max_slice_nums: object = None  # int, or one per frame; None: the config's


@dataclass
class _Spoken:
    """A unit on its way through the TTS and Token2Wav stages."""

    unit: _Unit
    decision: UnitDecision
    costs: dict  # DuplexTimings fields measured so far
    codes: list[int] = field(default_factory=list)
    reset_token2wav: bool = False  # a barge-in closed the turn: Token2Wav starts over


class DuplexSession:
    """A full-duplex conversation on the stages of an :class:`~llama_omni_py.OmniSession` (which
    it holds busy until closed; ``release`` frees it). Create it with ``OmniSession.duplex()``."""

    def __init__(self, stages, system_prompt: str | None, ref_audio, config: DuplexConfig, release):
        self.config = cfg = config
        self._release = release
        self.llm, self.tts = stages.llm, stages.tts
        self.tokens = DuplexTokens.resolve(self.llm.model.find_token)
        self.context = UnitContext(self.llm)
        self._limits = cfg.context_limits(self.llm.n_ctx)
        self.decoder = UnitDecoder(cfg, self.tokens, self.context, cfg.seed, self.llm.model.info.n_vocab)
        self.token2wav = stages.token2wav_for(cfg.cache_policy)
        self._vpm = stages.inputs.encoders()[1]
        self._apm = stages.audio_stream()  # live input: this slot's stream history
        # the reference's duplex prefill has no image ids and no newlines; llama.cpp-omni's its own
        self._image_layout = "duplex" if self._vpm.vision.rule == "reference" else "llama.cpp-omni"
        self._apm.reset_stream()
        self._tts_sampler = self.tts.sampler(cfg.tts, cfg.seed)
        self._tts_turn_codes = 0
        self._audio_buffer = np.zeros(0, np.float32)
        self._units_in = Channel(max(2, cfg.audio_queue))
        self._paused = False
        self._force_next = False
        self._closed = False
        self._count = 0
        self._lock = threading.Lock()
        self._prepare(system_prompt, ref_audio)
        self._pipe = Pipeline(
            ("llm", self._llm_body),
            [("tts", self._tts_body), ("token2wav", self._t2w_body)],
            [cfg.audio_queue, cfg.audio_queue, cfg.audio_queue],
            stages.pin_stage_thread,
        )
        self._results = iter(self._pipe)

    # -- prepare ---------------------------------------------------------------------------------
    def _prepare(self, system_prompt: str | None, ref_audio) -> None:
        text = DEFAULT_SYSTEM_PROMPT if system_prompt is None else checks.text(system_prompt, "system_prompt")
        tok = self.llm.model.tokenize
        prefix = tok("<|im_start|>system\n", True) + tok(text, False) + tok("\n<|audio_start|>", True)
        ref = self._apm.encode(ref_audio) if ref_audio is not None else None
        self.context.start(prefix, ref, tok("<|audio_end|><|im_end|>", True))
        self.tts.start_turn()
        self.token2wav.reset()

    # -- the caller's side ---------------------------------------------------------------------
    def send(self, audio, frame=None, force_listen: bool = False, max_slice_nums=None) -> None:
        """Queues the next unit: about 1 s of 16 kHz audio (path, bytes or samples) and optionally
        one image or video frame (or a list); ``force_listen`` makes this unit listen (a barge-in);
        ``max_slice_nums``: slices per frame besides its overview (0..9, or one per frame; None:
        ``config.max_slice_nums``)."""
        if self._closed:
            raise InvalidArgumentError("the duplex session is closed")
        if self._paused:
            raise InvalidArgumentError("the duplex session is paused")
        samples = self._apm.load(audio, 30.0)
        frames = [] if frame is None else list(frame) if isinstance(frame, (list, tuple)) else [frame]
        slices = slice_counts(max_slice_nums, len(frames))
        with self._lock:
            force = bool(force_listen) or self._force_next
            self._force_next = False
            self._count += 1
            unit = _Unit(self._count, samples, frames, force, time.perf_counter(), slices)
        if not self._units_in.put(unit):
            raise InvalidArgumentError("the duplex session is closed")

    def results(self) -> Iterator[DuplexResult]:
        """The results of sent units, in order (blocks until each is ready). Dropping this
        iterator leaves the session running."""
        while True:
            try:
                result = next(self._results)
            except StopIteration:
                return
            yield result

    def push(self, audio, frame=None, force_listen: bool = False, max_slice_nums=None) -> DuplexResult:
        """Sends one unit and waits for its result (use send()/results() to overlap units)."""
        self.send(audio, frame, force_listen, max_slice_nums)
        try:
            return next(self._results)
        except StopIteration:
            raise InvalidArgumentError("the duplex session is closed") from None

    def pause(self) -> None:
        """Stops taking units (send raises) until resume(); the conversation state is kept."""
        self._paused = True

    def resume(self) -> None:
        self._paused = False

    def interrupt(self) -> None:
        """Barge-in: the next unit listens, closing the turn being spoken."""
        with self._lock:
            self._force_next = True

    def close(self) -> None:
        """Ends the session: stops the stage threads and frees the OmniSession."""
        if self._closed:
            return
        self._closed = True
        self._units_in.close()
        try:
            self._pipe.close()
        finally:
            self._release()

    def __enter__(self) -> DuplexSession:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- stage bodies ----------------------------------------------------------------------------
    def _unit_audio(self, unit: _Unit) -> np.ndarray:
        """The unit's slice of the input stream: 1030 ms for the first unit (left-padded), then
        1 s, so the stream stays continuous."""
        buf = np.concatenate([self._audio_buffer, unit.audio])
        need = FIRST_UNIT_SAMPLES if unit.index == 1 else UNIT_SAMPLES
        if unit.index == 1 and buf.size < need:
            buf = np.concatenate([np.zeros(need - buf.size, np.float32), buf])
        if buf.size < need:  # short: pad at the end (the rest of the second was silent)
            buf = np.concatenate([buf, np.zeros(need - buf.size, np.float32)])
        self._audio_buffer = buf[need:]
        return buf[:need]

    def _llm_body(self, emit) -> None:
        while True:
            unit = self._units_in.get()
            if not isinstance(unit, _Unit):
                return
            t0 = time.perf_counter()
            audio = self._apm.encode_chunk(self._unit_audio(unit))
            ta = time.perf_counter()
            asked = self.config.max_slice_nums or 0 if unit.max_slice_nums is None else unit.max_slice_nums
            images = [self._vpm.encode_sliced(f, slices_of(asked, i)) for i, f in enumerate(unit.frames)]
            t1 = time.perf_counter()
            logits = self.context.prefill_unit(self.tokens.unit, images, audio, self._image_layout)
            t2 = time.perf_counter()
            with self.context.looping():  # other slots' steps are batched with this unit's
                decision = self.decoder.decode(logits, force_listen=unit.force_listen)
            t3 = time.perf_counter()
            costs = {
                "cost_apm_ms": (ta - t0) * 1000,
                "cost_vpm_ms": (t1 - ta) * 1000,
                "cost_prefill_ms": (t2 - t1) * 1000,
                "cost_llm_ms": (t3 - t1) * 1000,
                "n_tokens": len(decision.tokens),
                "vision_slices": sum(len(image.blocks) for image in images),
                "vision_tokens": sum(image.rows for image in images),
            }
            if not emit(_Spoken(unit, decision, costs)):
                return
            self.context.finalize_unit(decision.terminator, self.tokens.unit_end)  # after the result left
            self.context.prune(*self._limits)

    def _tts_body(self, item: _Spoken, emit) -> None:
        d, t0 = item.decision, time.perf_counter()
        if d.turn_eos_fed:  # a barge-in closed the turn: its speech state goes too
            self.tts.start_turn()
            self._tts_turn_codes = 0
            item.reset_token2wav = True
        if not d.is_listen:
            cfg = self.config
            hidden = np.stack(d.hidden) if d.hidden else np.zeros((0, self.tts.dims.llm_embd), np.float32)
            # mid-turn units speak exactly one second; a turn's first and last may end sooner
            free = d.end_of_turn or self._tts_turn_codes == 0
            self._tts_sampler.reset()  # the repetition penalty looks at this unit's codes only
            rows = self.tts.conditions(d.tokens, hidden)
            item.costs["cost_tts_prep_ms"] = (time.perf_counter() - t0) * 1000
            item.codes = self.tts.generate(
                rows, self._tts_sampler, cfg.codes_per_unit, min_codes=0 if free else cfg.codes_per_unit
            )
            self._tts_turn_codes += len(item.codes)
            if d.end_of_turn:
                self.tts.start_turn()
                self._tts_turn_codes = 0
        item.costs["cost_tts_ms"] = (time.perf_counter() - t0) * 1000
        item.costs["n_tts_tokens"] = len(item.codes)
        emit(item)

    def _t2w_body(self, item: _Spoken, emit) -> None:
        d, t0 = item.decision, time.perf_counter()
        if item.reset_token2wav:
            self.token2wav.reset()
        if d.is_listen:
            audio = np.zeros(OUTPUT_SAMPLE_RATE, np.float32)
        else:
            parts = [self.token2wav.push(item.codes), self.token2wav.flush()] if item.codes else []
            if d.end_of_turn:
                parts.append(self.token2wav.push([], final=True))
                self.token2wav.reset()
            audio = np.concatenate(parts) if parts else np.zeros(0, np.float32)
            if not d.end_of_turn and audio.size < OUTPUT_SAMPLE_RATE:  # keep the second's rhythm
                audio = np.concatenate([np.zeros(OUTPUT_SAMPLE_RATE - audio.size, np.float32), audio])
        timings = DuplexTimings(
            **item.costs,
            cost_token2wav_ms=(time.perf_counter() - t0) * 1000,
            wall_ms=(time.perf_counter() - item.unit.received) * 1000,
            kv_cache_length=self.context.n_past,
        )
        emit(DuplexResult(item.unit.index, d.is_listen, d.text, audio, d.end_of_turn, timings))


__all__ = ["DuplexResult", "DuplexSession", "DuplexTimings", "FIRST_UNIT_SAMPLES", "UNIT_SAMPLES"]
