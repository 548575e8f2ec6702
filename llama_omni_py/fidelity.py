"""Whose rules the engine follows where llama.cpp-omni and the PyTorch reference of MiniCPM-o
differ (docs/fidelity.md lists every rule with its source).

``EngineConfig(fidelity="llama.cpp-omni")`` (the default) gives what llama.cpp-omni computes for
the same files, so that users moving from it get the same embeddings, tokens and audio;
``fidelity="reference"`` gives what the PyTorch reference computes. Each rule also has its own
field (``None``: the fidelity's choice), which wins over the switch:

    rule             field                            llama.cpp-omni      reference
    Token2Wav        Token2WavConfig.cache_policy     "llama.cpp-omni"    "reference"
    audio encoder    EngineConfig.audio_fidelity      "llama.cpp-omni"    "reference"
    audio rate       EngineConfig.audio_resampler     "linear"            "band-limited"
    clip over 30 s   EngineConfig.audio_mode          "clamp" (29.9 s)    "window" (30 s chunks)
    TTS sampling     ReplyConfig.tts                  TtsSampling()       TtsSampling.reference()
    prompt           ReplyConfig.prompt_fidelity      "llama.cpp-omni"    "reference"
    images           VisionConfig.rules               "llama.cpp-omni"    "reference"
    JPEG decoding    VisionConfig.jpeg_decoder        "stb_image"         "pillow"

Two of llama.cpp-omni's rules are defects, so both fidelities keep ours and its rule is there
only by its own field: the audio encoder's history carried from clip to clip
(``EngineConfig.audio_history="carried"``; ours: ``"clip"``) and a streaming chunk positioned as
if every chunk had its length (``EngineConfig.audio_positions="chunk-count"``; ours:
``"consecutive"``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

FIDELITIES = ("llama.cpp-omni", "reference")
AUDIO_GRID = 1600  # samples: 100 ms at 16 kHz, llama.cpp-omni's padding unit


@dataclass(frozen=True)
class Defaults:
    """The rules of one fidelity (the per-module fields override them)."""

    cache_policy: str
    audio: str  # the audio encoder's rules (AudioEncoder fidelity)
    reference_tts: bool  # TtsSampling.reference() instead of TtsSampling()
    resampler: str  # audio not at 16 kHz (media.resample)
    audio_mode: str  # a lone clip over 30 s: its first 29.9 s ("clamp") or all of it in 30 s chunks ("window")
    audio_history: str = "clip"  # llama.cpp-omni's "carried" is a defect: never the default
    audio_positions: str = "consecutive"  # likewise its "chunk-count"


DEFAULTS = {
    "llama.cpp-omni": Defaults(
        cache_policy="llama.cpp-omni",
        audio="llama.cpp-omni",
        reference_tts=False,
        resampler="linear",
        audio_mode="clamp",
    ),
    "reference": Defaults(
        cache_policy="reference", audio="reference", reference_tts=True, resampler="band-limited", audio_mode="window"
    ),
}
RESAMPLERS = ("linear", "band-limited")  # llama.cpp-omni's decoder's; a band-limited (FFT) one
AUDIO_HISTORIES = ("clip", "carried")  # each clip on its own; one history over a request's clips
AUDIO_POSITIONS = ("consecutive", "chunk-count")  # a stream chunk after the last; at k * its length


def pad_audio(samples: np.ndarray, rules: str) -> np.ndarray:
    """16 kHz samples as the audio front end sees them: for ``"llama.cpp-omni"`` zero-padded at
    the end to a whole number of 100 ms (at least one), as it does before its log-mel; unchanged
    for ``"reference"``."""
    if rules == "reference":
        return samples
    n = samples.size
    target = max(AUDIO_GRID, -(-n // AUDIO_GRID) * AUDIO_GRID)
    if target == n:
        return samples
    return np.concatenate([samples, np.zeros(target - n, samples.dtype)])
