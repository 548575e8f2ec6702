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
        r, c, b = self.request, self.reply, self.slot
        engine = b.config
        start = time.perf_counter()
        forced = tuple(b.llm.model.tokenize(r.reply_text, False)) if r.reply_text is not None else None
        limit = len(forced) if forced is not None else r.max_new_tokens or c.max_new_tokens
        if forced is None:
            check_beam_request(b, r.llm or c.llm, r.speech)
        if r.prompt is None:  # the text no history left out can shorten, checked before any encoding
            own = "".join(p for p in r.content if isinstance(p, str))
            own += r.system_prompt if isinstance(r.system_prompt, str) else ""
            b.llm.check_text_fits(len(own.encode("utf-8", "surrogatepass")), limit)
        media = b.inputs.encode(r)
        prompt, prompt_stats = fitting_prompt(b, r, media, limit, c.prompt_rule(engine.fidelity))
        if self._cancelled.is_set():  # cancelled while the inputs were encoded
            return
        reply = stages.Reply(
            prompt,
            r.seed,
            limit,
            c.max_audio_per_chunk,
            r.llm or c.llm,
            c.tts_sampling(engine.fidelity),
            c.tts_handoff,
            engine.token2wav.first_window_codes,
            forced,
        )
        if r.speech:
            body = [("tts", stages.TtsStage(b.tts, reply)), *stages.token2wav_stages(b.token2wav, b.overlap)]
        else:
            body = [("text", stages.text_stage())]
        pipe = Pipeline(
            ("llm", stages.llm_stage(b.llm, reply, text_to_caller=r.speech)),
            body,
            [c.tts_queue, *[c.audio_queue] * len(body)],
            b.pin_stage_thread,
        )
        self._pipeline = pipe
        n_prompt = prompt_stats.prompt_tokens
        first_audio = last_audio = None
        chunk_audio: list[float] = []  # seconds of audio per Token2Wav (or text stage) output
        final: SpeechChunk | None = None
        index = 0
        try:
            for item in pipe:
                if isinstance(item, stages.TextDelta):
                    chunk = SpeechChunk(item.text, np.zeros(0, np.float32), index, False, prompt_tokens=n_prompt)
                else:
                    chunk = replace(item, index=index, prompt_tokens=n_prompt)
                    chunk_audio.append(chunk.audio.size / OUTPUT_SAMPLE_RATE)
                    if chunk.audio.size:
                        last_audio = time.perf_counter() - start
                        first_audio = first_audio if first_audio is not None else last_audio
                index += 1
                if chunk.is_final:
                    final = chunk  # the end follows at once; it leaves with the request's timings
                else:
                    yield chunk
        finally:
            pipe.close()
        if final is None:  # cancelled
            return
        timings = request_timings(
            pipe.events,
            chunk_audio,
            start=start,
            end=time.perf_counter(),
            first_audio=first_audio,
            last_audio=last_audio,
            seed=r.seed,
            stats=(*final.stats, media.stats, prompt_stats),
        )
        encoders = {"apm_ms": media.stats.apm_ms, "vpm_ms": media.stats.vpm_ms} if r.has_media else {}
        self.profiler.add(pipe.events, encoders)
        yield replace(final, timings=timings, stats=())
