"""Token2Wav: MiniCPM-o speech tokens -> streamed 24 kHz audio.

    from llama_omni_py import Token2Wav
    with Token2Wav("MiniCPM-o-4_5-gguf", device="cpu", threads=2) as t2w:
        for chunk in token_chunks:
            audio = t2w.push(chunk)           # float32, 24 kHz; 24000 samples per 25 tokens
        audio = t2w.push([], final=True)      # flush

Token2Mel (conformer + DiT flow matching) runs on ``device``; the HiFT vocoder always runs on
the CPU with its own pool of ``threads`` workers, optionally pinned to ``cpus``.

``cache_policy`` chooses how the streaming caches evolve between windows and how the final
window is run: ``"llama.cpp-omni"`` (default; reproduces llama.cpp-omni's audio) or
``"reference"`` (the PyTorch stepaudio2 streaming path). See docs/token2wav-streaming.md.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from . import modelspec as ms
from ._native import core
from .backend import resolve_device
from .errors import ConfigError
from .models import discover, validate

DEFAULT_THREADS = 16
SAMPLE_RATE = 24000
CACHE_POLICIES = ("llama.cpp-omni", "reference")


def _allowed_cpus() -> list[int]:
    return sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))


@dataclass(frozen=True)
class Token2WavConfig:
    """Validated Token2Wav settings; every error names the field."""

    device: str = "cpu"
    steps: int = 5
    threads: int | None = None            # None: OMNI_T2W_THREADS, else 16, capped to the usable CPUs
    cpus: Sequence[int] | None = None     # pin the vocoder workers (one CPU per thread)
    temperature: float = 1.0
    seed: int = 42
    cache_policy: str = "llama.cpp-omni"  # or "reference"; see docs/token2wav-streaming.md
    resolved_threads: int = field(init=False, default=0)

    def __post_init__(self):
        if not isinstance(self.steps, int) or not 1 <= self.steps <= 100:
            raise ConfigError("steps", f"must be an integer in 1..100, got {self.steps!r}")
        if not isinstance(self.temperature, (int, float)) or not (0.0 <= float(self.temperature) <= 10.0):
            raise ConfigError("temperature", f"must be a number in 0..10, got {self.temperature!r}")
        if not isinstance(self.seed, int) or not 0 <= self.seed < 2**32:
            raise ConfigError("seed", f"must be an integer in 0..2**32-1, got {self.seed!r}")
        if self.cache_policy not in CACHE_POLICIES:
            raise ConfigError("cache_policy", f"must be one of {', '.join(map(repr, CACHE_POLICIES))}, "
                                              f"got {self.cache_policy!r}")
        allowed = _allowed_cpus()
        threads = self.threads
        if threads is None:
            env = os.environ.get("OMNI_T2W_THREADS")
            if env is not None:
                try:
                    threads = int(env)
                except ValueError:
                    raise ConfigError("OMNI_T2W_THREADS", f"must be an integer, got {env!r}") from None
            else:
                threads = min(DEFAULT_THREADS, len(allowed))
        if not isinstance(threads, int) or threads < 1:
            raise ConfigError("threads", f"must be a positive integer, got {threads!r}")
        if self.cpus is not None:
            cpus = list(self.cpus)
            bad = [c for c in cpus if c not in allowed]
            if bad:
                raise ConfigError("cpus", f"CPUs {bad} are outside this process's affinity mask "
                                          f"({len(allowed)} usable); pinning cannot be honoured")
            if len(set(cpus)) != len(cpus):
                raise ConfigError("cpus", "lists a CPU twice")
            if self.threads is not None and len(cpus) != threads:
                raise ConfigError("cpus", f"has {len(cpus)} CPUs for threads={threads}; give one CPU per thread")
            threads = len(cpus)
        elif threads > len(allowed):
            threads = len(allowed)  # more workers than CPUs only adds contention
        object.__setattr__(self, "resolved_threads", threads)


class Token2Wav:
    """Streaming Token2Wav over a module set (or its token2wav-gguf directory)."""

    def __init__(self, model_dir: str | Path, device: str = "cpu", steps: int = 5, threads: int | None = None,
                 cpus: Sequence[int] | None = None, temperature: float = 1.0, seed: int = 42,
                 cache_policy: str = "llama.cpp-omni"):
        self.config = Token2WavConfig(device, steps, threads, cpus, temperature, seed, cache_policy)
        path = Path(model_dir)
        t2w_dir = path if (path / "encoder.gguf").exists() else path / ms.T2W_DIR
        device_id = resolve_device(device)
        if (path / ms.T2W_DIR).exists():
            validate(discover(path), ["token2wav"], device_id)
        self.device = device_id
        self._native = core.Token2Wav(str(t2w_dir), device_id, steps, self.config.resolved_threads,
                                      list(cpus or []), float(temperature), seed, cache_policy)

    def push(self, tokens, final: bool = False) -> np.ndarray:
        """Appends speech tokens (ints in 0..6560); returns the float32 24 kHz audio now ready."""
        arr = np.asarray(tokens)
        if arr.size and not np.issubdtype(arr.dtype, np.integer):
            raise ConfigError("tokens", f"must be integers, got {arr.dtype}")
        return self._native.push(arr.astype(np.int32, copy=False).reshape(-1), final)

    def reset(self) -> None:
        self._native.reset()

    @property
    def timings(self) -> dict:
        """Milliseconds of the last push: token2mel_ms, vocoder_ms, windows, samples."""
        return self._native.last_timings

    @property
    def total_timings(self) -> dict:
        return self._native.total_timings

    @property
    def cache_policy(self) -> str:
        return self._native.cache_policy

    @property
    def threads(self) -> int:
        return self._native.threads

    def close(self) -> None:
        self._native = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
