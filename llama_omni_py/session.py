"""The main API: ``OmniSession.speak()`` / ``stream()`` over the threaded pipeline
LLM -> bounded queue -> TTS -> bounded queue -> Token2Wav (see pipeline.py)."""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Iterator

import numpy as np

from .backend import resolve_device
from .errors import ConfigError, InvalidArgumentError, OmniError
from .pipeline import Pipeline
from .profile import Profiler, compute_rtf
from .prompt import simplex_speech_prompt
from .speech import SpeechCore, SpeechCoreConfig
from .token2wav import CACHE_POLICIES, Token2Wav

log = logging.getLogger(__name__)

SAMPLE_RATE = 24000
T2W_BATCH = 25  # speech tokens per Token2Wav push (one second of audio)


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        return int(raw)
    except ValueError:
        raise ConfigError(name, f"must be an integer, got {raw!r}") from None


@dataclass(frozen=True)
class SessionConfig:
    """Knobs of a session; every error names the field. Env overrides: OMNI_TTS_QUEUE (tts_queue),
    OMNI_T2W_THREADS (t2w_threads, through Token2Wav)."""

    threads: int = 0                      # LLM/TTS CPU threads (<= 0: libllama's default)
    t2w_threads: int | None = None        # vocoder pool; None: OMNI_T2W_THREADS or up to 16
    t2w_cache_policy: str = "llama.cpp-omni"  # Token2Wav streaming rules, or "reference"
    tts_queue: int = field(default_factory=lambda: _env_int("OMNI_TTS_QUEUE", 16))
    audio_queue: int = 16
    cfm_steps: int = 5
    max_new_tokens: int = 256
    max_audio_per_chunk: int = 500        # TTS codes per 10-token chunk before it is cut (llama.cpp-omni: 500)
    seed: int = 0
    audio_mode: str = "clamp"             # or "window" for audio over 29.9 s
    stack_frames: int = 1                 # video frames; more than 1 logs a warning
    pin: bool | None = None               # one NUMA node, vocoder and stage threads on disjoint CPUs;
                                          # None: when the node has >= 4 usable CPUs; True: always
    exact: bool = False

    def __post_init__(self):
        def check(name, ok, msg):
            if not ok:
                raise ConfigError(name, msg)
        check("tts_queue", isinstance(self.tts_queue, int) and self.tts_queue >= 1, "must be a positive integer")
        check("audio_queue", isinstance(self.audio_queue, int) and self.audio_queue >= 1, "must be a positive integer")
        check("t2w_cache_policy", self.t2w_cache_policy in CACHE_POLICIES,
              f"must be one of {', '.join(map(repr, CACHE_POLICIES))}, got {self.t2w_cache_policy!r}")
        check("cfm_steps", isinstance(self.cfm_steps, int) and 1 <= self.cfm_steps <= 100, "must be an integer in 1..100")
        check("audio_mode", self.audio_mode in ("clamp", "window"), "must be 'clamp' or 'window'")
        check("stack_frames", isinstance(self.stack_frames, int) and self.stack_frames >= 1, "must be a positive integer")


@dataclass(frozen=True)
class Request:
    text: str | None
    audio: Any
    image: Any
    video: Any
    voice: Any
    seed: int
    max_new_tokens: int | None
    system_prompt: str | None = None
    history: tuple = ()
    speech: bool = True
    tts_template: bool = True
    stack_frames: int | None = None


@dataclass
class SpeechChunk:
    text_delta: str
    audio: np.ndarray          # float32, 24 kHz; may be empty
    index: int
    is_final: bool


@dataclass
class SpeakResult:
    text: str
    audio: np.ndarray
    sample_rate: int
    timings: dict

    def save(self, path: str | os.PathLike) -> None:
        import soundfile as sf

        sf.write(str(path), self.audio, self.sample_rate)


def _items(x) -> list:
    """An input that may be one source or a list of them (None: none)."""
    return [] if x is None else list(x) if isinstance(x, (list, tuple)) else [x]


def plan_for_device(device: str, t2w_threads: int | None):
    """The placement plan for a session on ``device`` (its NUMA node from the PCI address)."""
    from . import placement

    node, label = placement.device_numa_node(device)
    return placement.plan_placement(placement.read_topology(), t2w_threads, node, label)


def demo_model_dir(size: str = "tiny") -> Path:
    """A random-weight set in the user cache (tiny: the demo; real: the benchmark set, 6.4 GB),
    generated on first use."""
    from .modelgen import make_models
    from .models import discover

    root = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "llama-omni-py" / (
        "demo-models" if size == "tiny" else f"demo-models-{size}")
    try:
        discover(root)
    except OmniError:
        log.warning("writing the demo module set (%s) to %s", size, root)
        make_models(root, size=size)
    log.warning("using the demo module set: random weights, so the reply text is gibberish and the "
                "audio is noise; pass model_dir for a real MiniCPM-o-4_5-gguf directory")
    return root


class OmniSession:
    """One model set on one device; one request at a time (``speak``/``stream``)."""

    def __init__(self, model_dir: str | os.PathLike | None = None, device: str = "auto",
                 config: SessionConfig | None = None, progress: Callable[[int, int, str], None] | None = None):
        """``progress(step, steps, what)`` is called before each loading step (the CLI's bar)."""
        step = iter(range(1, 4))
        report = (lambda what: progress(next(step), 3, what)) if progress else (lambda what: None)  # noqa: E731
        if model_dir is None and config is None:
            # Random weights never emit the audio end token: keep the demo reply short (about
            # 2 s of audio per 10 text tokens, like real speech) instead of 20 s of noise per chunk.
            config = SessionConfig(max_new_tokens=60, max_audio_per_chunk=50)
        self.config = c = config or SessionConfig()
        self.model_dir = Path(model_dir) if model_dir is not None else demo_model_dir()
        self.device = resolve_device(device)
        report("LLM + TTS")
        self.core = SpeechCore(self.model_dir, self.device, SpeechCoreConfig(
            max_new_tokens=c.max_new_tokens, max_audio_per_chunk=c.max_audio_per_chunk, threads=c.threads,
            seed=c.seed, exact=c.exact))
        self.placement, self.token2wav = self._token2wav_stage(c.t2w_threads, report)
        self._audio_encoder = self._image_encoder = None
        self._pipeline: Pipeline | None = None
        self._busy = threading.Lock()
        self._cancelled = threading.Event()  # cancel() before the pipeline exists (during prefill inputs)
        self.last_events: list = []     # (stage, start, end) per item of the last request
        self.last_timings: dict = {}
        self.profiler = Profiler()

    def _token2wav_stage(self, t2w_threads: int | None, report=lambda what: None):
        """(placement plan or None, Token2Wav) for ``t2w_threads`` vocoder threads."""
        c = self.config
        report("placement")
        plan = plan_for_device(self.device, t2w_threads) if c.pin is not False else None
        if plan is not None and not plan.apply and c.pin is None:
            log.info("placement not applied: %s", "; ".join(plan.notes))
            plan = None
        report("Token2Wav")
        if plan is not None:
            log.info("placement: %s", plan.describe())
            return plan, Token2Wav(self.model_dir, self.device, steps=c.cfm_steps, threads=len(plan.vocoder_cpus),
                                   cpus=plan.vocoder_cpus, cache_policy=c.t2w_cache_policy)
        return None, Token2Wav(self.model_dir, self.device, steps=c.cfm_steps, threads=t2w_threads,
                               cache_policy=c.t2w_cache_policy)

    def set_t2w_threads(self, t2w_threads: int | None) -> None:
        """Rebuilds the Token2Wav stage (and its placement) with another vocoder thread count,
        keeping the loaded LLM/TTS (benchmarks compare thread counts in one process)."""
        if self.token2wav is None:
            raise InvalidArgumentError("the session is closed")
        if not self._busy.acquire(blocking=False):
            raise InvalidArgumentError("this session is serving a request")
        try:
            placement, token2wav = self._token2wav_stage(t2w_threads)
            self.token2wav.close()
            self.placement, self.token2wav = placement, token2wav
            self.config = replace(self.config, t2w_threads=t2w_threads)
        finally:
            self._busy.release()

    # -- inputs --------------------------------------------------------------------------------
    def _encoders(self):
        from .audio_encoder import AudioEncoder
        from .image_encoder import ImageEncoder

        threads = max(1, self.config.threads)
        if self._audio_encoder is None:
            self._audio_encoder = AudioEncoder(self.model_dir, self.device, threads, self.config.audio_mode)
        if self._image_encoder is None:
            self._image_encoder = ImageEncoder(self.model_dir, self.device, threads)
        return self._audio_encoder, self._image_encoder

    def _prompt(self, r: "Request", timings: dict):
        if r.text is not None and not isinstance(r.text, str):
            raise InvalidArgumentError("text must be a string")
        user_audio, user_images, voice = [], [], None
        if any(x is not None for x in (r.audio, r.image, r.video, r.voice)):
            apm, vpm = self._encoders()
            t0 = time.perf_counter()
            if r.voice is not None:
                voice = apm.encode(r.voice)
            user_audio = [apm.encode(a) for a in _items(r.audio)]
            timings["apm_ms"] = (time.perf_counter() - t0) * 1000
            t0 = time.perf_counter()
            user_images = [vpm.encode(i) for i in _items(r.image)]
            frames = self.config.stack_frames if r.stack_frames is None else r.stack_frames
            for v in _items(r.video):
                user_images += vpm.encode_video(v, frames)
            timings["vpm_ms"] = (time.perf_counter() - t0) * 1000
        return simplex_speech_prompt(self.core.llm_model, r.text or "", reference_audio=voice,
                                     user_audio=user_audio, user_images=user_images, system_prompt=r.system_prompt,
                                     history=r.history, tts_template=r.tts_template)

    # -- requests ------------------------------------------------------------------------------
    def stream(self, text: str | None = None, *, audio=None, image=None, video=None, voice=None,
               seed: int | None = None, max_new_tokens: int | None = None, system_prompt: str | None = None,
               history=(), speech: bool = True, tts_template: bool | None = None,
               stack_frames: int | None = None) -> Iterator[SpeechChunk]:
        """Yields SpeechChunks as audio becomes ready; the last has is_final=True.

        audio/image/video: path, bytes or array (see media.py), or a list of them; voice: reference
        audio placed in the system prompt's voice slot (the Token2Wav voice stays the set's
        prompt_cache voice); system_prompt replaces the default assistant role text; history:
        earlier (role, text) turns, role "user" or "assistant"; speech=False gives a text-only reply
        (no TTS, empty audio); tts_template (default: speech) ends the prompt with the speech
        prefix; stack_frames: video frames per video (default: the config's)."""
        if max_new_tokens is not None and (not isinstance(max_new_tokens, int) or max_new_tokens < 1):
            raise InvalidArgumentError(f"max_new_tokens must be a positive integer, got {max_new_tokens!r}")
        if stack_frames is not None and (not isinstance(stack_frames, int) or stack_frames < 1):
            raise InvalidArgumentError(f"stack_frames must be a positive integer, got {stack_frames!r}")
        r = Request(text, audio, image, video, voice, self.config.seed if seed is None else seed, max_new_tokens,
                    system_prompt, tuple(history), bool(speech), bool(speech if tts_template is None else tts_template),
                    stack_frames)
        if not self._busy.acquire(blocking=False):
            raise InvalidArgumentError("this session is already serving a request (one at a time)")
        self._cancelled.clear()
        try:
            yield from self._stream(r)
        finally:
            self._busy.release()

    async def astream(self, text: str | None = None, **options) -> AsyncIterator[SpeechChunk]:
        """``stream()`` for asyncio (the server; same options): each chunk is awaited off the loop."""
        import asyncio

        it = self.stream(text, **options)
        done = object()
        try:
            while True:
                chunk = await asyncio.to_thread(next, it, done)
                if chunk is done:
                    return
                yield chunk
        finally:
            self.cancel()  # a cancelled task must not leave the pipeline running
            for _ in range(600):
                try:
                    it.close()
                    break
                except ValueError:  # next() still running in the worker thread; it ends within a poll
                    await asyncio.sleep(0.05)

    def _stream(self, r: "Request") -> Iterator[SpeechChunk]:
        if self.token2wav is None:
            raise InvalidArgumentError("the session is closed")
        timings: dict = {}
        start = time.perf_counter()
        prompt, seed = self._prompt(r, timings), r.seed
        if self._cancelled.is_set():  # cancelled while the inputs were encoded
            return
        core, t2w = self.core, self.token2wav
        sampler = core.tts_sampler(seed)
        core.tts.clear()
        t2w.reset()
        pending: list[int] = []
        index = n_codes = 0

        def tts(chunk):
            tokens, hiddens, final = chunk
            yield core.speak_chunk(tokens, hiddens, final, sampler)

        def token2wav(ch):
            nonlocal index, n_codes
            n_codes += len(ch.audio_tokens)
            pending.extend(ch.audio_tokens)
            parts = []
            while len(pending) >= T2W_BATCH:
                parts.append(t2w.push(pending[:T2W_BATCH]))
                del pending[:T2W_BATCH]
            if ch.final:
                parts.append(t2w.push(pending, final=True))
                pending.clear()
            audio_out = np.concatenate(parts) if parts else np.zeros(0, np.float32)
            index += 1
            yield SpeechChunk(ch.text, audio_out, index - 1, ch.final)

        def text_only(chunk):  # speech=False: the LLM's text, no TTS
            nonlocal index
            tokens, _, final = chunk
            index += 1
            yield SpeechChunk(core.llm_model.detokenize(tokens) if tokens else "", np.zeros(0, np.float32), index - 1, final)

        c = self.config
        stages = [("tts", tts), ("token2wav", token2wav)] if r.speech else [("text", text_only)]
        self._pipeline = pipe = Pipeline(("llm", lambda: core.llm_chunks(prompt, seed, r.max_new_tokens)),
                                         stages, [c.tts_queue, *[c.audio_queue] * len(stages)], self._pin_stage_thread)
        first_audio, last_audio, chunk_audio = None, None, []
        try:
            for chunk in pipe:
                chunk_audio.append(chunk.audio.size / SAMPLE_RATE)
                if chunk.audio.size:
                    last_audio = time.perf_counter() - start
                    first_audio = first_audio if first_audio is not None else last_audio
                yield chunk
        finally:
            pipe.close()
            self.last_events = list(pipe.events)
            self._pipeline = None
            timings.update(self._summarise(pipe.events, start, first_audio))
            timings.update(prefill_ms=core.last_prefill_ms, n_tokens=core.last_n_tokens, n_tts_tokens=n_codes)
            audio_s = sum(chunk_audio)
            timings["audio_s"] = audio_s
            if audio_s > 0 and last_audio is not None:
                timings["wall_rtf"] = last_audio / audio_s
            timings["compute_rtf"] = compute_rtf(pipe.events, chunk_audio)
            self.last_timings = timings
            self.profiler.add(pipe.events, {k: v for k, v in timings.items() if k in ("apm_ms", "vpm_ms")})

    def _pin_stage_thread(self) -> None:
        # Threads the native code starts from here (libllama's) inherit this mask.
        if self.placement is not None and hasattr(os, "sched_setaffinity"):
            os.sched_setaffinity(0, self.placement.stage_cpus)

    @staticmethod
    def _summarise(events, start: float, first_audio: float | None) -> dict:
        out: dict = {"time_to_first_audio_s": first_audio, "wall_s": time.perf_counter() - start}
        for stage in ("llm", "tts", "token2wav"):
            out[f"{stage}_ms"] = sum((e - s) * 1000 for name, s, e in events if name == stage)
        return out

    def speak(self, text: str | None = None, **options) -> SpeakResult:
        """The whole reply at once; options as for ``stream()``."""
        texts, parts = [], []
        for chunk in self.stream(text, **options):
            texts.append(chunk.text_delta)
            parts.append(chunk.audio)
        wav = np.concatenate(parts) if parts else np.zeros(0, np.float32)
        return SpeakResult("".join(texts), wav, SAMPLE_RATE, dict(self.last_timings))

    def cancel(self) -> None:
        """Stops the running request; its stream ends after the chunk in flight."""
        self._cancelled.set()
        pipe = self._pipeline
        if pipe is not None:
            pipe.cancel()

    def close(self) -> None:
        self.cancel()
        pipe = self._pipeline
        if pipe is not None:
            pipe.close()
        if self.token2wav is not None:
            self.token2wav.close()
            if self.profiler.enabled:
                print("llama-omni-py stage profile (OMNI_T2W_PROFILE):\n" + self.profiler.report(), file=sys.stderr, flush=True)
        self.token2wav = None

    def __enter__(self) -> "OmniSession":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
