"""Audio -> LLM embeddings (10 per second) with the APM.

``mode="clamp"`` (default) encodes at most 29.9 s: the encoder's position table holds 30 s.
``mode="window"`` encodes longer audio in successive 30 s windows (each at most the encoder's
1500 positions) and concatenates the embeddings, so a 60 s clip is heard whole. Caveat: the
windows do not attend to each other and each window's log-mel is normalised on its own, so
context across a window boundary is lost -- fine for dictation-like input, weaker for a
question whose meaning spans the boundary.

``fidelity`` is whose rules the encoder follows (docs/fidelity.md). ``"llama.cpp-omni"``
(default) gives what llama.cpp-omni computes: the samples zero-padded to a whole number of 100 ms,
the last log-mel frame's window running into zeros, the tanh-approximated GELU, and convolutions
that read their input rounded to F16.
``"reference"`` gives what the PyTorch reference computes: the samples as they are, reflected
past the end as torch.stft does, and the exact (erf) GELU. The two differ most in the last rows
of a clip off the 100 ms grid.

``resampler`` converts audio files not at 16 kHz (media.resample): ``"linear"`` as llama.cpp-omni's
decoder does, ``"band-limited"`` as the reference's; None: the fidelity's.

Live input uses llama.cpp-omni's streaming mode instead: ``encode_chunk`` takes ~1 s pieces,
each attending over everything fed since ``reset_stream``; past the 30 s position table the
history restarts (counted in ``stream_resets``) rather than overflowing. ``stream_positions``
places each chunk: ``"consecutive"`` (default) after the positions before it; ``"chunk-count"``
at k times its own length, the k-th chunk since the last reset (llama.cpp-omni's rule, which
only equal chunks survive intact: docs/fidelity.md).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .. import checks
from .. import fidelity as fidelities
from .._native import core
from ..constants import INPUT_SAMPLE_RATE
from ..device.backends import resolve_device
from ..media import MAX_AUDIO_SECONDS, load_audio
from ..modelset import spec as ms
from ..video import audio_rows

WINDOW_SECONDS = 30.0
CHUNK_SAMPLES = 30 * INPUT_SAMPLE_RATE  # the reference's audio feature chunk
ENCODER_RATE = 50  # encoder positions per second (after the stride-2 convolution)
TAIL_ZEROS = 800  # zeros after a chunk: more than a log-mel window (400) past its last frame


class AudioEncoder:
    def __init__(
        self,
        model_dir: str | Path,
        device: str = "cpu",
        threads: int = 1,
        mode: str = "clamp",
        exact: bool = False,
        fidelity: str = "llama.cpp-omni",
        resampler: str | None = None,
        stream_positions: str = "consecutive",
    ):
        checks.choice("mode", mode, ("clamp", "window"))
        checks.choice("fidelity", fidelity, fidelities.FIDELITIES)
        resampler = resampler or fidelities.DEFAULTS[fidelity].resampler
        checks.choice("resampler", resampler, fidelities.RESAMPLERS)
        checks.choice("stream_positions", stream_positions, fidelities.AUDIO_POSITIONS)
        threads = checks.threads("threads", threads) or 1
        path = Path(model_dir)
        if path.is_dir():
            path = path / ms.APM_FILE
        self.mode, self.fidelity = mode, fidelity
        self.resampler, self.stream_positions = resampler, stream_positions
        self.apm = core.Apm(str(path), resolve_device(device), threads, exact)
        self.apm.tanh_gelu = self.apm.f16_conv_input = fidelity == "llama.cpp-omni"

    def new_stream(self) -> AudioEncoder:
        """An encoder over the same weights with a live-stream history of its own (``encode_chunk``;
        a session slot's)."""
        other = AudioEncoder.__new__(AudioEncoder)
        other.__dict__.update(self.__dict__)
        other.apm = self.apm.new_stream()
        return other

    def load(self, audio, max_seconds: float | None = MAX_AUDIO_SECONDS) -> np.ndarray:
        """Path, bytes or 16 kHz samples -> 16 kHz mono samples, resampled by this encoder's rule."""
        return load_audio(audio, max_seconds=max_seconds, resampler=self.resampler)

    def encode(self, audio) -> np.ndarray:
        """Path, bytes or 16 kHz samples -> (n, llm_embd) float32 embeddings."""
        max_s = MAX_AUDIO_SECONDS if self.mode == "clamp" else None
        samples = self.load(audio, max_s)
        if self.mode == "clamp":
            return self._encode(samples)
        step = int(WINDOW_SECONDS * INPUT_SAMPLE_RATE)
        parts = [
            self._encode(samples[i : i + step])
            for i in range(0, samples.size, step)
            if samples[i : i + step].size >= INPUT_SAMPLE_RATE // 10
        ]  # under 0.1 s yields no embedding
        return np.concatenate(parts) if parts else np.zeros((0, self.apm.dims.llm_embd), np.float32)

    def encode_long(self, samples: np.ndarray) -> np.ndarray:
        """16 kHz samples of any length -> embeddings, in 30 s windows whatever the mode (a video's
        audio segment: never clamped)."""
        x = self.load(samples, None)
        step = int(WINDOW_SECONDS * INPUT_SAMPLE_RATE)
        parts = [self._encode(x[i : i + step]) for i in range(0, x.size, step)]
        return np.concatenate(parts) if len(parts) > 1 else parts[0]

    def encode_as_reference(
        self, clips: list[np.ndarray], merge: bool = True, chunk_seconds: float | None = 1.0
    ) -> list[np.ndarray]:
        """A message's audio clips as the reference encodes them (``audio_feature_extract`` and
        ``get_audio_embedding`` of MiniCPM-o 4.5): with ``merge`` the clips are joined
        (``merge_audio_from_same_content``), and the audio is cut into 30 s chunks; each chunk's
        log-mel is that of the chunk zero-padded to 30 s, normalised over it, and cut to
        ceil(n/160) frames; the encoder attends in blocks of ``chunk_seconds`` (None: fully). The
        rows are handed back in order, ``video.audio_rows(len(clip))`` to each clip (a clip of
        1280 samples or fewer gets none)."""
        clips = [np.asarray(c, np.float32).reshape(-1) for c in clips]
        groups = [np.concatenate(clips)] if merge and clips else clips
        chunks = [g[i : i + CHUNK_SAMPLES] for g in groups for i in range(0, g.size, CHUNK_SAMPLES)]
        longest = max((-(-c.size // 160) for c in chunks), default=0)
        block = int(round(chunk_seconds * ENCODER_RATE)) if chunk_seconds else 0
        rows = [self._reference_chunk(c, longest, block) for c in chunks]
        e = self.apm.dims.llm_embd
        pool = np.concatenate(rows) if rows else np.zeros((0, e), np.float32)
        out, at = [], 0
        for c in clips:
            n = min(audio_rows(c.size), pool.shape[0] - at)  # the reference fills its slots in order
            out.append(pool[at : at + n])
            at += n
        return out

    def _reference_chunk(self, samples: np.ndarray, longest: int, block: int) -> np.ndarray:
        frames = -(-samples.size // 160)
        if audio_rows(samples.size) == 0:
            return np.zeros((0, self.apm.dims.llm_embd), np.float32)
        # The reference pads to 30 s with zeros (a whole 30 s chunk is not padded); every frame past
        # the audio's last window is then silence (log-mel -10), so 800 zeros give the same frames
        # and the same maximum.
        padded = np.zeros(min(samples.size + TAIL_ZEROS, CHUNK_SAMPLES), np.float32)
        padded[: samples.size] = samples
        mel = self.apm.log_mel(padded, zero_tail=False)[:, :frames]
        if frames % 2 and frames < longest:
            # A shorter chunk of the reference's batch is padded with zero features, which its
            # stride-2 convolution reads past an odd length; one zero frame gives the same.
            mel = np.concatenate([mel, np.zeros((mel.shape[0], 1), np.float32)], axis=1)
        return self.apm.encode_mel(np.ascontiguousarray(mel), block)

    def encode_chunk(self, samples) -> np.ndarray:
        """The next piece (16 kHz samples, 0.1-30 s; 1 s is the model's rhythm) of a live stream."""
        x = self.load(samples, WINDOW_SECONDS)
        return self.apm.encode_mel_streaming(self._log_mel(x), self.stream_positions == "chunk-count")

    def encode_carried(self, samples: np.ndarray) -> np.ndarray:
        """A whole clip (16 kHz samples) as chunks of the live stream: in 30 s pieces, each
        attending over the history (EngineConfig.audio_history="carried")."""
        step = int(WINDOW_SECONDS * INPUT_SAMPLE_RATE)
        parts = [self.encode_chunk(samples[i : i + step]) for i in range(0, samples.size, step)]
        return np.concatenate(parts) if len(parts) > 1 else parts[0]

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
