"""The main API: ``OmniSession.speak()`` / ``stream()``.

A session loads one module set on one device and answers one request at a time through the
threaded pipeline LLM -> TTS -> Token2Wav (docs/architecture.md). The work itself lives in the
stage modules (llm, tts, token2wav, stages, pipeline); this class wires them together.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Callable

import numpy as np

from . import checks, placement, stages
from .backend import resolve_device
from .config import DuplexConfig, LlmSampling, SessionConfig, Token2WavConfig
from .constants import OUTPUT_SAMPLE_RATE
from .demo import demo_config, demo_model_dir
from .errors import ConfigError, InvalidArgumentError
from .inputs import InputEncoder, Request, build_prompt
from .llm import LanguageModel
from .models import discover, validate
from .pipeline import Pipeline, iterate_in_thread
from .profile import Profiler, request_timings
from .results import SpeakResult, SpeechChunk
from .token2wav import Token2Wav
from .tts import TtsModel

log = logging.getLogger(__name__)


MAX_DEFAULT_ENCODER_THREADS = 16  # the encoders' graphs stop scaling well beyond this


class OmniSession:
    """One model set on one device; one request at a time.

    ``model_dir`` None uses the demo set (random weights, short replies). ``progress(step,
    steps, what)`` is called before each loading step (the CLI's bar)."""

    def __init__(
        self,
        model_dir=None,
        device: str = "auto",
        config: SessionConfig | None = None,
        progress: Callable[[int, int, str], None] | None = None,
    ):
        if config is not None and not isinstance(config, SessionConfig):
            raise ConfigError("config", f"must be a SessionConfig, got {type(config).__name__}")
        step = iter(range(1, 4))
        report = (lambda what: progress(next(step), 3, what)) if progress else (lambda what: None)  # noqa: E731
        self.config = c = config or (demo_config() if model_dir is None else SessionConfig())
        self.model_dir = Path(model_dir) if model_dir is not None else demo_model_dir()
        self.device = resolve_device(device)
        report("LLM + TTS")
        model_set = discover(self.model_dir)
        validate(model_set, ["llm", "tts", "projector"], self.device)
        self.llm = LanguageModel(model_set.llm, self.device, c.n_ctx, c.llm_threads, c.exact, c.prompt_cache)
        self.tts = TtsModel(
            model_set.path("tts"), model_set.path("projector"), self.device, c.module_threads, c.exact, c.tts_ctx
        )
        if self.tts.dims.llm_embd != self.llm.n_embd:
            raise InvalidArgumentError(
                f"the TTS projector expects {self.tts.dims.llm_embd}-d hidden states, the LLM has {self.llm.n_embd}"
            )
        report("placement")
        self.placement = self._plan(c.token2wav)
        self.inputs = InputEncoder(self.model_dir, self.device, self._encoder_threads(), c.audio_mode, c.stack_frames)
        report("Token2Wav")
        self.token2wav = self._token2wav(c.token2wav)
        self._other_token2wav: dict[str, Token2Wav] = {}
        self.profiler = Profiler()
        self._busy = threading.Lock()
        self._cancelled = threading.Event()  # cancel() before the pipeline exists (inputs being encoded)
        self.last_prompt_tokens: int | None = None  # the running (or last) request's prompt length
        self._pipeline: Pipeline | None = None
        self._closed = False

    # -- set-up --------------------------------------------------------------------------------
    def _plan(self, t2w: Token2WavConfig) -> placement.PlacementPlan | None:
        """The CPU placement to apply, or None (pin=False, or too few CPUs when pin=None)."""
        if self.config.pin is False or t2w.cpus is not None:
            return None
        plan = placement.plan_for_device(self.device, t2w.explicit_threads, self.config.numa_node)
        if not plan.apply and self.config.pin is None:
            log.info("placement not applied: %s", "; ".join(plan.notes))
            return None
        log.info("placement: %s", plan.describe())
        return plan

    def _token2wav(self, t2w: Token2WavConfig) -> Token2Wav:
        if self.placement is not None:
            t2w = replace(t2w, threads=len(self.placement.vocoder_cpus), cpus=self.placement.vocoder_cpus)
        return Token2Wav(self.model_dir, self.device, t2w)

    @property
    def overlap(self) -> bool:
        """Whether Token2Mel and the vocoder run as two pipeline stages (Token2WavConfig.overlap;
        by default when Token2Mel runs off the CPU)."""
        o = self.config.token2wav.overlap
        return self.token2wav.device != "cpu" if o is None else o

    def token2wav_for(self, cache_policy: str) -> Token2Wav:
        """The session's Token2Wav, or (made once and kept) one like it with another cache policy."""
        if self.config.token2wav.cache_policy == cache_policy:
            return self.token2wav
        t2w = self._other_token2wav.get(cache_policy)
        if t2w is None:
            t2w = self._other_token2wav[cache_policy] = self._token2wav(
                replace(self.config.token2wav, cache_policy=cache_policy)
            )
        return t2w

    def duplex(self, system_prompt: str | None = None, voice=None, config: DuplexConfig | None = None):
        """A full-duplex conversation (:class:`~llama_omni_py.duplex.DuplexSession`); the session
        serves nothing else until it is closed. ``voice``: reference audio for the LLM's voice
        slot; ``system_prompt`` None: "You are a helpful assistant."."""
        from .duplex import DuplexSession

        if config is not None and not isinstance(config, DuplexConfig):
            raise ConfigError("config", f"must be a DuplexConfig, got {type(config).__name__}")
        held = self._request()
        held.__enter__()
        try:
            return DuplexSession(
                self, system_prompt, voice, config or DuplexConfig(), lambda: held.__exit__(None, None, None)
            )
        except BaseException:
            held.__exit__(None, None, None)
            raise

    def _encoder_threads(self) -> int:
        """APM and VPM run on the LLM's thread between its calls, never beside it: by default they
        get every CPU the stage threads may use (capped at 16), as the LLM does."""
        if self.config.threads:
            return self.config.threads
        cpus = self.placement.stage_cpus if self.placement is not None else checks.usable_cpus()
        return max(1, min(len(cpus), MAX_DEFAULT_ENCODER_THREADS))

    def reconfigure(self, token2wav: Token2WavConfig) -> None:
        """Rebuilds the Token2Wav stage (vocoder threads, CPUs, steps) and its placement, keeping
        the loaded LLM and TTS."""
        if not isinstance(token2wav, Token2WavConfig):
            raise ConfigError("token2wav", f"must be a Token2WavConfig, got {type(token2wav).__name__}")
        with self._request():
            old_plan, old_t2w = self.placement, self.token2wav
            self.placement = self._plan(token2wav)
            try:
                self.token2wav = self._token2wav(token2wav)
            except BaseException:
                self.placement = old_plan
                raise
            old_t2w.close()
            self.config = replace(self.config, token2wav=token2wav)

    @contextlib.contextmanager
    def _request(self):
        """Holds the session for one request (one at a time)."""
        if self._closed:
            raise InvalidArgumentError("the session is closed")
        if not self._busy.acquire(blocking=False):
            raise InvalidArgumentError("this session is already serving a request (one at a time)")
        try:
            yield
        finally:
            self._busy.release()

    # -- requests ------------------------------------------------------------------------------
    def stream(
        self,
        text: str | None = None,
        *,
        audio=None,
        image=None,
        video=None,
        voice=None,
        seed: int | None = None,
        max_new_tokens: int | None = None,
        system_prompt: str | None = None,
        history=(),
        speech: bool = True,
        tts_template: bool | None = None,
        stack_frames: int | None = None,
        llm: LlmSampling | None = None,
    ) -> Iterator[SpeechChunk]:
        """Yields SpeechChunks as audio becomes ready; the last has ``is_final`` and ``timings``.

        audio/image/video: a path, bytes or array (see media.py), or a list of them; voice:
        reference audio for the system prompt's voice slot (the Token2Wav voice stays the set's
        prompt_cache voice); seed: -1 draws one (reported in timings.seed); system_prompt
        replaces the assistant role text; history: earlier (role, text) turns, role "user" or
        "assistant"; speech=False gives a text-only reply; tts_template (default: speech) ends the
        prompt with the speech prefix; stack_frames: video frames per video; llm: this reply's
        LLM sampling (temperature, top_p, ...) instead of ``config.llm``."""
        request = Request(
            text,
            audio,
            image,
            video,
            voice,
            self.config.seed if seed is None else seed,
            max_new_tokens,
            system_prompt,
            tuple(history),
            speech,
            speech if tts_template is None else tts_template,
            stack_frames,
            llm,
        )
        return self._stream(request)

    def _stream(self, request: Request) -> Iterator[SpeechChunk]:
        with self._request():
            self._cancelled.clear()
            yield from self._run(request)

    def speak(self, text: str | None = None, **options) -> SpeakResult:
        """The whole reply at once; options as for ``stream()``."""
        return SpeakResult.collect(self.stream(text, **options))

    def astream(self, text: str | None = None, **options) -> AsyncIterator[SpeechChunk]:
        """``stream()`` for asyncio (same options): the pipeline runs off the event loop; leaving
        the loop early cancels the request and waits for its threads."""
        import asyncio

        return iterate_in_thread(lambda: self.stream(text, **options), self.cancel, asyncio.get_running_loop())

    def _run(self, r: Request) -> Iterator[SpeechChunk]:
        start = time.perf_counter()
        counts: dict = {"seed": r.seed}
        c = self.config
        limit = r.max_new_tokens or c.max_new_tokens
        prompt = self._fitting_prompt(r, limit, counts)
        if self._cancelled.is_set():  # cancelled while the inputs were encoded
            return
        reply = stages.Reply(prompt, r.seed, limit, c.max_audio_per_chunk, r.llm or c.llm, c.tts, c.tts_handoff)
        t2w_stages = stages.token2wav_stages(self.token2wav, self.overlap) if r.speech else []
        t2w = t2w_stages[0][1] if t2w_stages else None
        body = [("tts", stages.TtsStage(self.tts, reply)), *t2w_stages] if r.speech else [("text", stages.text_stage())]
        pipe = Pipeline(
            ("llm", stages.llm_stage(self.llm, reply, text_to_caller=r.speech)),
            body,
            [c.tts_queue, *[c.audio_queue] * len(body)],
            self._pin_stage_thread,
        )
        self._pipeline = pipe
        first_audio = last_audio = None
        chunk_audio: list[float] = []  # seconds of audio per Token2Wav (or text stage) output
        final: SpeechChunk | None = None
        index = 0
        try:
            for item in pipe:
                if isinstance(item, stages.TextDelta):
                    chunk = SpeechChunk(item.text, np.zeros(0, np.float32), index, False)
                else:
                    chunk = replace(item, index=index)
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
            self._pipeline = None
        if final is None:  # cancelled
            return
        counts.update(
            prompt_tokens=prompt.token_count(),
            prompt_cached=self.llm.reused_positions,
            prefill_ms=self.llm.last_prefill_ms,
            n_tokens=self.llm.last_n_tokens,
            n_tts_tokens=t2w.n_codes if t2w else 0,
            tts_slides=self.tts.slides if r.speech else 0,
        )
        timings = request_timings(
            pipe.events,
            chunk_audio,
            start=start,
            end=time.perf_counter(),
            first_audio=first_audio,
            last_audio=last_audio,
            **counts,
        )
        self.profiler.add(pipe.events, {k: counts[k] for k in ("apm_ms", "vpm_ms") if k in counts})
        yield replace(final, timings=timings)

    def _fitting_prompt(self, r: Request, limit: int, counts: dict):
        """The request's prompt; when it and the reply do not fit the LLM context, the oldest
        earlier messages are left out, a whole turn at a time (the system prompt always stays)."""
        media = self.inputs.encode(r, counts)
        prompt = build_prompt(self.llm.model, r, media)
        history = list(r.history)
        while history and prompt.token_count() + limit > self.llm.n_ctx:
            history.pop(0)
            while history and history[0][0] != "user":  # a turn starts with the user
                history.pop(0)
            prompt = build_prompt(self.llm.model, r, media, tuple(history))
        counts["history_dropped"] = len(r.history) - len(history)
        self.last_prompt_tokens = prompt.token_count()  # read by a server while the request runs
        if counts["history_dropped"]:
            log.info(
                "left out the %d oldest messages to fit the context (%d tokens)",
                counts["history_dropped"],
                self.llm.n_ctx,
            )
        self.llm.check_fits(prompt, limit)
        return prompt

    def _pin_stage_thread(self) -> None:
        # Threads the native code starts from here (libllama's) inherit this mask.
        if self.placement is not None:
            placement.pin_current_thread(self.placement.stage_cpus)

    def cancel(self) -> None:
        """Stops the running request; its stream ends after the native call in flight."""
        self._cancelled.set()
        pipe = self._pipeline
        if pipe is not None:
            pipe.cancel()

    def close(self) -> None:
        """Cancels a running request, joins its threads and releases the Token2Wav stage."""
        if self._closed:
            return
        self.cancel()
        pipe = self._pipeline
        if pipe is not None:
            pipe.close()
        self._closed = True
        self.token2wav.close()
        for t2w in self._other_token2wav.values():
            t2w.close()
        if self.profiler.enabled:
            print(
                "llama-omni-py stage profile (OMNI_T2W_PROFILE):\n" + self.profiler.report(),
                file=sys.stderr,
                flush=True,
            )

    def __enter__(self) -> OmniSession:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
