"""llama-omni-py: MiniCPM-o 4.5 omni inference on llama.cpp/ggml from Python.

Public names: :func:`backends` (devices this build can use), :func:`resolve_device`,
:mod:`models` (module sets), :func:`make_models` (random-weight sets) and the typed errors.
"""

from .errors import *  # noqa: F401,F403
from .errors import __all__ as _errors_all

__version__ = "0.1.0"

from .backend import Device, backends, compiled_backends, devices, resolve_device  # noqa: E402
from .modelgen import make_models  # noqa: E402
from .models import ModelSet, discover, validate  # noqa: E402
from .token2wav import Token2Wav, Token2WavConfig  # noqa: E402
from .session import OmniSession, SessionConfig, SpeakResult, SpeechChunk  # noqa: E402

__all__ = [*_errors_all, "__version__", "Device", "ModelSet", "backends", "compiled_backends", "devices",
           "discover", "make_models", "resolve_device", "validate", "Token2Wav", "Token2WavConfig"]
