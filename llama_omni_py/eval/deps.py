"""Imports of the optional packages llama-omni eval needs (the ``eval`` extra), each failing
with a :class:`MissingDependencyError` that names the package and the pip command."""

from __future__ import annotations

import importlib
from types import ModuleType

from ..errors import MissingDependencyError

EXTRA = "eval"


def require(module: str, *, package: str | None = None, purpose: str = "Seed-TTS scoring") -> ModuleType:
    """``import module``, or a :class:`MissingDependencyError` naming ``package`` (default: the
    top-level module name) when it is not installed."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        missing = package or (e.name or module).split(".")[0]
        raise MissingDependencyError(missing, extra=EXTRA, purpose=purpose) from e


def torch() -> ModuleType:
    return require("torch", purpose="Seed-TTS ASR and speaker similarity")


def transformers() -> ModuleType:
    return require("transformers", purpose="Seed-TTS ASR and speaker similarity")
