"""Loads the compiled core (``llama_omni_py._core``) with an actionable error if it is missing.

llama-cpp-python 0.3.36 installs its runtime libraries in ``site-packages/llama_cpp/lib``,
except backends its install rule misnames (``ggml-can``): a CANN build's ``libggml-cann.so``
lands only in ``site-packages/lib``. ``libggml.so`` finds its dependencies through its own
``RUNPATH=$ORIGIN`` only, so such a backend is preloaded by path before the core is
imported; the dynamic loader then reuses it by soname. Nothing else is touched.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

from .errors import OmniError


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


try:
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

__all__ = ["core", "PRELOADED"]
