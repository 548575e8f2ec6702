"""``OmniEngine``: one loaded module set on one device serving several sessions at once.

    with OmniEngine("MiniCPM-o-4_5-gguf", device="cuda:0", slots=4) as engine:
        a, b = engine.session(), engine.session()     # two OmniSessions, same API as alone
        ...

Every module's weights are loaded once; each of the ``slots`` session slots holds only its own
state (its LLM KV stream, TTS KV cache, Token2Wav caches, samplers). The LLM's decode steps of all
slots that are generating run as one batch, and so do the TTS code steps (docs/slots.md).
``OmniSession(model_dir)`` is an engine of one slot.
"""

from __future__ import annotations

import threading
from typing import Callable

from . import checks
from .config import SessionConfig
from .device.backends import resolve_device
from .errors import ConfigError, InvalidArgumentError, SlotsBusyError
from .modelset.hub import resolve as resolve_model
from .modelset.random_set import demo_config, demo_model_dir
from .orchestration.slot import SharedStages, StageBundle

MAX_SLOTS = 256


class OmniEngine:
    """``slots`` sessions over one module set on one device; ``session()`` takes a free slot.

    ``model_dir``: a module set's directory or LLM file, or a repository id on a hub
    (``openbmb/MiniCPM-o-4_5-gguf``, ``REPO:Q8_0`` for a quantization: docs/model-files.md);
    None uses the demo set (random weights, short replies). ``config`` applies to every slot.
    ``progress(step, steps, what)`` is called before each loading step."""

    def __init__(
        self,
        model_dir=None,
        device: str = "auto",
        slots: int = 1,
        config: SessionConfig | None = None,
        progress: Callable[[int, int, str], None] | None = None,
    ):
        if config is not None and not isinstance(config, SessionConfig):
            raise ConfigError("config", f"must be a SessionConfig, got {type(config).__name__}")
        checks.int_in("slots", slots, 1, MAX_SLOTS)
        steps = len(SharedStages.STEPS)
        step = iter(range(1, steps + 1))
        report = (lambda what: progress(next(step), steps, what)) if progress else (lambda what: None)  # noqa: E731
        self.config = config or (demo_config() if model_dir is None else SessionConfig())
        self.device = resolve_device(device)
        # a repository id (owner/name[:QUANT]) is fetched and validated first (modelset/hub.py)
        self.model_dir = resolve_model(model_dir, self.device) if model_dir is not None else demo_model_dir()
        self.stages = SharedStages(self.model_dir, self.device, self.config, slots, report)
        self._bundles: list[StageBundle] = []
        try:
            self._bundles = [self.stages.bundle(k) for k in range(slots)]
        except BaseException:
            self._close_bundles()
            raise
        self._lock = threading.Lock()
        self._free = list(range(slots))
        self._closed = False

    @property
    def slots(self) -> int:
        return len(self._bundles)

    @property
    def free_slots(self) -> int:
        with self._lock:
            return len(self._free)

    @property
    def busy_slots(self) -> int:
        return self.slots - self.free_slots

    def session(self):
        """An :class:`~llama_omni_py.OmniSession` on a free slot (SlotsBusyError when none is
        free); closing it gives the slot back."""
        from .session import OmniSession

        return OmniSession.on_slot(self, self.claim())

    def claim(self) -> int:
        """Takes a free slot (its number); SlotsBusyError when none is free."""
        with self._lock:
            if self._closed:
                raise InvalidArgumentError("the engine is closed")
            if not self._free:
                raise SlotsBusyError(self.slots)
            return self._free.pop(0)

    def bundle(self, slot: int) -> StageBundle:
        return self._bundles[slot]

    def release(self, slot: int) -> None:
        """Gives a slot back, its state emptied for the next session."""
        self._bundles[slot].reset()
        with self._lock:
            if slot not in self._free:
                self._free.append(slot)
                self._free.sort()

    def memory(self) -> dict:
        """Bytes of the shared weights and of each slot's own state (KV caches, Token2Wav
        streams), as the modules report them."""
        tts, t2w = self.stages.tts, self.stages.token2wav
        return {
            "llm_weights": int(self.stages.llm.model.info.size_bytes),
            "tts_weights": int(tts.weight_bytes),
            "token2wav_weights": int(t2w.weight_bytes),
            "llm_kv_per_slot": int(self.stages.llm.kv_bytes_per_slot),
            "tts_kv_per_slot": int(tts.kv_bytes),
            "token2wav_state_per_slot": int(t2w.stream_bytes),
        }

    @property
    def scheduler_stats(self) -> dict:
        """How the LLM's decode steps were batched: llama_decode calls and the steps they held."""
        s = self.stages.llm.scheduler
        return {"llm_batches": s.batches, "llm_batched_steps": s.batched_rows, "llm_mean_batch": s.mean_batch}

    def _close_bundles(self) -> None:
        for b in self._bundles:
            b.close()

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._close_bundles()

    def __enter__(self) -> OmniEngine:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
