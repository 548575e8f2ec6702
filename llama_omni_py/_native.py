"""Loads the compiled core (``llama_omni_py._core``) with an actionable error if it is missing."""

from __future__ import annotations

from .errors import OmniError

try:
    from . import _core as core  # noqa: F401
except ImportError as exc:  # pragma: no cover - only on a broken install
    raise OmniError(
        "the native core llama_omni_py._core could not be loaded "
        f"({exc}). Reinstall with `pip install .` from the source tree; the core needs the "
        "llama.cpp libraries of llama-cpp-python==0.3.36 (or the tree named by OMNI_LLAMA_CPP_DIR)."
    ) from exc

__all__ = ["core"]
