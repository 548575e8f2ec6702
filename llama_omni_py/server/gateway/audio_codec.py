"""Audio and image conversions of the OpenAI API: reply audio (float32 24 kHz) to wav, pcm16,
flac or mp3 (mp3 where the installed libsndfile writes it); request audio (wav/mp3 bytes) to the
backend's float32 16 kHz PCM; request images to JPEG, the only image encoding the backend takes."""

from __future__ import annotations

import io

import numpy as np

from ...errors import MediaError
from ...media import IMAGE_FORMATS, run_ffmpeg, sniff_demuxer

RATE = 24000
_SUBTYPES = {"wav": ("WAV", "PCM_16"), "flac": ("FLAC", "PCM_16"), "mp3": ("MP3", "MPEG_LAYER_III")}


def output_formats() -> tuple[str, ...]:
    import soundfile as sf

    have = sf.available_formats()
    return ("pcm16", *(f for f, (container, _) in _SUBTYPES.items() if container in have))


def pcm16(samples: np.ndarray) -> bytes:
    """Raw signed 16-bit little-endian mono (OpenAI's pcm16)."""
    return (np.clip(np.asarray(samples, np.float32), -1.0, 1.0) * 32767).round().astype("<i2").tobytes()


def encode(samples: np.ndarray, fmt: str) -> bytes:
    if fmt == "pcm16":
        return pcm16(samples)
    import soundfile as sf

    container, subtype = _SUBTYPES[fmt]
    buf = io.BytesIO()
    sf.write(buf, np.clip(np.asarray(samples, np.float32), -1.0, 1.0), RATE, format=container, subtype=subtype)
    return buf.getvalue()


def to_jpeg(data: bytes) -> bytes:
    """JPEG bytes unchanged; another image format ffmpeg reads (PNG, WebP, GIF, BMP) re-encoded.
    The format is told to ffmpeg, never guessed (media.sniff_demuxer), and only stdin is read."""
    demuxer = sniff_demuxer(bytes(data[:200]))
    if demuxer == "jpeg_pipe":
        return data
    if demuxer not in ("png_pipe", "webp_pipe", "gif", "bmp_pipe"):
        raise MediaError(f"not an image this server reads ({IMAGE_FORMATS})")
    args = ["-nostdin", "-hide_banner", "-loglevel", "error", "-protocol_whitelist", "pipe", "-f", demuxer]
    args += ["-i", "pipe:0", "-frames:v", "1"]
    return run_ffmpeg([*args, "-f", "image2pipe", "-c:v", "mjpeg", "-q:v", "2", "pipe:1"], data)
