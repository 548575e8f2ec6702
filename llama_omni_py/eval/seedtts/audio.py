"""Reading and resampling wav files the way each Seed-TTS scorer does (docs/evaluation.md).

Three resamplers are in use upstream and each score keeps its own:
- Whisper WER and the proxy SIM: FFT resampling (``scipy.signal.resample``) to
  ``int(len * 16000 / sr)`` samples;
- the official SIM: a windowed-sinc resampler with torchaudio's ``Resample`` defaults (Hann
  window, 6 zero crossings, roll-off 0.99; kernel built in float64, kept in float32),
  restated in :func:`resample_sinc` so torchaudio is not needed.
"""

from __future__ import annotations

import math
import os

import numpy as np

from ...errors import MediaError
from .. import deps as _deps

SAMPLE_RATE = 16000  # every Seed-TTS scorer works at 16 kHz


def read_audio(path: str, *, dtype: str = "float64", mix: str = "first") -> tuple[np.ndarray, int]:
    """Samples of a sound file as a 1-D array and its sample rate.

    A multi-channel file keeps its first channel (``mix="first"``) or the channel mean
    (``mix="mean"``, the proxy SIM's choice). A missing or unreadable file is a MediaError."""
    if not os.path.isfile(path):
        raise MediaError(f"audio file not found: {path}")
    import soundfile

    try:
        data, sr = soundfile.read(path, dtype=dtype, always_2d=True)
    except (RuntimeError, soundfile.LibsndfileError, TypeError, ValueError) as e:
        raise MediaError(f"cannot read audio file {path}: {e}") from None
    mono = data[:, 0] if mix == "first" else data.mean(axis=1).astype(data.dtype)
    return np.ascontiguousarray(mono), int(sr)


def resample_fft(wav: np.ndarray, sr: int, *, min_len: int = 0) -> np.ndarray:
    """``scipy.signal.resample`` to 16 kHz with ``int(len * 16000 / sr)`` samples (at least
    ``min_len``); unchanged when already at 16 kHz."""
    if sr == SAMPLE_RATE:
        return wav
    import scipy.signal

    n = max(min_len, int(len(wav) * SAMPLE_RATE / sr))
    return scipy.signal.resample(wav, n)


def _sinc_kernel(orig: int, new: int, width_zeros: int = 6, rolloff: float = 0.99):
    torch = _deps.torch()
    base = min(orig, new) * rolloff
    width = math.ceil(width_zeros * orig / base)
    idx = torch.arange(-width, width + orig, dtype=torch.float64)[None, None] / orig
    # The output phases are divided in float32 and the sum is float64, as torchaudio computes it.
    t = torch.arange(0, -new, -1)[:, None, None] / new + idx
    t = (t * base).clamp_(-width_zeros, width_zeros)
    window = torch.cos(t * math.pi / width_zeros / 2) ** 2
    t = t * math.pi
    kernel = torch.where(t == 0, torch.tensor(1.0).to(t), t.sin() / t)
    kernel = kernel * (window * (base / orig))
    return kernel.to(torch.float32), width


def resample_sinc(wav: np.ndarray, sr: int) -> np.ndarray:
    """Windowed-sinc resampling of float32 samples to 16 kHz (torchaudio ``Resample(sr, 16000)``
    with its defaults); unchanged when already at 16 kHz."""
    if sr == SAMPLE_RATE:
        return wav
    torch = _deps.torch()
    g = math.gcd(int(sr), SAMPLE_RATE)
    orig, new = int(sr) // g, SAMPLE_RATE // g
    kernel, width = _sinc_kernel(orig, new)
    x = torch.from_numpy(np.asarray(wav, dtype=np.float32))[None]
    x = torch.nn.functional.pad(x, (width, width + orig))
    y = torch.nn.functional.conv1d(x[:, None], kernel, stride=orig).transpose(1, 2).reshape(1, -1)
    n = int(math.ceil(new * len(wav) / orig))
    return y[0, :n].numpy()
