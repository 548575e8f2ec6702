"""Audio -> LLM embeddings (10 per second) with the APM.

``mode="clamp"`` (default) encodes at most 29.9 s: the encoder's position table holds 30 s.
``mode="window"`` encodes longer audio in successive 30 s windows (each at most the encoder's
1500 positions) and concatenates the embeddings, so a 60 s clip is heard whole. Caveat: the
windows do not attend to each other and each window's log-mel is normalised on its own, so
context across a window boundary is lost -- fine for dictation-like input, weaker for a
question whose meaning spans the boundary.

``fidelity`` is whose rules the encoder follows (docs/fidelity.md). ``"llama.cpp-omni"``
(default) gives what llama.cpp-omni computes: the samples zero-padded to a whole number of 100 ms,
the last log-mel frame's window running into zeros, and the tanh-approximated GELU.
``"reference"`` gives what the PyTorch reference computes: the samples as they are, reflected
past the end as torch.stft does, and the exact (erf) GELU. The two differ most in the last rows
of a clip off the 100 ms grid.

Live input uses llama.cpp-omni's streaming mode instead: ``encode_chunk`` takes ~1 s pieces,
each attending over everything fed since ``reset_stream``; past the 30 s position table the
history restarts (counted in ``stream_resets``) rather than overflowing.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from . import checks
from . import fidelity as fidelities
from ._native import core
from .backend import resolve_device
from .constants import INPUT_SAMPLE_RATE
from .media import MAX_AUDIO_SECONDS, load_audio
from .modelset import spec as ms

WINDOW_SECONDS = 30.0


class AudioEncoder:
    def __init__(
        self,
        model_dir: str | Path,
        device: str = "cpu",
        threads: int = 1,
        mode: str = "clamp",
        exact: bool = False,
        fidelity: str = "llama.cpp-omni",
    ):
        checks.choice("mode", mode, ("clamp", "window"))
        checks.choice("fidelity", fidelity, fidelities.FIDELITIES)
        threads = checks.threads("threads", threads) or 1
        path = Path(model_dir)
        if path.is_dir():
            path = path / ms.APM_FILE
        self.mode, self.fidelity = mode, fidelity
        self.apm = core.Apm(str(path), resolve_device(device), threads, exact)
        self.apm.tanh_gelu = fidelity == "llama.cpp-omni"

    def new_stream(self) -> AudioEncoder:
        """An encoder over the same weights with a live-stream history of its own (``encode_chunk``;
        a session slot's)."""
        other = AudioEncoder.__new__(AudioEncoder)
        other.mode, other.fidelity = self.mode, self.fidelity
        other.apm = self.apm.new_stream()
        return other

    def encode(self, audio) -> np.ndarray:
        """Path, bytes or 16 kHz samples -> (n, llm_embd) float32 embeddings."""
        max_s = MAX_AUDIO_SECONDS if self.mode == "clamp" else None
        samples = load_audio(audio, max_seconds=max_s)
        if self.mode == "clamp":
            return self._encode(samples)
        step = int(WINDOW_SECONDS * INPUT_SAMPLE_RATE)
        parts = [
            self._encode(samples[i : i + step])
            for i in range(0, samples.size, step)
            if samples[i : i + step].size >= INPUT_SAMPLE_RATE // 10
        ]  # under 0.1 s yields no embedding
        return np.concatenate(parts) if parts else np.zeros((0, self.apm.dims.llm_embd), np.float32)

    def encode_chunk(self, samples) -> np.ndarray:
        """The next piece (16 kHz samples, 0.1-30 s; 1 s is the model's rhythm) of a live stream."""
        x = load_audio(samples, max_seconds=WINDOW_SECONDS)
        return self.apm.encode_mel_streaming(self._log_mel(x))

    def reset_stream(self) -> None:
        self.apm.reset_stream()

    @property
    def stream_resets(self) -> int:
        return self.apm.stream_resets

    def _encode(self, samples: np.ndarray) -> np.ndarray:
        return self.apm.encode_mel(self._log_mel(samples))

    def _log_mel(self, samples: np.ndarray) -> np.ndarray:
        lco = self.fidelity == "llama.cpp-omni"
        return self.apm.log_mel(fidelities.pad_audio(samples, self.fidelity), zero_tail=lco)
