"""llama-omni-py: MiniCPM-o 4.5 omni inference on llama.cpp/ggml from Python.

The main API is :class:`OmniSession` (``speak()`` / ``stream()`` / ``astream()``) configured by
:class:`SessionConfig`; it returns :class:`SpeakResult` and :class:`SpeechChunk`, each with
:class:`Timings`; a message's parts in order are :class:`Image`, :class:`Audio`, :class:`Video`
and text (video frames and their audio: :class:`VideoConfig`). :class:`Token2Wav`,
:class:`AudioEncoder` and :class:`ImageEncoder` run one module alone. :func:`backends` /
:func:`resolve_device` name the devices of this build, :func:`discover` / :func:`validate` check
a module set, :func:`make_models` writes one with random weights, :func:`download` fetches the
published one by its repository id. Every foreseeable failure raises a subclass of
:class:`OmniError`.
"""

from .errors import *  # noqa: F401,F403
from .errors import __all__ as _errors_all

__version__ = "0.1.0"

from .config import DuplexConfig, LlmSampling, SessionConfig, Token2WavConfig, TtsSampling  # noqa: E402
from .content import Audio, Image, Video  # noqa: E402
from .device.backends import Device, backends, compiled_backends, devices, resolve_device  # noqa: E402
from .duplex import DuplexResult, DuplexSession  # noqa: E402
from .engine import OmniEngine  # noqa: E402
from .modelset.generate import make_models  # noqa: E402
from .modelset.hub import download  # noqa: E402
from .modelset.layout import ModelSet, discover, validate  # noqa: E402
from .modules.apm import AudioEncoder  # noqa: E402
from .modules.token2wav import Token2Wav  # noqa: E402
from .modules.vpm import EncodedImage, ImageEncoder  # noqa: E402
from .results import SpeakResult, SpeechChunk, Timings  # noqa: E402
from .session import OmniSession  # noqa: E402
from .video import VideoConfig  # noqa: E402
from .vision import VisionConfig  # noqa: E402

__all__ = [
    *_errors_all,
    "__version__",
    "OmniSession",
    "OmniEngine",
    "SessionConfig",
    "LlmSampling",
    "TtsSampling",
    "Token2WavConfig",
    "DuplexConfig",
    "VisionConfig",
    "VideoConfig",
    "Image",
    "Audio",
    "Video",
    "DuplexSession",
    "DuplexResult",
    "SpeakResult",
    "SpeechChunk",
    "Timings",
    "Token2Wav",
    "AudioEncoder",
    "ImageEncoder",
    "EncodedImage",
    "Device",
    "backends",
    "compiled_backends",
    "devices",
    "resolve_device",
    "ModelSet",
    "discover",
    "validate",
    "make_models",
    "download",
]
