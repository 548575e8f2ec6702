"""Test videos made with ffmpeg's test sources: a moving test pattern, optionally with a tone or
with given 16 kHz speech as its audio track (AAC in MP4, H.264 video)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import soundfile as sf


def ffmpeg(*args) -> None:
    subprocess.run(["ffmpeg", "-v", "error", "-y", *args], check=True)


def video(
    path: Path,
    seconds: float,
    *,
    size: str = "96x64",
    fps: float = 10,
    tone: float | None = 400.0,
    tone_rate: int = 16000,
    speech: np.ndarray | None = None,
) -> Path:
    """``seconds`` of testsrc at ``fps``; audio: ``speech`` (padded or cut to the length), else a
    sine of ``tone`` Hz (None: no audio track)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    args = ["-f", "lavfi", "-i", f"testsrc=duration={seconds}:size={size}:rate={fps}"]
    wav = None
    if speech is not None:
        wav = path.with_suffix(".src.wav")
        n = int(seconds * 16000)
        sf.write(wav, np.pad(speech, (0, max(0, n - speech.size)))[:n], 16000)
        args += ["-i", str(wav), "-c:a", "aac"]
    elif tone is not None:
        args += ["-f", "lavfi", "-i", f"sine=frequency={tone}:duration={seconds}:sample_rate={tone_rate}"]
        args += ["-c:a", "aac"]
    ffmpeg(*args, "-c:v", "libx264", "-pix_fmt", "yuv420p", "-g", "50", str(path))
    if wav is not None:
        wav.unlink()
    return path
