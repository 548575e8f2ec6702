"""Token2Wav: MiniCPM-o speech codes -> streamed 24 kHz audio.

    from llama_omni_py import Token2Wav
    with Token2Wav("MiniCPM-o-4_5-gguf", device="cpu", threads=2) as t2w:
        for chunk in code_chunks:
            audio = t2w.push(chunk)           # float32, 24 kHz; 24000 samples per 25 codes
        audio = t2w.push([], final=True)      # flush

Token2Mel (conformer + DiT flow matching) runs on ``device``; the HiFT vocoder always runs on
the CPU with its own pool of ``threads`` workers, optionally pinned to ``cpus``.

``new_stream()`` gives another stream over the same loaded weights (one per session slot): streams
keep their own caches, noise and buffers, may push from different threads at once, and each gives
the audio it would give alone (docs/token2wav-streaming.md, "Many streams over one Token2Wav").

``cache_policy`` chooses how the streaming caches evolve between windows and how the final
window is run: ``"llama.cpp-omni"`` (default; reproduces llama.cpp-omni's audio) or
``"reference"`` (the PyTorch stepaudio2 streaming path). See docs/token2wav-streaming.md.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .._native import core
from ..config import Token2WavConfig
from ..device.backends import resolve_device
from ..errors import ConfigError, InvalidArgumentError
from ..fidelity import DEFAULTS
from ..modelset import spec as ms
from ..modelset.layout import discover, validate
from .native_options import fill


class Token2Wav:
    """Streaming Token2Wav over a module set (or its token2wav-gguf directory).

    Options are the fields of :class:`Token2WavConfig` (steps, threads, cpus, temperature, seed,
    cache_policy, token2mel, bf16), given one by one or as ``config``."""

    def __init__(self, model_dir: str | Path, device: str = "cpu", config: Token2WavConfig | None = None, **options):
        if config is not None and options:
            raise InvalidArgumentError("give either config or individual options, not both")
        if config is not None and not isinstance(config, Token2WavConfig):
            raise ConfigError("config", f"must be a Token2WavConfig, got {type(config).__name__}")
        try:
            self.config = c = config or Token2WavConfig(**options)
        except TypeError as e:  # an unknown option name
            raise InvalidArgumentError(str(e)) from None
        path = Path(model_dir)
        t2w_dir = path if (path / "encoder.gguf").exists() else path / ms.T2W_DIR
        self.device = resolve_device(device)
        if (path / ms.T2W_DIR).exists():
            validate(discover(path), ["token2wav"], self.device)
        self._native = core.Token2Wav(str(t2w_dir), to_native(c, self.device))

    def new_stream(self) -> Token2Wav:
        """Another stream over these weights, thread pools and voice prompt (nothing is loaded
        again), with the same options and its own state, ready as after :meth:`reset`. Streams
        may be driven from different threads at once; each one by one caller (or by one mel and
        one vocoder thread with the split halves). The weights stay loaded while any stream is
        open."""
        if self._native is None:
            raise InvalidArgumentError("new_stream on a closed Token2Wav")
        stream = object.__new__(Token2Wav)
        stream.config, stream.device = self.config, self.device
        stream._native = self._native.new_stream()
        return stream

    def push(self, tokens, final: bool = False) -> np.ndarray:
        """Appends speech codes (ints in 0..6560); returns the float32 24 kHz audio now ready."""
        return self._native.push(_codes(tokens), bool(final))

    def flush(self) -> np.ndarray:
        """The audio of the codes waiting in the buffer now, without ending the stream (windows
        of up to 28 codes while at least 8 wait; the last 3 stay as look-ahead)."""
        return self._native.flush()

    def push_mel(self, tokens, final: bool = False) -> list:
        """The Token2Mel half of :meth:`push`: the mel windows now ready (opaque ``MelWindow``
        objects with ``frames``, ``last`` and ``mel``), for :meth:`vocode` in the same order. One
        thread may run this half while another vocodes earlier windows (reset() needs both idle)."""
        return self._native.push_mel(_codes(tokens), bool(final))

    def flush_mel(self) -> list:
        """The Token2Mel half of :meth:`flush`."""
        return self._native.flush_mel()

    def vocode(self, window) -> np.ndarray:
        """The vocoder half: one mel window to float32 24 kHz audio. Each window once, in the order
        they were made; windows made before the last reset() are refused."""
        return self._native.vocode(window)

    def reset(self) -> None:
        """Back to the start of a stream (voice prompt caches, silence prefix, fresh noise)."""
        self._native.reset()

    @property
    def timings(self) -> dict:
        """Milliseconds of the last push: token2mel_ms, vocoder_ms, windows, samples."""
        return self._native.last_timings

    @property
    def total_timings(self) -> dict:
        return self._native.total_timings

    @property
    def cache_policy(self) -> str:
        return self._native.cache_policy

    @property
    def token2mel(self) -> str:
        """Which Token2Mel computes: "native" (our CPU code) or "graph" (ggml graphs)."""
        return self._native.token2mel

    @property
    def weight_bytes(self) -> int:
        """Bytes loaded once and shared by every stream over them: Token2Mel and vocoder
        weights and the voice prompt."""
        return self._native.weight_bytes

    @property
    def stream_bytes(self) -> int:
        """Bytes of this stream's own state (attention and conv caches on the host and on the
        Token2Mel device, buffers), as of its last window or reset."""
        return self._native.stream_bytes

    @property
    def threads(self) -> int:
        return self._native.threads

    def close(self) -> None:
        self._native = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def to_native(config: Token2WavConfig, device: str):
    """The core's Token2WavOptions for a stream on ``device``: the resolved thread count and CPUs
    (``token2mel`` and the other shared fields are copied as they are); ``overlap`` is the
    pipeline's business and stays in Python."""
    return fill(
        "Token2WavOptions",
        config,
        device=device,
        threads=config.resolved_threads,
        cpus=list(config.cpus or []),
        cache_policy=config.cache_policy or DEFAULTS["llama.cpp-omni"].cache_policy,
    )


def _codes(tokens) -> np.ndarray:
    """Speech codes as the flat int32 array the native stream takes."""
    arr = np.asarray(tokens)
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise InvalidArgumentError(f"tokens must be integers, got {arr.dtype}")
    return arr.astype(np.int32, copy=False).reshape(-1)
