"""llama-omni-py: MiniCPM-o 4.5 omni inference on llama.cpp/ggml from Python.

The main API is :class:`OmniSession` (``speak()`` / ``stream()`` / ``astream()``), alone or as one
slot of an :class:`OmniEngine`, configured by :class:`EngineConfig` (what the engine loads) and
:class:`ReplyConfig` (how a session replies); it returns :class:`SpeakResult` and
:class:`SpeechChunk`, each with :class:`Timings`; a message's parts in order are :class:`Image`,
:class:`Audio`, :class:`Video` and text (video frames and their audio: :class:`VideoConfig`).
:class:`Token2Wav`, :class:`AudioEncoder` and :class:`ImageEncoder` run one module alone.
:func:`backends` / :func:`resolve_device` name the devices of this build, :func:`discover` /
:func:`validate` check a module set, :func:`make_models` writes one with random weights,
:func:`download` fetches the published one by its repository id. Every foreseeable failure
raises a subclass of :class:`OmniError`.

Importing the package loads nothing but its errors: each name resolves on first use, and the
names backed by the compiled core (``llama_omni_py._core``) load it then. The layers, and what
each may import: docs/architecture.md#layers.
"""

from ._lazy import lazy
from .errors import *  # noqa: F401,F403
from .errors import __all__ as _errors_all

__version__ = "0.1.0"

_NAMES = {
    "llama_omni_py.session": ("OmniSession", "OmniEngine"),
    "llama_omni_py.config": (
        "EngineConfig",
        "ReplyConfig",
        "LlmSampling",
        "TtsSampling",
        "Token2WavConfig",
        "DuplexConfig",
    ),
    "llama_omni_py.vision": ("VisionConfig",),
    "llama_omni_py.video": ("VideoConfig",),
    "llama_omni_py.content": ("Image", "Audio", "Video", "EncodedAudio"),
    "llama_omni_py.duplex": ("DuplexSession", "DuplexResult"),
    "llama_omni_py.results": ("SpeakResult", "SpeechChunk", "Timings"),
    "llama_omni_py.modules.token2wav": ("Token2Wav",),
    "llama_omni_py.modules.apm": ("AudioEncoder",),
    "llama_omni_py.modules.vpm": ("ImageEncoder", "EncodedImage"),
    "llama_omni_py.device.backends": ("Device", "backends", "compiled_backends", "devices", "resolve_device"),
    "llama_omni_py.modelset.layout": ("ModelSet", "discover", "validate"),
    "llama_omni_py.modelset.generate": ("make_models",),
    "llama_omni_py.modelset.hub": ("download",),
}

__getattr__, __dir__ = lazy(__name__, {name: module for module, names in _NAMES.items() for name in names})

__all__ = [*_errors_all, "__version__", *(name for names in _NAMES.values() for name in names)]
