"""Loads the compiled core (``llama_omni_py._core``) with an actionable error if it is missing.

llama-cpp-python 0.3.36 installs its runtime libraries in ``site-packages/llama_cpp/lib``,
except backends its install rule misnames (``ggml-can``): a CANN build's ``libggml-cann.so``
lands only in ``site-packages/lib``. ``libggml.so`` finds its dependencies through its own
``RUNPATH=$ORIGIN`` only, so such a backend is preloaded by path before the core is
imported; the dynamic loader then reuses it by soname.

ggml's CPU backend in that build runs its graphs on OpenMP (libgomp), whose threads spin-wait at
every barrier between two ops for up to a few milliseconds before they sleep. When other work
shares the cores -- the normal case: the LLM, the TTS and Token2Wav run at once -- a spinning
thread holds a core the thread it waits for needs, and a graph of a thousand ops slows down by
one to two orders of magnitude (measured: a Token2Mel window 4351 ms instead of 41 ms with one
busy competitor). So threads sleep at once (``OMP_WAIT_POLICY=PASSIVE``) unless the user set
``OMP_WAIT_POLICY`` or ``GOMP_SPINCOUNT`` themselves; libgomp reads them when it loads, which is
when the core is imported below.

``OMNI_CPU_ISA`` forces the CPU kernel set of the native engines (docs/cpu-kernels.md); a set this
CPU cannot run, or an unknown name, is a ConfigError naming the variable.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

from .env import ENV_CPU_ISA, any_set, cpu_isa_override, set_unset
from .errors import ConfigError, OmniError


def _preload_misplaced_backends() -> list[str]:
    site = Path(__file__).resolve().parent.parent
    runtime, extra = site / "llama_cpp" / "lib", site / "lib"
    if not runtime.is_dir() or not extra.is_dir():
        return []
    loaded = []
    for lib in sorted(extra.glob("libggml-*.so")):
        if lib.name in ("libggml-base.so", "libggml-cpu.so") or (runtime / lib.name).exists():
            continue
        ctypes.CDLL(str(lib), mode=getattr(os, "RTLD_GLOBAL", 0))
        loaded.append(str(lib))
    return loaded


OPENMP_WAIT_DEFAULTS = {"OMP_WAIT_POLICY": "PASSIVE"}


def _apply_openmp_wait_policy(environ=None) -> dict[str, str]:
    """Sets the passive wait policy unless the user chose one; returns what was applied."""
    if any_set(("OMP_WAIT_POLICY", "GOMP_SPINCOUNT"), environ):
        return {}
    return set_unset(OPENMP_WAIT_DEFAULTS, environ)


try:
    OPENMP_APPLIED = _apply_openmp_wait_policy()
    PRELOADED = _preload_misplaced_backends()
    from . import _core as core  # noqa: F401
except OSError as exc:  # pragma: no cover - only on a broken install
    raise OmniError(f"a llama.cpp backend library failed to load: {exc}") from exc
except ImportError as exc:  # pragma: no cover - only on a broken install
    _pkg = Path(__file__).resolve().parent
    if (_pkg.parent / "CMakeLists.txt").exists() and not list(_pkg.glob("_core*")):
        raise OmniError(
            f"imported the uncompiled source tree at {_pkg} instead of the installed package: run from "
            "another directory (and use `pytest`, not `python -m pytest`, in the repository root)"
        ) from exc
    raise OmniError(
        "the native core llama_omni_py._core could not be loaded "
        f"({exc}). Reinstall with `pip install .` from the source tree; the core needs the "
        "llama.cpp libraries of llama-cpp-python==0.3.36 (or the tree named by OMNI_LLAMA_CPP_DIR)."
    ) from exc


def apply_cpu_isa(environ=None) -> str:
    """Selects the kernel set OMNI_CPU_ISA names, or the best this CPU runs when it names none;
    returns the set in use."""
    try:
        core.internal.force_cpu_isa(cpu_isa_override(environ) or "auto")
    except Exception as exc:  # DeviceError (this CPU or build) or InvalidArgumentError (name)
        raise ConfigError(ENV_CPU_ISA, f"{exc}; this CPU runs {', '.join(core.internal.cpu_isas())}") from None
    return core.internal.cpu_isa()


def cpu_kernels() -> dict:
    """The CPU kernel set in use, the ones this CPU runs, BF16 support and the BLAS (for `llama-omni
    info` and benchmark manifests)."""
    i = core.internal
    return {"active": i.cpu_isa(), "available": list(i.cpu_isas()), "bf16": i.cpu_bf16(), "blas": i.blas_description()}


CPU_ISA = apply_cpu_isa()

__all__ = ["core", "CPU_ISA", "OPENMP_APPLIED", "PRELOADED", "apply_cpu_isa", "cpu_kernels"]
