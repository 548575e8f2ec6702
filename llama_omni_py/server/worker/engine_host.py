"""The one engine of a server process: an OmniEngine of ``WorkerConfig.slots`` session slots,
loaded (and warmed up once) in a worker thread, its readiness for /health, admission of one
protocol session per slot, and turns run off the event loop. Everything here is touched from the
event loop only, except inside the worker threads; health reads plain attributes and never waits
on the engine."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import replace

from ...errors import OmniError, ProtocolError, SlotsBusyError
from ...modelset.layout import random_weights
from ...results import SpeechChunk
from ...session import OmniEngine, OmniSession
from .backend.protocol import Turn
from .config import WorkerConfig
from .memory import give_back

log = logging.getLogger(__name__)

WARMUP_TEXT = "Hello."


def busy_text(slots: int) -> str:
    if slots == 1:
        return "another session is active; this backend serves one session at a time (1 slot)"
    return f"all {slots} session slots are in use; this backend serves {slots} sessions at a time"


class EngineHost:
    """``factory(model_dir, device, slots=, config=, reply=)`` builds the OmniEngine (tests slow it down
    or break it)."""

    def __init__(self, config: WorkerConfig, factory=OmniEngine):
        self.config = config
        self._factory = factory
        self.state = "loading"  # loading -> ready | failed
        self.error: str | None = None
        self.engine: OmniEngine | None = None
        self.held: dict[str, OmniSession] = {}  # protocol session id -> its slot's session
        self._emptying: set[asyncio.Future] = set()  # slots whose session ended, being emptied for the next
        self.running = 0  # turns running, over all slots
        self.load_s = self.warmup_s = None
        self.voice_ready = False  # the voice activity detector loads: half-duplex and Realtime served
        self.random_weights = False  # a generated set (the demo's): replies are gibberish
        self.turns = 0

    @property
    def slots(self) -> int:
        return self.config.slots

    @property
    def slots_busy(self) -> int:
        return len(self.held) + len(self._emptying)

    @property
    def busy(self) -> bool:
        """A turn is running on some slot."""
        return self.running > 0

    @contextlib.contextmanager
    def turn_running(self):
        """Counts a turn as running (/health's ``busy``) and done."""
        self.running += 1
        try:
            yield
        finally:
            self.running -= 1

    # -- loading ---------------------------------------------------------------------------
    async def load(self) -> None:
        try:
            await asyncio.to_thread(self._load)
            self.state = "ready"
            log.warning(
                "engine ready on %s, %d slot(s) (load %.1f s, warm-up %.1f s)",
                self.engine.device,
                self.slots,
                self.load_s,
                self.warmup_s or 0.0,
            )
        except Exception as e:  # noqa: BLE001 -- reported by /health and to every session.init
            self.error = f"{type(e).__name__}: {e}"
            self.state = "failed"
            log.error("engine failed to load: %s", self.error)

    def _load(self) -> None:
        worker = self.config
        t0 = time.perf_counter()
        # reply None: the set's defaults (short replies on the random set)
        self.engine = self._factory(
            worker.model_dir, worker.device, slots=worker.slots, config=worker.engine, reply=worker.reply
        )
        self.load_s = time.perf_counter() - t0
        self.voice_ready = self._load_vad()
        self.random_weights = random_weights(getattr(self.engine, "model_dir", None))
        if worker.warmup:  # the first turn pays one-time costs (shared by every slot); ready means a turn has run
            t0 = time.perf_counter()
            with self.engine.session() as s:
                s.speak(WARMUP_TEXT, max_new_tokens=10)
            self.warmup_s = time.perf_counter() - t0

    @staticmethod
    def _load_vad() -> bool:
        from ...voice import SileroVad

        try:
            SileroVad()
        except OmniError as e:  # the voice extra is not installed: no hands-free sessions here
            log.warning("half-duplex off: %s", str(e).splitlines()[0])
            return False
        return True

    def health(self) -> tuple[int, dict]:
        if self.state == "ready":
            busy = self.slots_busy
            return 200, {
                "status": "ready",
                "busy": self.busy,
                "session_active": busy > 0,
                "slots": self.slots,
                "slots_busy": busy,
                "slots_free": self.slots - busy,
                "device": self.engine.device,
                "load_s": round(self.load_s, 3),
                "warmup_s": None if self.warmup_s is None else round(self.warmup_s, 3),
                "turns": self.turns,
                "random_weights": self.random_weights,
                "capabilities": ["turn_based", "full_duplex", *(["half_duplex"] if self.voice_ready else [])],
            }
        if self.state == "failed":
            return 503, {"status": "error", "error": self.error}
        return 503, {"status": "loading"}

    # -- admission -------------------------------------------------------------------------
    async def claim(self, session_id: str) -> OmniSession:
        """A slot of its own for ``session_id``: its OmniSession. ProtocolError (the refusal's
        reason as ``code``) while loading, after a failed load, or when every slot is in use. A
        slot whose session has ended is free once emptied (milliseconds): that is waited for."""
        if self.state == "loading":
            raise ProtocolError("the models are still loading; poll /health until it answers 200", "engine_loading")
        if self.state == "failed":
            raise ProtocolError(f"the engine failed to load: {self.error}", "omni_init_failed")
        if session_id in self.held:
            raise ProtocolError(f"session {session_id} is already active on this backend", "session_busy")
        while self.slots_busy >= self.slots and self._emptying:
            await asyncio.wait(set(self._emptying))
        if self.slots_busy >= self.slots:
            raise ProtocolError(busy_text(self.slots), "session_busy")
        try:
            session = self.engine.session()
        except SlotsBusyError:  # not expected: held + emptying counts every taken slot
            raise ProtocolError(busy_text(self.slots), "session_busy") from None
        self.held[session_id] = session
        return session

    async def release(self, session_id: str) -> None:
        """Gives the session's slot back (idempotent); returns once the slot is empty and free.
        The caller has stopped what ran on it."""
        session = self.held.pop(session_id, None)
        if session is None:
            return
        emptying = asyncio.ensure_future(asyncio.to_thread(session.close))
        self._emptying.add(emptying)
        emptying.add_done_callback(self._emptying.discard)  # before any waiter in claim() wakes
        await asyncio.shield(emptying)
        asyncio.get_running_loop().run_in_executor(None, give_back)  # the session's memory, to the system

    # -- turns -----------------------------------------------------------------------------
    async def run(self, session: OmniSession, turn: Turn) -> AsyncIterator[SpeechChunk]:
        """The turn's chunks on the connection's ``session``; cancelling the consumer stops
        generation within a chunk."""
        with self.turn_running():
            async for chunk in session.astream(
                content=turn.content,
                ref_audio=turn.ref_audio,
                max_new_tokens=turn.max_new_tokens,
                system_prompt=turn.system_prompt,
                history=turn.history,
                speech=turn.speech,
                tts_template=turn.tts_template,
                seed=turn.seed,
                max_slice_nums=turn.max_slice_nums,
                llm=replace(session.reply.llm, **turn.sampling) if turn.sampling else None,
            ):
                yield chunk
            self.turns += 1

    async def open_duplex(self, session, start):
        """A full-duplex session (``duplex_protocol.DuplexStart``) on the connection's ``session``,
        forbidding the server's duplex tokens; the caller closes it before releasing the slot."""
        cfg = start.config
        if self.config.duplex_forbidden_token_ids and not cfg.forbidden_token_ids:
            cfg = replace(cfg, forbidden_token_ids=self.config.duplex_forbidden_token_ids)
        return await asyncio.to_thread(session.duplex, start.system_prompt, start.ref_audio, cfg)

    async def close(self) -> None:
        for sid in list(self.held):
            await self.release(sid)
        if self.engine is not None:
            await asyncio.to_thread(self.engine.close)
