"""Audio on the wire, one way for every protocol of the workers and the gateway: raw float32
little-endian mono PCM in base64 (no WAV, no integer PCM), checked when it comes from a client.
docs/server-protocol.md."""

from __future__ import annotations

import base64

import numpy as np

from .. import checks
from ..constants import INPUT_SAMPLE_RATE
from ..errors import ProtocolError

MAX_REF_AUDIO_SECONDS = 30.0  # reference audio (the audio encoder holds 30 s)


def b64_bytes(value, what: str, code: str) -> bytes:
    """Strict base64 of a client's field; ProtocolError with ``code`` otherwise."""
    try:
        return checks.base64_bytes(value, what)
    except ValueError as e:
        raise ProtocolError(str(e), code) from None


def float_pcm(
    value, what: str, code: str, max_seconds: float | None = None, rate: int = INPUT_SAMPLE_RATE
) -> np.ndarray:
    """Base64 raw float32 little-endian mono PCM -> samples (no WAV, no integer PCM)."""
    if max_seconds is not None and isinstance(value, str):
        # refused by its length alone, before megabytes are decoded and checked
        samples = (len(value) * 3 // 4 - value[-2:].count("=")) // 4
        if samples > max_seconds * rate:
            raise ProtocolError(f"{what} is {samples / rate:.1f} s; the limit is {max_seconds:g} s", "audio_too_long")
    data = b64_bytes(value, what, code)
    if data[:4] in (b"RIFF", b"fLaC", b"OggS"):
        raise ProtocolError(f"{what} must be raw float32 PCM, not a container file", code)
    if len(data) % 4:
        raise ProtocolError(f"{what} is {len(data)} bytes, not a whole number of float32 samples", code)
    x = np.frombuffer(data, "<f4").astype(np.float32)
    if not np.isfinite(x).all():
        raise ProtocolError(f"{what} has NaN or infinite samples (not float32 PCM?)", code)
    if np.abs(x).max() > 64:
        raise ProtocolError(f"{what} has samples far outside [-1, 1] (integer PCM or wrong encoding?)", code)
    if max_seconds is not None and x.size > max_seconds * rate:
        raise ProtocolError(f"{what} is {x.size / rate:.1f} s; the limit is {max_seconds:g} s", "audio_too_long")
    return x


def pcm_b64(samples: np.ndarray) -> str:
    """Samples -> base64 raw float32 little-endian PCM: the one encoder of audio on the wire."""
    return base64.b64encode(np.asarray(samples, "<f4").tobytes()).decode("ascii")


def pcm_from_b64(b64: str) -> np.ndarray:
    """The inverse of :func:`pcm_b64`, for audio from our own workers (client audio goes through
    :func:`float_pcm`, which checks it)."""
    return np.frombuffer(base64.b64decode(b64), "<f4")
