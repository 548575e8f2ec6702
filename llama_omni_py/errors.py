"""Typed exceptions of llama-omni-py.

Every failure the library can foresee raises one of these, so callers (and the server)
can tell bad input from a bug and keep running.
"""

from __future__ import annotations

__all__ = [
    "OmniError",
    "ConfigError",
    "InvalidArgumentError",
    "ModelFileError",
    "HubError",
    "DeviceError",
    "BackendUnavailableError",
    "MediaError",
    "SlotsBusyError",
    "PipelineError",
    "ProtocolError",
    "MissingDependencyError",
    "EmptyTranscriptError",
]


class OmniError(Exception):
    """Base class of every error raised by llama-omni-py."""


class ConfigError(OmniError, ValueError):
    """A configuration value is invalid; ``field`` names it."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field


class InvalidArgumentError(OmniError, ValueError):
    """An argument has the wrong size, type or range."""


class ModelFileError(OmniError):
    """A model file is missing, truncated, corrupt or not what the module expects."""

    def __init__(self, problem: str, path: str | None = None):
        super().__init__(f"{path}: {problem}" if path else problem)
        self.path = path
        self.problem = problem


class HubError(OmniError):
    """A model cannot be had from its hub: an unknown repository or revision, a quantization the
    repository does not publish, a layout that differs from the published one, or no network and
    nothing cached; ``repo`` names the repository."""

    def __init__(self, repo: str, message: str):
        super().__init__(f"{repo}: {message}")
        self.repo = repo


class DeviceError(OmniError):
    """A device string is malformed or the device cannot be used."""


class BackendUnavailableError(DeviceError):
    """The requested backend (cuda, cann, ...) is not compiled into this build.

    ``recipe`` holds the command that builds it.
    """

    def __init__(self, message: str, backend: str, recipe: str):
        super().__init__(f"{message}\nTo build with {backend}:\n{recipe}")
        self.backend = backend
        self.recipe = recipe


class SlotsBusyError(OmniError):
    """Every session slot of an engine is in use (``OmniEngine.session()``); ``slots`` is how many
    it has."""

    def __init__(self, slots: int):
        super().__init__(f"all {slots} session slots of the engine are in use: close a session first")
        self.slots = slots


class MediaError(OmniError):
    """Media extraction (ffmpeg, soundfile) failed."""

    def __init__(
        self, message: str, *, returncode: int | None = None, command: list[str] | None = None, stderr: str = ""
    ):
        detail = message
        if returncode is not None:
            detail += f" (exit code {returncode})"
        if stderr:
            detail += f"\nffmpeg said: {stderr}"
        super().__init__(detail)
        self.returncode = returncode
        self.command = command
        self.stderr = stderr


class PipelineError(OmniError):
    """A pipeline stage failed; ``stage`` names it and ``__cause__`` is the original error."""

    def __init__(self, stage: str, message: str):
        super().__init__(f"{stage} stage failed: {message}")
        self.stage = stage


class ProtocolError(OmniError):
    """A client message does not follow the server protocol."""

    def __init__(self, message: str, code: str = "invalid_request"):
        super().__init__(message)
        self.code = code


class MissingDependencyError(OmniError, ImportError):
    """An optional Python package that a feature needs is not installed; ``package`` names it and
    ``extra`` the pip extra of llama-omni-py that brings it."""

    def __init__(self, package: str, *, extra: str, purpose: str):
        super().__init__(
            f"{purpose} needs the Python package '{package}', which is not installed: "
            f"pip install 'llama-omni-py[{extra}]'"
        )
        self.package = package
        self.extra = extra


class EmptyTranscriptError(InvalidArgumentError):
    """A reference transcript has no words left after normalisation, so its word error rate is
    undefined; ``text`` is the transcript as given."""

    def __init__(self, text: str, key: str = ""):
        where = f" ({key})" if key else ""
        super().__init__(f"reference transcript{where} is empty after normalisation: {text!r}")
        self.text = text
        self.key = key
