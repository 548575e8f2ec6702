"""Spoken test material: espeak-ng utterances at 16 kHz, laid out with pauses and noise, and
where each utterance's speech really starts and ends (by its samples, not by a detector)."""

from __future__ import annotations

import subprocess
import tempfile
from dataclasses import dataclass

import numpy as np

from llama_omni_py.media import load_audio, resample

SR = 16000
AUDIBLE = 0.02  # |sample| above this counts as speech when locating an utterance's ends


def say(text: str, speed: int = 160) -> np.ndarray:
    """espeak-ng's voice for ``text``, 16 kHz float32."""
    with tempfile.NamedTemporaryFile(suffix=".wav") as f:
        subprocess.run(["espeak-ng", "-s", str(speed), "-w", f.name, text], check=True, capture_output=True)
        return load_audio(f.name)


@dataclass
class Utterance:
    text: str
    start_s: float  # first audible sample
    end_s: float  # last audible sample


def conversation(texts, pause_s: float = 2.0, lead_s: float = 1.0, noise: float = 0.005, seed: int = 0):
    """The utterances one after the other with ``pause_s`` of silence between, white noise of
    standard deviation ``noise`` over all of it; (audio, [Utterance])."""
    parts, spans, at = [np.zeros(int(lead_s * SR), np.float32)], [], int(lead_s * SR)
    for text in texts:
        x = text if isinstance(text, np.ndarray) else say(text)
        loud = np.flatnonzero(np.abs(x) > AUDIBLE)
        spans.append(Utterance(str(text)[:40], (at + loud[0]) / SR, (at + loud[-1]) / SR))
        parts += [x, np.zeros(int(pause_s * SR), np.float32)]
        at += x.size + int(pause_s * SR)
    audio = np.concatenate(parts)
    audio = audio + np.random.default_rng(seed).normal(0.0, noise, audio.size).astype(np.float32)
    return audio.astype(np.float32), spans


def with_gap(first: str, second: str, gap_s: float) -> np.ndarray:
    """Two phrases with a short silence between: one utterance to a listener."""
    return np.concatenate([say(first), np.zeros(int(gap_s * SR), np.float32), say(second)])


def pcm16_24k(x: np.ndarray) -> bytes:
    """16 kHz float32 -> 24 kHz little-endian int16 (what the OpenAI Realtime API carries)."""
    y = resample(x, SR, 24000)
    return (np.clip(y, -1.0, 1.0) * 32767.0).astype("<i2").tobytes()
