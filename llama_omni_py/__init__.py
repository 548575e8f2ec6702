"""llama-omni-py: MiniCPM-o 4.5 omni inference on llama.cpp/ggml from Python."""

from .errors import *  # noqa: F401,F403
from .errors import __all__ as _errors_all

__version__ = "0.1.0"
__all__ = [*_errors_all, "__version__"]
