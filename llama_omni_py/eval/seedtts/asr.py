"""The two ASR systems of Seed-TTS, each loaded from a local folder the user gives (never a
download), behind one method: ``transcribe(wav_path) -> str``.

- ``whisper:<dir>`` -- Whisper (whisper-large-v3 for the benchmark) through transformers'
  ``WhisperProcessor`` + ``WhisperForConditionalGeneration`` in float32: the wav is read as
  float64, FFT-resampled to 16 kHz when it is not, and decoded with the forced English
  transcribe prompt, special tokens dropped.
- ``paraformer:<dir>`` -- paraformer-zh through funasr's ``AutoModel`` (``batch_size_s=300``),
  version check off. The text is returned as funasr gives it; the WER scorer converts a Chinese
  hypothesis to simplified characters.

Both transcribe in bounded memory, however long the wav: Whisper hears its first 30 s (its
processor's window, as upstream); paraformer takes a wav of up to ``PARAFORMER_WINDOW_S`` (60 s) whole,
as upstream, and a longer one in equal windows of at most that length, read one at a time, their
texts joined by spaces -- the way funasr's long-audio mode joins its voice-activity segments, which
are at most 60 s each (fsmn-vad's ``max_single_segment_time``).
"""

from __future__ import annotations

import os
from typing import Protocol, runtime_checkable

from ...errors import ConfigError, MediaError, MissingDependencyError, ModelFileError
from .. import deps as _deps
from .audio import SAMPLE_RATE, read_audio, resample_fft

KINDS = ("whisper", "paraformer")
PARAFORMER_WINDOW_S = 60.0  # funasr's fsmn-vad segments are at most this long (max_single_segment_time)


@runtime_checkable
class ASRModel(Protocol):
    """What the WER scorer needs from an ASR system."""

    def transcribe(self, wav_path: str) -> str: ...


def _model_dir(path: str, kind: str, needs: tuple[str, ...]) -> str:
    if not os.path.isdir(path):
        raise ModelFileError(f"{kind} model folder not found", path)
    for name in needs:
        if not os.path.exists(os.path.join(path, name)):
            raise ModelFileError(f"not a {kind} model folder: it has no {name}", path)
    return path


class WhisperASR:
    """Whisper from a local transformers folder (config.json, weights, tokenizer and
    preprocessor files)."""

    def __init__(self, path: str, device: str = "cpu", language: str = "english"):
        self.path = _model_dir(path, "Whisper", ("config.json", "preprocessor_config.json"))
        torch, tf = _deps.torch(), _deps.transformers()
        try:
            self.processor = tf.WhisperProcessor.from_pretrained(path, local_files_only=True)
            model = tf.WhisperForConditionalGeneration.from_pretrained(
                path, local_files_only=True, torch_dtype=torch.float32
            )
        except (OSError, ValueError) as e:
            raise ModelFileError(f"cannot load Whisper: {e}", path) from None
        self.model = model.to(device).eval()
        self.device = device
        self.forced_decoder_ids = self.processor.get_decoder_prompt_ids(language=language, task="transcribe")

    def features(self, wav_path: str):
        """Log-mel input features of a wav (resampled to 16 kHz first when needed)."""
        wav, sr = read_audio(wav_path, dtype="float64")
        wav = resample_fft(wav, sr)
        return self.processor(wav, sampling_rate=SAMPLE_RATE, return_tensors="pt").input_features

    def generate(self, wav_path: str):
        """Token ids Whisper decodes for a wav, the forced prompt included."""
        torch = _deps.torch()
        with torch.no_grad():
            feats = self.features(wav_path).to(self.device)
            return self.model.generate(feats, forced_decoder_ids=self.forced_decoder_ids)

    def transcribe(self, wav_path: str) -> str:
        return self.processor.batch_decode(self.generate(wav_path), skip_special_tokens=True)[0]


PARAFORMER_NEEDS = (
    "funasr and a filter-bank backend for it: kaldi-native-fbank (in the eval extra) or a torchaudio "
    "matching the installed torch"
)


class ParaformerASR:
    """paraformer-zh from a local funasr model folder (config.yaml and model.pt, with
    tokens.json/am.mvn beside them, or a ModelScope download with configuration.json)."""

    def __init__(self, path: str, device: str = "cpu"):
        self.path = _model_dir(path, "paraformer", ())
        if not any(os.path.exists(os.path.join(path, f)) for f in ("config.yaml", "configuration.json")):
            raise ModelFileError("not a funasr model folder: it has neither config.yaml nor configuration.json", path)
        funasr = _deps.require("funasr", purpose=f"paraformer ASR (needs {PARAFORMER_NEEDS})")
        if not _has_fbank():
            raise MissingDependencyError(
                "kaldi-native-fbank", extra=_deps.EXTRA, purpose=f"paraformer ASR (needs {PARAFORMER_NEEDS})"
            )
        try:
            self.model = funasr.AutoModel(
                model=path, device=device, disable_update=True, disable_pbar=True, log_level="ERROR"
            )
        except (OSError, AssertionError, KeyError, RuntimeError, ValueError) as e:
            raise ModelFileError(f"funasr cannot load this paraformer folder: {e}", path) from None

    def transcribe(self, wav_path: str) -> str:
        if not os.path.isfile(wav_path):
            raise MediaError(f"audio file not found: {wav_path}")
        import soundfile

        try:
            info = soundfile.info(wav_path)
        except (RuntimeError, soundfile.LibsndfileError, TypeError, ValueError) as e:
            raise MediaError(f"cannot read audio file {wav_path}: {e}") from None
        window = int(PARAFORMER_WINDOW_S * info.samplerate)
        if info.frames <= window:
            return self._text(self.model.generate(input=wav_path, batch_size_s=300, disable_pbar=True))
        texts = (self._text(self._window(wav_path, a, b, info.samplerate)) for a, b in windows(info.frames, window))
        return " ".join(t for t in texts if t)

    def _window(self, wav_path: str, start: int, stop: int, sr: int):
        """funasr's result for samples [start, stop) of a wav, read as funasr reads a file (float32,
        channels averaged) and resampled by funasr from ``sr``."""
        import soundfile

        data, _ = soundfile.read(wav_path, start=start, stop=stop, dtype="float32", always_2d=True)
        mono = data.mean(axis=1) if data.shape[1] > 1 else data[:, 0]
        return self.model.generate(input=mono.copy(), fs=sr, batch_size_s=300, disable_pbar=True)

    @staticmethod
    def _text(res) -> str:
        return res[0]["text"] if res else ""


def windows(n: int, most: int) -> list[tuple[int, int]]:
    """``[start, stop)`` of the fewest equal windows of at most ``most`` samples covering ``n``."""
    k = -(-n // most)
    size = -(-n // k)
    return [(a, min(n, a + size)) for a in range(0, n, size)]


def _has_fbank() -> bool:
    import importlib.util

    return any(importlib.util.find_spec(m) is not None for m in ("kaldi_native_fbank", "torchaudio"))


def parse_spec(spec: str) -> tuple[str, str]:
    """``"whisper:/path"`` -> ``("whisper", "/path")``; a ConfigError names a bad spec."""
    kind, sep, path = spec.partition(":")
    if not sep or kind not in KINDS or not path:
        raise ConfigError("asr", f"expected 'whisper:<model folder>' or 'paraformer:<model folder>', got {spec!r}")
    return kind, os.path.expanduser(path)


def load_asr(spec: str, device: str = "cpu") -> ASRModel:
    """The ASR system a spec string names, loaded from its local folder."""
    kind, path = parse_spec(spec)
    return WhisperASR(path, device) if kind == "whisper" else ParaformerASR(path, device)
