"""The one engine of a server process: an OmniSession loaded (and warmed up) in a worker thread,
its readiness for /health, admission of one protocol session at a time, and turns run off the
event loop. Everything here is touched from the event loop only, except inside the worker
threads; health reads plain attributes and never waits on the engine."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import replace

from ..demo import demo_config
from ..errors import MediaError, OmniError
from ..results import SpeechChunk
from ..session import OmniSession
from .config import ServerConfig
from .protocol import Turn

log = logging.getLogger(__name__)

WARMUP_TEXT = "Hello."


class Engine:
    def __init__(self, config: ServerConfig, factory=OmniSession):
        self.config = config
        self._factory = factory
        self.state = "loading"  # loading -> ready | failed
        self.error: str | None = None
        self.session: OmniSession | None = None
        self.active: str | None = None  # the protocol session holding the engine
        self.busy = False  # a turn is running
        self.load_s = self.warmup_s = None
        self.voice_ready = False  # the voice activity detector loads: half-duplex and Realtime served
        self.turns = 0

    # -- loading ---------------------------------------------------------------------------
    async def load(self) -> None:
        try:
            await asyncio.to_thread(self._load)
            self.state = "ready"
            log.warning(
                "engine ready on %s (load %.1f s, warm-up %.1f s)",
                self.session.device,
                self.load_s,
                self.warmup_s or 0.0,
            )
        except Exception as e:  # noqa: BLE001 -- reported by /health and to every session.init
            self.error = f"{type(e).__name__}: {e}"
            self.state = "failed"
            log.error("engine failed to load: %s", self.error)

    def _load(self) -> None:
        c = self.config
        t0 = time.perf_counter()
        cfg = c.session
        if cfg is None and c.model_dir is None:  # the demo set: short replies
            cfg = demo_config()
        self.session = self._factory(c.model_dir, c.device, cfg)
        self.load_s = time.perf_counter() - t0
        self.voice_ready = self._load_vad()
        if c.warmup:  # the first turn pays one-time costs; ready means a turn has run
            t0 = time.perf_counter()
            self.session.speak(WARMUP_TEXT, max_new_tokens=10)
            self.warmup_s = time.perf_counter() - t0

    @staticmethod
    def _load_vad() -> bool:
        from ..voice import SileroVad

        try:
            SileroVad()
        except OmniError as e:  # the voice extra is not installed: no hands-free sessions here
            log.warning("half-duplex off: %s", str(e).splitlines()[0])
            return False
        return True

    def health(self) -> tuple[int, dict]:
        if self.state == "ready":
            return 200, {
                "status": "ready",
                "busy": self.busy,
                "session_active": self.active is not None,
                "device": self.session.device,
                "load_s": round(self.load_s, 3),
                "warmup_s": None if self.warmup_s is None else round(self.warmup_s, 3),
                "turns": self.turns,
                "capabilities": ["turn_based", "full_duplex", *(["half_duplex"] if self.voice_ready else [])],
            }
        if self.state == "failed":
            return 503, {"status": "error", "error": self.error}
        return 503, {"status": "loading"}

    # -- admission -------------------------------------------------------------------------
    def claim(self, session_id: str) -> tuple[str, str] | None:
        """None when `session_id` now holds the engine, else (reason, message)."""
        if self.state == "loading":
            return "engine_loading", "the models are still loading; poll /health until it answers 200"
        if self.state == "failed":
            return "omni_init_failed", f"the engine failed to load: {self.error}"
        if self.active is not None:
            return "session_busy", "another session is active; this backend serves one session at a time"
        self.active = session_id
        return None

    def release(self, session_id: str) -> None:
        if self.active == session_id:
            self.active = None

    # -- turns -----------------------------------------------------------------------------
    @staticmethod
    def _video_audio(turn: Turn) -> list:
        """Each video's audio track (16 kHz); a video without one adds nothing."""
        from ..media import load_audio

        out = []
        for v in turn.videos:
            try:
                out.append(load_audio(v))
            except MediaError:
                pass
        return out

    async def run(self, turn: Turn) -> AsyncIterator[SpeechChunk]:
        """The turn's chunks; cancelling the consumer stops generation within a chunk."""
        self.busy = True
        try:
            audio = turn.audio + (await asyncio.to_thread(self._video_audio, turn) if turn.videos else [])
            async for chunk in self.session.astream(
                turn.text,
                audio=audio or None,
                image=turn.images or None,
                video=turn.videos or None,
                voice=turn.voice,
                max_new_tokens=turn.max_new_tokens,
                system_prompt=turn.system_prompt,
                history=turn.history,
                speech=turn.speech,
                tts_template=turn.tts_template,
                stack_frames=turn.stack_frames,
                seed=turn.seed,
                max_slice_nums=turn.max_slice_nums,
                llm=replace(self.session.config.llm, **turn.sampling) if turn.sampling else None,
            ):
                yield chunk
            self.turns += 1
        finally:
            self.busy = False

    async def open_duplex(self, start):
        """A full-duplex session (``duplex_protocol.DuplexStart``) on the engine, forbidding the
        server's duplex tokens; the caller holds the engine (claim) and closes the session."""
        cfg = start.config
        if self.config.duplex_forbidden_token_ids and not cfg.forbidden_token_ids:
            cfg = replace(cfg, forbidden_token_ids=self.config.duplex_forbidden_token_ids)
        return await asyncio.to_thread(self.session.duplex, start.system_prompt, start.voice, cfg)

    async def close(self) -> None:
        if self.session is not None:
            await asyncio.to_thread(self.session.close)
