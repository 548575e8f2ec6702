"""The main API: ``OmniEngine`` (one loaded module set, N session slots) and ``OmniSession``
(one conversation on a slot: ``speak()`` / ``stream()`` / ``duplex()`` / ``hands_free()``).

    with OmniEngine("MiniCPM-o-4_5-gguf", device="cuda:0", slots=4) as engine:
        a = engine.session(system_prompt="You are terse.", ref_audio="me.wav")
        b = engine.session(llm=omni.LlmSampling(temperature=0.2))
        ...

Every module's weights are loaded once (an :class:`EngineConfig`); each slot holds only its own
state (its LLM KV stream, TTS KV cache, Token2Wav caches, samplers), and each session its own
reply settings (a :class:`ReplyConfig`: system prompt, reference audio, sampling, limits). The
LLM's decode steps of all slots that are generating run as one batch, and so do the TTS code
steps (docs/slots.md). ``OmniSession(model_dir)`` alone is an engine of one slot that it owns.

A session's stages are an :class:`~llama_omni_py.orchestration.slot.SlotStages`; it answers one
request at a time: a turn-based reply through the threaded pipeline LLM -> TTS -> Token2Wav
(orchestration/turn_based.py, docs/architecture.md), a full-duplex conversation (duplex/), or
hands-free turns (voice/).
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import fields, replace
from typing import Callable

from . import checks
from .config import DuplexConfig, EngineConfig, ReplyConfig, Token2WavConfig
from .constants import MAX_SLOTS
from .content import EncodedAudio
from .device.backends import resolve_device
from .errors import ConfigError, InvalidArgumentError, SlotsBusyError
from .modelset.hub import resolve as resolve_model
from .modelset.random_set import random_set_dir, random_set_reply
from .orchestration.channels import iterate_in_thread
from .orchestration.inputs import Request
from .orchestration.slot import EngineModules, SlotStages
from .orchestration.timings import Profiler
from .orchestration.turn_based import TurnBasedRun
from .results import SpeakResult, SpeechChunk

# What stream() takes: the fields of a Request, and the inputs in their shorthand form.
REQUEST_OPTIONS = frozenset(f.name for f in fields(Request)) | {"audio", "image", "video", "video_audio"}


def checked_configs(config, reply: ReplyConfig | None, random_set: bool) -> tuple[EngineConfig, ReplyConfig]:
    """(engine configuration, default reply settings) from what an engine or session was given,
    checked against each other. The random set replies briefly unless told otherwise."""
    if reply is not None and not isinstance(reply, ReplyConfig):
        raise ConfigError("reply", f"must be a ReplyConfig, got {type(reply).__name__}")
    if config is None:
        engine = EngineConfig()
    elif isinstance(config, EngineConfig):
        engine = config
    else:
        raise ConfigError("config", f"must be an EngineConfig, got {type(config).__name__}")
    if reply is None:
        reply = random_set_reply() if random_set else ReplyConfig()
    reply.check_fits(engine)
    return engine, reply


class OmniEngine:
    """``slots`` sessions over one module set on one device; ``session()`` takes a free slot.

    ``model_dir``: a module set's directory or LLM file, or a repository id on a hub
    (``openbmb/MiniCPM-o-4_5-gguf``, ``REPO:Q8_0`` for a quantization: docs/model-files.md);
    None uses the random set (random weights, short replies). ``config``: an EngineConfig;
    ``reply``: the sessions' default ReplyConfig, which each
    ``session(...)`` may change. ``progress(step, steps, what)`` is called before each loading step."""

    def __init__(
        self,
        model_dir=None,
        device: str = "auto",
        slots: int = 1,
        config: EngineConfig | None = None,
        progress: Callable[[int, int, str], None] | None = None,
        *,
        reply: ReplyConfig | None = None,
    ):
        self.config, self.reply = checked_configs(config, reply, model_dir is None)
        checks.int_in("slots", slots, 1, MAX_SLOTS)
        steps = len(EngineModules.STEPS)
        step = iter(range(1, steps + 1))
        report = (lambda what: progress(next(step), steps, what)) if progress else (lambda what: None)  # noqa: E731
        self.device = resolve_device(device)
        # a repository id (owner/name[:QUANT]) is fetched and validated first (modelset/hub.py)
        self.model_dir = resolve_model(model_dir, self.device) if model_dir is not None else random_set_dir()
        self.modules = EngineModules(self.model_dir, self.device, self.config, slots, report)
        self._slots: list[SlotStages] = []
        try:
            self._slots = [self.modules.slot(k) for k in range(slots)]
        except BaseException:
            self._close_slots()
            raise
        self._lock = threading.Lock()
        self._free = list(range(slots))
        self._closed = False

    @property
    def slots(self) -> int:
        return len(self._slots)

    @property
    def free_slots(self) -> int:
        with self._lock:
            return len(self._free)

    @property
    def busy_slots(self) -> int:
        return self.slots - self.free_slots

    def session(self, reply: ReplyConfig | None = None, **settings) -> OmniSession:
        """An :class:`OmniSession` on a free slot (SlotsBusyError when none is free); closing it
        gives the slot back. ``reply`` (else the engine's) with ``settings`` -- ReplyConfig fields:
        system_prompt, ref_audio, llm, tts, max_new_tokens, seed, ... -- is how it replies."""
        reply = _reply_with(reply or self.reply, settings)
        reply.check_fits(self.config)
        return OmniSession.on_slot(self, self.claim(), reply)

    def claim(self) -> int:
        """Takes a free slot (its number); SlotsBusyError when none is free."""
        with self._lock:
            if self._closed:
                raise InvalidArgumentError("the engine is closed")
            if not self._free:
                raise SlotsBusyError(self.slots)
            return self._free.pop(0)

    def slot_stages(self, slot: int) -> SlotStages:
        return self._slots[slot]

    def release(self, slot: int) -> None:
        """Gives a slot back, its state emptied for the next session."""
        self._slots[slot].reset()
        with self._lock:
            if slot not in self._free:
                self._free.append(slot)
                self._free.sort()

    def memory(self) -> dict:
        """Bytes of the shared weights and of each slot's own state (KV caches, Token2Wav
        streams), as the modules report them."""
        tts, t2w = self.modules.tts, self.modules.token2wav
        return {
            "llm_weights": int(self.modules.llm.model.info.size_bytes),
            "tts_weights": int(tts.weight_bytes),
            "token2wav_weights": int(t2w.weight_bytes),
            "llm_kv_per_slot": int(self.modules.llm.kv_bytes_per_slot),
            "tts_kv_per_slot": int(tts.kv_bytes),
            "token2wav_state_per_slot": int(t2w.stream_bytes),
        }

    @property
    def scheduler_stats(self) -> dict:
        """How the LLM's decode steps were batched: llama_decode calls and the steps they held."""
        scheduler = self.modules.llm.scheduler
        return {
            "llm_batches": scheduler.batches,
            "llm_batched_steps": scheduler.batched_rows,
            "llm_mean_batch": scheduler.mean_batch,
        }

    def _close_slots(self) -> None:
        for stages in self._slots:
            stages.close()

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._close_slots()

    def __enter__(self) -> OmniEngine:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _reply_with(reply: ReplyConfig, settings: dict) -> ReplyConfig:
    try:
        return replace(reply, **settings) if settings else reply
    except TypeError as e:  # a name that is not a ReplyConfig field
        raise InvalidArgumentError(str(e)) from None


class OmniSession:
    """One conversation on a model set on one device; one request at a time.

    Built alone it loads the module set (an engine of one slot, closed with the session); from
    ``OmniEngine.session()`` it is one slot of a shared engine. ``model_dir``: a directory, its LLM
    file, or a repository id (``openbmb/MiniCPM-o-4_5-gguf[:QUANT]``, docs/model-files.md#from-a-hub);
    None uses the random set (random weights, short replies). ``config``: an EngineConfig,
    ``reply``: how this session replies (a ReplyConfig).
    ``progress(step, steps, what)`` is called before each loading step (the CLI's bar)."""

    def __init__(
        self,
        model_dir=None,
        device: str = "auto",
        config: EngineConfig | None = None,
        progress: Callable[[int, int, str], None] | None = None,
        *,
        reply: ReplyConfig | None = None,
    ):
        engine = OmniEngine(model_dir, device, 1, config, progress, reply=reply)
        self._attach(engine, engine.claim(), engine.reply, owns_engine=True)

    @classmethod
    def on_slot(cls, engine: OmniEngine, slot: int, reply: ReplyConfig | None = None) -> OmniSession:
        """A session on ``slot`` of ``engine`` (what ``OmniEngine.session()`` returns)."""
        self = cls.__new__(cls)
        self._attach(engine, slot, reply or engine.reply, owns_engine=False)
        return self

    def _attach(self, engine: OmniEngine, slot: int, reply: ReplyConfig, owns_engine: bool) -> None:
        self.engine, self.slot, self._owns_engine = engine, slot, owns_engine
        self.model_dir, self.device, self.reply = engine.model_dir, engine.device, reply
        self.stages = engine.slot_stages(slot)
        self.profiler = Profiler()
        self._busy = threading.Lock()
        self._run: TurnBasedRun | None = None
        self._closed = False

    @property
    def engine_config(self) -> EngineConfig:
        """What this session's slot runs with: the engine's configuration (with a Token2Wav stage
        this session reconfigured). How it replies is ``reply``, its ReplyConfig."""
        return self.stages.config

    # The loaded stages, by the names they have everywhere.
    llm = property(lambda self: self.stages.llm)
    tts = property(lambda self: self.stages.tts)
    token2wav = property(lambda self: self.stages.token2wav)
    placement = property(lambda self: self.stages.placement)
    inputs = property(lambda self: self.stages.inputs)

    def reconfigure(self, token2wav: Token2WavConfig) -> None:
        """Rebuilds the Token2Wav stage (vocoder threads, CPUs, steps) and its placement, keeping
        the loaded LLM and TTS."""
        if not isinstance(token2wav, Token2WavConfig):
            raise ConfigError("token2wav", f"must be a Token2WavConfig, got {type(token2wav).__name__}")
        with self._serving():
            self.stages.replace_token2wav(token2wav)

    @contextlib.contextmanager
    def _serving(self):
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
    def stream(self, text: str | None = None, **options) -> Iterator[SpeechChunk]:
        """Yields SpeechChunks as audio becomes ready; the last has ``is_final`` and ``timings``.

        content: the user message as a list of parts in order -- text, ``omni.Image``,
        ``omni.Audio``, ``omni.Video``, EncodedAudio (llama_omni_py.content); or, as shorthand,
        text and audio/image/video: a path, bytes or array (see media.py), or a list of them,
        laid out as images, videos, audio, text. A video is its frames each followed by the audio
        of its second (``engine_config.video``; video_audio: a separate audio track per video;
        max_frames, stack_frames: this request's). ref_audio: reference audio for the system
        prompt's voice slot (the Token2Wav voice stays the set's prompt_cache voice); seed: -1
        draws one (reported in timings.seed); system_prompt replaces the assistant role text
        (False: no system turn); history: earlier (role, content) turns, role "user" or
        "assistant", content a str, EncodedAudio or list of parts; speech=False gives a
        text-only reply; tts_template (default: speech) ends the prompt with the speech prefix;
        omni: join the parts as the reference's omni mode (None: when a video brings audio);
        prompt_style: this reply's prompt layout ("reference", "llama.cpp-omni",
        "llama.cpp-omni-eval", its evaluation CLIs', or "vllm-omni", parts joined by newlines as
        vLLM-Omni's server joins them; None: the session's prompt rules);
        reply_text: teacher forcing -- the reply is this text, evaluated (not sampled) so that the
        TTS speaks it from the LLM's hidden states, as llama.cpp-omni's TTS evaluation does;
        prompt: a prompt.Prompt built already (an evaluation's exact layout; no content then); llm:
        this reply's LLM sampling (temperature, top_p, ...) instead of the session's;
        max_slice_nums: slices per image besides its overview, 0..9 (0 or 1: the overview only),
        or a list with one per image; None: ``engine_config.vision`` (9 under the reference rules).
        Every option left None is the session's (its ReplyConfig)."""
        return self._stream(self.request(text, **options))

    def request(self, text: str | None = None, **options) -> Request:
        """The :class:`~llama_omni_py.orchestration.inputs.Request` that ``stream(text, **options)``
        answers: the options (``stream()``'s) over this session's reply settings."""
        unknown = sorted(set(options) - REQUEST_OPTIONS)
        if unknown:
            known = ", ".join(sorted(REQUEST_OPTIONS))  # a TypeError, as for any unexpected keyword
            raise TypeError(f"unexpected option(s) {', '.join(unknown)}; the options are {known}")
        given = {name: value for name, value in options.items() if value is not None}
        defaults = {"seed": self.reply.seed, "tts_template": given.get("speech", True)}
        if given.get("prompt") is None:  # a prompt built already holds its own system turn and reference audio
            defaults.update(ref_audio=self.reply.ref_audio, system_prompt=self.reply.system_prompt)
        return Request.of(text, **{**defaults, **given})

    def _stream(self, request: Request) -> Iterator[SpeechChunk]:
        with self._serving():
            run = self._run = TurnBasedRun(self.stages, self.reply, request, self.profiler)
            try:
                yield from run
            finally:
                run.close()
                self._run = None

    def speak(self, text: str | None = None, **options) -> SpeakResult:
        """The whole reply at once; options as for ``stream()``."""
        return SpeakResult.collect(self.stream(text, **options))

    def astream(self, text: str | None = None, **options) -> AsyncIterator[SpeechChunk]:
        """``stream()`` for asyncio (same options): the pipeline runs off the event loop; leaving
        the loop early cancels the request and waits for its threads."""
        import asyncio

        return iterate_in_thread(lambda: self.stream(text, **options), self.cancel, asyncio.get_running_loop())

    def duplex(self, system_prompt: str | None = None, ref_audio=None, config: DuplexConfig | None = None):
        """A full-duplex conversation (:class:`~llama_omni_py.duplex.DuplexSession`); the session
        serves nothing else until it is closed. ``ref_audio``: reference audio for the LLM's voice
        slot; ``system_prompt`` None: the session's, else "You are a helpful assistant."."""
        from .duplex import DuplexSession

        if config is not None and not isinstance(config, DuplexConfig):
            raise ConfigError("config", f"must be a DuplexConfig, got {type(config).__name__}")
        if system_prompt is None and isinstance(self.reply.system_prompt, str):
            system_prompt = self.reply.system_prompt
        ref_audio = self.reply.ref_audio if ref_audio is None else ref_audio
        held = contextlib.ExitStack()
        held.enter_context(self._serving())
        try:
            return DuplexSession(self.stages, system_prompt, ref_audio, config or DuplexConfig(), held.close)
        except BaseException:
            held.close()
            raise

    def encode_audio(self, audio) -> EncodedAudio:
        """Audio (a path, bytes or 16 kHz samples) through the audio encoder once: give the result
        as ``audio=`` or as a history turn's content and it is not encoded again."""
        import time

        apm = self.stages.inputs.encoders()[0]
        t0 = time.perf_counter()
        rows = apm.encode(audio)
        return EncodedAudio(rows, (time.perf_counter() - t0) * 1000)

    def hands_free(self, system_prompt: str | None = None, ref_audio=None, vad=None, **options):
        """Hands-free turns (:class:`~llama_omni_py.voice.HandsFreeSession`): ``push()`` microphone
        audio, ``respond()`` to each utterance the voice activity detector finds. ``vad``: a
        :class:`~llama_omni_py.voice.VadOptions`; options: speech, max_new_tokens, llm, barge_in.
        Needs ``pip install 'llama-omni-py[voice]'`` (docs/voice.md)."""
        from .voice import HandsFreeSession

        return HandsFreeSession(self, system_prompt, ref_audio, vad, **options)

    def cancel(self) -> None:
        """Stops the running request; its stream ends after the native call in flight."""
        run = self._run
        if run is not None:
            run.cancel()

    def close(self) -> None:
        """Cancels a running request, joins its threads and releases the Token2Wav stage."""
        if self._closed:
            return
        run = self._run
        if run is not None:
            run.cancel()
            run.close()
        self._closed = True
        if self._owns_engine:
            self.engine.close()
        else:
            self.engine.release(self.slot)
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
