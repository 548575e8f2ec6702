"""Imports stepaudio2 submodules without the package's heavy __init__ (torchaudio, onnxruntime...)."""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import os
import sys
import types

os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")  # dynamo re-traces every new shape on CPU


def _bare_package(name: str) -> None:
    if name in sys.modules:
        return
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(f"{name} is not installed: pip install --no-deps minicpmo-utils==1.0.7")
    mod = types.ModuleType(name)
    mod.__path__ = list(spec.submodule_search_locations)
    mod.__spec__ = importlib.machinery.ModuleSpec(name, None, is_package=True)
    mod.__spec__.submodule_search_locations = mod.__path__
    sys.modules[name] = mod


def _stub(name: str) -> None:
    if name in sys.modules or importlib.util.find_spec(name) is not None:
        return
    mod = types.ModuleType(name)
    mod.__spec__ = importlib.machinery.ModuleSpec(name, None)  # torch._dynamo calls find_spec on it
    sys.modules[name] = mod


def load(module: str):
    """stepaudio2 submodule by dotted name, e.g. 'stepaudio2.flashcosyvoice.modules.hifigan'."""
    _bare_package("stepaudio2")
    _stub("onnxruntime")
    return importlib.import_module(module)
