"""The main API: ``OmniSession.speak()`` / ``stream()`` / ``duplex()``.

A session is one slot of an engine (engine.py; alone, an engine of one slot that it owns). Its
stages are a :class:`~llama_omni_py.orchestration.slot.StageBundle`, and it answers one request at a time: a
simplex reply through the threaded pipeline LLM -> TTS -> Token2Wav (simplex.py,
docs/architecture.md), or a full-duplex conversation (duplex/).
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Callable

from .config import DuplexConfig, LlmSampling, SessionConfig, Token2WavConfig
from .errors import ConfigError, InvalidArgumentError
from .modules.llm.prompt import EncodedAudio
from .orchestration.channels import iterate_in_thread
from .orchestration.inputs import Request
from .orchestration.timings import Profiler
from .orchestration.turn_based import SimplexRun
from .results import SpeakResult, SpeechChunk


class OmniSession:
    """One conversation on a model set on one device; one request at a time.

    Built alone it loads the module set (an engine of one slot, closed with the session); from
    ``OmniEngine.session()`` it is one slot of a shared engine. ``model_dir``: a directory, its LLM
    file, or a repository id (``openbmb/MiniCPM-o-4_5-gguf[:QUANT]``, docs/model-files.md#from-a-hub);
    None uses the demo set (random weights, short replies). ``progress(step, steps, what)`` is called before each
    loading step (the CLI's bar)."""

    def __init__(
        self,
        model_dir=None,
        device: str = "auto",
        config: SessionConfig | None = None,
        progress: Callable[[int, int, str], None] | None = None,
    ):
        from .engine import OmniEngine

        engine = OmniEngine(model_dir, device, 1, config, progress)
        self._attach(engine, engine.claim(), owns_engine=True)

    @classmethod
    def on_slot(cls, engine, slot: int) -> OmniSession:
        """A session on ``slot`` of ``engine`` (what ``OmniEngine.session()`` returns)."""
        self = cls.__new__(cls)
        self._attach(engine, slot, owns_engine=False)
        return self

    def _attach(self, engine, slot: int, owns_engine: bool) -> None:
        self.engine, self.slot, self._owns_engine = engine, slot, owns_engine
        self.config, self.model_dir, self.device = engine.config, engine.model_dir, engine.device
        self.stages = engine.bundle(slot)
        self.profiler = Profiler()
        self._busy = threading.Lock()
        self._run: SimplexRun | None = None
        self._closed = False

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
        with self._request():
            self.stages.replace_token2wav(token2wav)
            self.config = self.stages.config

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
        content=None,
        audio=None,
        image=None,
        video=None,
        video_audio=None,
        voice=None,
        seed: int | None = None,
        max_new_tokens: int | None = None,
        system_prompt: str | None | bool = None,
        history=(),
        speech: bool = True,
        tts_template: bool | None = None,
        max_frames: int | None = None,
        stack_frames: int | None = None,
        omni: bool | None = None,
        prompt_style: str | None = None,
        reply_text: str | None = None,
        prompt=None,
        llm: LlmSampling | None = None,
        max_slice_nums=None,
    ) -> Iterator[SpeechChunk]:
        """Yields SpeechChunks as audio becomes ready; the last has ``is_final`` and ``timings``.

        content: the user message as a list of parts in order -- text, ``omni.Image``,
        ``omni.Audio``, ``omni.Video``, EncodedAudio (llama_omni_py.content); or, as shorthand,
        text and audio/image/video: a path, bytes or array (see media.py), or a list of them,
        laid out as images, videos, audio, text. A video is its frames each followed by the audio
        of its second (``config.video``; video_audio: a separate audio track per video;
        max_frames, stack_frames: this request's). voice: reference audio for the system
        prompt's voice slot (the Token2Wav voice stays the set's prompt_cache voice); seed: -1
        draws one (reported in timings.seed); system_prompt replaces the assistant role text
        (False: no system turn); history: earlier (role, content) turns, role "user" or
        "assistant", content a str, EncodedAudio or list of parts; speech=False gives a
        text-only reply; tts_template (default: speech) ends the prompt with the speech prefix;
        omni: join the parts as the reference's omni mode (None: when a video brings audio);
        prompt_style: this reply's prompt layout ("reference", "llama.cpp-omni", or
        "llama.cpp-omni-eval", its evaluation CLIs'; None: the session's prompt rules);
        reply_text: teacher forcing -- the reply is this text, evaluated (not sampled) so that the
        TTS speaks it from the LLM's hidden states, as llama.cpp-omni's TTS evaluation does;
        prompt: a prompt.Prompt built already (an evaluation's exact layout; no content then); llm:
        this reply's LLM sampling (temperature, top_p, ...) instead of ``config.llm``;
        max_slice_nums: slices per image besides its overview, 0..9 (0 or 1: the overview only),
        or a list with one per image; None: ``config.vision`` (9 under the reference rules)."""
        request = Request.of(
            text,
            audio=audio,
            image=image,
            video=video,
            video_audio=video_audio,
            content=content,
            voice=voice,
            seed=self.config.seed if seed is None else seed,
            max_new_tokens=max_new_tokens,
            system_prompt=system_prompt,
            history=tuple(history),
            speech=speech,
            tts_template=speech if tts_template is None else tts_template,
            llm=llm,
            max_slice_nums=max_slice_nums,
            max_frames=max_frames,
            stack_frames=stack_frames,
            omni=omni,
            prompt_style=prompt_style,
            reply_text=reply_text,
            prompt=prompt,
        )
        return self._stream(request)

    def _stream(self, request: Request) -> Iterator[SpeechChunk]:
        with self._request():
            run = self._run = SimplexRun(self.stages, self.config, request, self.profiler)
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

    def duplex(self, system_prompt: str | None = None, voice=None, config: DuplexConfig | None = None):
        """A full-duplex conversation (:class:`~llama_omni_py.duplex.DuplexSession`); the session
        serves nothing else until it is closed. ``voice``: reference audio for the LLM's voice
        slot; ``system_prompt`` None: "You are a helpful assistant."."""
        from .duplex import DuplexSession

        if config is not None and not isinstance(config, DuplexConfig):
            raise ConfigError("config", f"must be a DuplexConfig, got {type(config).__name__}")
        held = contextlib.ExitStack()
        held.enter_context(self._request())
        try:
            return DuplexSession(self.stages, system_prompt, voice, config or DuplexConfig(), held.close)
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

    def voice(self, system_prompt: str | None = None, voice=None, vad=None, **options):
        """Hands-free turns (:class:`~llama_omni_py.voice.VoiceSession`): ``push()`` microphone
        audio, ``respond()`` to each utterance the voice activity detector finds. ``vad``: a
        :class:`~llama_omni_py.voice.VadOptions`; options: speech, max_new_tokens, llm, barge_in.
        Needs ``pip install 'llama-omni-py[voice]'`` (docs/voice.md)."""
        from .voice import VoiceSession

        return VoiceSession(self, system_prompt, voice, vad, **options)

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
