"""One turn-based request on a slot's stages (:class:`~llama_omni_py.orchestration.slot.SlotStages`):
its prompt (with the oldest history left out when it would not fit), the threaded pipeline
LLM -> TTS -> Token2Wav (stages.py, channels.py) and the request's Timings, built once from the
stages' stat records. The reply's settings are the session's ReplyConfig with the request's
overrides."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import replace

import numpy as np

from ..config import LlmSampling, ReplyConfig
from ..constants import OUTPUT_SAMPLE_RATE
from ..errors import InvalidArgumentError
from ..modules.llm.prompt import Prompt
from ..results import PromptStats, SpeechChunk
from . import stages
from .channels import Pipeline
from .inputs import Request, build_prompt
from .slot import SlotStages
from .timings import Profiler, request_timings

log = logging.getLogger(__name__)


def fitting_prompt(slot: SlotStages, r: Request, media, limit: int, style: str) -> tuple[Prompt, PromptStats]:
    """The request's prompt in layout ``style``; when it and the reply do not fit the LLM context,
    the oldest earlier messages are left out, a whole turn at a time (the system prompt always
    stays)."""
    llm, style = slot.llm, r.prompt_style or style
    if r.prompt is not None:  # built by the caller
        llm.check_fits(r.prompt, limit)
        return r.prompt, PromptStats(r.prompt.token_count(), 0)
    prompt = build_prompt(llm.model, r, media, style=style)
    history = list(media.history)
    while history and prompt.token_count() + limit > llm.n_ctx:
        history.pop(0)
        while history and history[0][0] != "user":  # a turn starts with the user
            history.pop(0)
        prompt = build_prompt(llm.model, r, media, tuple(history), style)
    dropped = len(media.history) - len(history)
    if dropped:
        log.info("left out the %d oldest messages to fit the context (%d tokens)", dropped, llm.n_ctx)
    llm.check_fits(prompt, limit)
    return prompt, PromptStats(prompt.token_count(), dropped)


def check_beam_request(slot: SlotStages, sampling: LlmSampling, speech: bool) -> None:
    """A beam search gives text only, on a slot with a KV sequence per beam."""
    if not sampling.beam_search:
        return
    if speech:
        raise InvalidArgumentError(
            f"beam search (num_beams={sampling.num_beams}) gives a text reply: ask for speech=False. The speech "
            "pipeline hands the TTS each 10-token chunk as the LLM writes it, and a beam's tokens are only final "
            "when the whole search ends"
        )
    slot.llm.check_beams(sampling)


class TurnBasedRun:
    """Iterate it for the request's SpeechChunks; cancel() from any thread; close() joins the
    stage threads."""

    def __init__(self, slot: SlotStages, reply: ReplyConfig, request: Request, profiler: Profiler):
        self.slot, self.reply, self.request, self.profiler = slot, reply, request, profiler
        self._cancelled = threading.Event()
        self._pipeline: Pipeline | None = None

    def cancel(self) -> None:
        self._cancelled.set()
        pipe = self._pipeline
        if pipe is not None:
            pipe.cancel()

    def close(self) -> None:
        pipe = self._pipeline
        if pipe is not None:
            pipe.close()

    def __iter__(self) -> Iterator[SpeechChunk]:
        start = time.perf_counter()
        plan, media, prompt_stats = self._plan()
        if self._cancelled.is_set():  # cancelled while the inputs were encoded
            return
        pipe = self._pipeline = self._build_pipeline(plan)
        heard = _AudioClock(start)
        final = yield from self._chunks(pipe, prompt_stats.prompt_tokens, heard)
        if final is None:  # cancelled
            return
        timings = request_timings(
            pipe.events,
            heard.chunk_seconds,
            start=start,
            end=time.perf_counter(),
            first_audio=heard.first,
            last_audio=heard.last,
            seed=self.request.seed,
            stats=(*final.stats, media.stats, prompt_stats),
        )
        encoders = {"apm_ms": media.stats.apm_ms, "vpm_ms": media.stats.vpm_ms} if self.request.has_media else {}
        self.profiler.add(pipe.events, encoders)
        yield replace(final, timings=timings, stats=())

    def _plan(self) -> tuple[stages.ReplyPlan, object, PromptStats]:
        """The request's inputs encoded, its prompt fitted and its ReplyPlan: the request's options
        over the session's reply settings, under the engine's fidelity."""
        request, reply, slot = self.request, self.reply, self.slot
        engine_config = slot.config
        forced = tuple(slot.llm.model.tokenize(request.reply_text, False)) if request.reply_text is not None else None
        limit = len(forced) if forced is not None else request.max_new_tokens or reply.max_new_tokens
        sampling = request.llm or reply.llm
        if forced is None:
            check_beam_request(slot, sampling, request.speech)
        if request.prompt is None:  # the text no history left out can shorten, checked before any encoding
            own = "".join(p for p in request.content if isinstance(p, str))
            own += request.system_prompt if isinstance(request.system_prompt, str) else ""
            slot.llm.check_text_fits(len(own.encode("utf-8", "surrogatepass")), limit)
        media = slot.inputs.encode(request)
        prompt, prompt_stats = fitting_prompt(slot, request, media, limit, reply.prompt_rule(engine_config.fidelity))
        plan = stages.ReplyPlan(
            prompt,
            request.seed,
            limit,
            reply.max_audio_per_chunk,
            sampling,
            reply.tts_sampling(engine_config.fidelity),
            reply.tts_handoff,
            engine_config.token2wav.first_window_codes,
            forced,
        )
        return plan, media, prompt_stats

    def _build_pipeline(self, plan: stages.ReplyPlan) -> Pipeline:
        """LLM -> TTS -> Token2Wav on the slot's stages (LLM -> text for a text-only reply)."""
        slot, reply, speech = self.slot, self.reply, self.request.speech
        if speech:
            body = [("tts", stages.TtsStage(slot.tts, plan)), *stages.token2wav_stages(slot.token2wav, slot.overlap)]
        else:
            body = [("text", stages.text_stage())]
        return Pipeline(
            ("llm", stages.llm_stage(slot.llm, plan, text_to_caller=speech)),
            body,
            [reply.tts_queue, *[reply.audio_queue] * len(body)],
            slot.pin_stage_thread,
        )

    @staticmethod
    def _chunks(pipe: Pipeline, n_prompt: int, heard: _AudioClock):
        """Yields the pipeline's chunks, numbered, and returns the final one (None: cancelled),
        which leaves later with the request's timings."""
        final: SpeechChunk | None = None
        index = 0
        try:
            for item in pipe:
                if isinstance(item, stages.TextDelta):
                    chunk = SpeechChunk(item.text, np.zeros(0, np.float32), index, False, prompt_tokens=n_prompt)
                else:
                    chunk = replace(item, index=index, prompt_tokens=n_prompt)
                    heard.add(chunk.audio.size)
                index += 1
                if chunk.is_final:
                    final = chunk  # the end follows at once
                else:
                    yield chunk
        finally:
            pipe.close()
        return final


class _AudioClock:
    """When a request's audio came out: seconds of audio per Token2Wav (or text stage) output,
    and the first and last audio's times since ``start``."""

    def __init__(self, start: float):
        self.start = start
        self.chunk_seconds: list[float] = []
        self.first: float | None = None
        self.last: float | None = None

    def add(self, samples: int) -> None:
        self.chunk_seconds.append(samples / OUTPUT_SAMPLE_RATE)
        if samples:
            self.last = time.perf_counter() - self.start
            self.first = self.first if self.first is not None else self.last
