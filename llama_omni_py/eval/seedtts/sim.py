"""Seed-TTS speaker similarity (SIM): the official model and vLLM-Omni's proxy.

Official (seed-tts-eval ``cal_sim.sh``): WavLM-Large hidden states mixed by learned softmax
weights, instance norm, ECAPA-TDNN, all from ``wavlm_large_finetune.pth``; the score of a pair
is the cosine of the (generated wav, prompt wav) embeddings, each read at full length and
resampled to 16 kHz with a windowed-sinc filter; ``ASV`` is the mean rounded to 3 decimals and
``ASV-var`` the population variance.

Proxy (vLLM-Omni): the cosine of L2-normalised time means of ``microsoft/wavlm-base-plus``'s
last hidden state (FFT resampling, at most 30 s, at least 4000 samples). It is not a speaker
model and reads about 0.13 higher; every result of it says "proxy".
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from ...errors import InvalidArgumentError, MediaError, ModelFileError
from .. import deps as _deps
from .audio import SAMPLE_RATE, read_audio, resample_fft, resample_sinc
from .wavlm import load_checkpoint, load_tensors, load_wavlm, map_state_dict

log = logging.getLogger(__name__)

WAVLM_PREFIX = "feature_extract.model."  # where the checkpoint keeps the WavLM tensors
OFFICIAL, PROXY = "official", "proxy"
LABELS = {
    OFFICIAL: "SIM (seed-tts-eval: WavLM-Large + ECAPA-TDNN, wavlm_large_finetune.pth)",
    PROXY: "SIM proxy (vLLM-Omni: mean-pooled wavlm-base-plus, not a speaker model; reads ~0.13 high)",
}
PROXY_MAX_SECONDS, PROXY_MIN_SAMPLES = 30, 4000


@dataclass(frozen=True)
class LoadReport:
    """How ``wavlm_large_finetune.pth`` loaded (by name, non-strict as upstream): official names
    the checkpoint lacks (they keep the WavLM base weights or the head's initial values), and
    checkpoint names nothing takes (the training loss's classifier, for one)."""

    checkpoint: str
    loaded: int
    missing: tuple[str, ...]
    unexpected: tuple[str, ...]
    normalize: bool
    normalize_source: str


def _min_samples(config, frames: int = 2) -> int:
    """Shortest input giving ``frames`` WavLM frames (the head's instance norm needs two)."""
    n = frames
    for k, s in zip(reversed(config.conv_kernel), reversed(config.conv_stride)):
        n = (n - 1) * s + k
    return n


class SpeakerVerifier:
    """The official SIM model: ``embed(wav)`` -> [1, emb] tensor, ``similarity(a, b)`` -> cosine."""

    kind = OFFICIAL

    def __init__(self, wavlm, head, report: LoadReport, device: str = "cpu"):
        self.wavlm, self.head, self.report, self.device = wavlm.to(device), head.to(device).eval(), report, device
        self.min_samples = _min_samples(wavlm.config)

    def hidden_states(self, wav16k: np.ndarray):
        """The hidden states the head mixes, stacked: [layers + 1, 1, T', hidden]."""
        torch = _deps.torch()
        if len(wav16k) < self.min_samples:
            raise MediaError(f"audio too short for the speaker model: {len(wav16k)} samples at 16 kHz")
        x = torch.from_numpy(np.asarray(wav16k, dtype=np.float32)).to(self.device)
        if self.report.normalize:
            x = torch.nn.functional.layer_norm(x, x.shape)
        with torch.no_grad():
            out = self.wavlm(x[None], output_hidden_states=True)
        return torch.stack(out.hidden_states, dim=0)

    def embed_samples(self, wav16k: np.ndarray):
        torch = _deps.torch()
        with torch.no_grad():
            return self.head(self.hidden_states(wav16k))

    def embed(self, wav_path: str):
        wav, sr = read_audio(wav_path, dtype="float32")
        return self.embed_samples(resample_sinc(wav, sr))

    def similarity(self, generated: str, prompt: str) -> float:
        torch = _deps.torch()
        return float(torch.nn.functional.cosine_similarity(self.embed(generated), self.embed(prompt))[0])


def load_speaker_verifier(
    checkpoint: str, wavlm: str, *, device: str = "cpu", allow_pickle: bool = False
) -> SpeakerVerifier:
    """The official SIM model from ``wavlm_large_finetune.pth`` and a WavLM-Large configuration
    source: s3prl's ``wavlm_large.pt`` or a transformers ``microsoft/wavlm-large`` folder."""
    from .ecapa import EcapaHead

    src = load_wavlm(wavlm, allow_pickle=allow_pickle)
    ckpt = load_checkpoint(checkpoint, "speaker-verification checkpoint", allow_pickle)
    if not isinstance(ckpt, dict) or not isinstance(ckpt.get("model"), dict):
        raise ModelFileError("not a speaker-verification checkpoint: expected a dict with 'model'", checkpoint)
    state = ckpt["model"]
    mapped = map_state_dict(
        {k[len(WAVLM_PREFIX) :]: v for k, v in state.items() if k.startswith(WAVLM_PREFIX)}, src.model
    )
    load_tensors(src.model, mapped.state, checkpoint)
    cfg = src.model.config
    head = EcapaHead(feat_dim=cfg.hidden_size, num_features=cfg.num_hidden_layers + 1)
    head_state = {k: v for k, v in state.items() if not k.startswith(WAVLM_PREFIX)}
    head_names = set(head.state_dict())
    if not head_names & set(head_state):
        raise ModelFileError("no ECAPA-TDNN head tensor (layer1.conv.weight, ...) in this checkpoint", checkpoint)
    load_tensors(head, head_state, checkpoint)
    report = LoadReport(
        checkpoint=checkpoint,
        loaded=len(mapped.state) + len(head_names & set(head_state)),
        missing=tuple(WAVLM_PREFIX + k for k in mapped.missing) + tuple(sorted(head_names - set(head_state))),
        unexpected=tuple(WAVLM_PREFIX + k for k in mapped.unexpected) + tuple(sorted(set(head_state) - head_names)),
        normalize=src.normalize,
        normalize_source=src.normalize_source,
    )
    if report.missing:
        log.warning("%s lacks %d tensors of the SIM model: %s", checkpoint, len(report.missing), report.missing[:8])
    return SpeakerVerifier(src.model, head, report, device)


class ProxySimilarity:
    """vLLM-Omni's proxy SIM from a local ``microsoft/wavlm-base-plus`` transformers folder."""

    kind = PROXY

    def __init__(self, path: str, device: str = "cpu"):
        if not os.path.isdir(path):
            raise ModelFileError("WavLM folder for the proxy SIM not found", path)
        torch, tf = _deps.torch(), _deps.transformers()
        try:
            self.extractor = tf.AutoFeatureExtractor.from_pretrained(path, local_files_only=True)
            model = tf.AutoModel.from_pretrained(path, local_files_only=True, torch_dtype=torch.float32)
        except (OSError, ValueError) as e:
            raise ModelFileError(f"cannot load the proxy SIM model: {e}", path) from None
        self.model, self.device = model.to(device).eval(), device

    def embed(self, wav_path: str) -> np.ndarray:
        """Unit-length time mean of the last hidden state."""
        torch = _deps.torch()
        wav, sr = read_audio(wav_path, dtype="float32", mix="mean")
        if len(wav) == 0:
            raise MediaError(f"no samples in {wav_path}")
        w = np.asarray(resample_fft(wav, sr, min_len=1), dtype=np.float32)[: PROXY_MAX_SECONDS * SAMPLE_RATE]
        if len(w) < PROXY_MIN_SAMPLES:
            w = np.pad(w, (0, PROXY_MIN_SAMPLES - len(w)))
        inputs = self.extractor(
            w, sampling_rate=SAMPLE_RATE, return_tensors="pt", padding=False, return_attention_mask=True
        )
        mask = inputs.get("attention_mask")
        with torch.inference_mode():
            h = self.model(
                inputs["input_values"].to(self.device), attention_mask=None if mask is None else mask.to(self.device)
            )
        v = h.last_hidden_state.mean(dim=1).squeeze(0).float().cpu().numpy()
        norm = float(np.linalg.norm(v))
        if not np.isfinite(norm) or norm < 1e-8:
            raise InvalidArgumentError(f"proxy SIM embedding of {wav_path} has no direction (norm {norm})")
        return v / norm

    def similarity(self, generated: str, prompt: str) -> float:
        return float(np.dot(self.embed(prompt), self.embed(generated)))


@dataclass(frozen=True)
class SimScore:
    generated: str
    prompt: str
    score: float


@dataclass(frozen=True)
class SIMSummary:
    """Scores of one model (``kind``: "official" or "proxy") over a set; ``skipped`` lists the
    pairs not scored and why."""

    kind: str
    scores: tuple[SimScore, ...]
    skipped: tuple[tuple[str, str], ...] = field(default=())

    @property
    def label(self) -> str:
        return LABELS[self.kind]

    @property
    def n(self) -> int:
        return len(self.scores)

    def _values(self) -> np.ndarray:
        if not self.scores:
            raise InvalidArgumentError("no pair was scored: a SIM over an empty set is undefined")
        return np.array([s.score for s in self.scores])

    @property
    def mean(self) -> float:
        return float(np.mean(self._values()))

    @property
    def var(self) -> float:
        """Population variance (numpy's default, as seed-tts-eval)."""
        return float(np.var(self._values()))

    @property
    def asv(self) -> float:
        return round(self.mean, 3)

    @property
    def asv_var(self) -> float:
        return round(self.var, 3)

    def as_dict(self) -> dict:
        return {
            "kind": self.kind,
            "label": self.label,
            "n": self.n,
            "skipped": len(self.skipped),
            "asv": self.asv,
            "asv_var": self.asv_var,
            "mean": self.mean,
            "var": self.var,
        }

    def report_lines(self) -> list[str]:
        tag = "" if self.kind == OFFICIAL else " (proxy)"
        return [f"ASV{tag}: {self.asv}", f"ASV-var{tag}: {self.asv_var}"]


def evaluate(pairs: Iterable[tuple[str, str]], scorer) -> SIMSummary:
    """Score each ``(generated_wav, prompt_wav)``; a pair whose audio is missing, unreadable or
    too short is skipped (as seed-tts-eval skips it) and listed in ``skipped``."""
    scores, skipped = [], []
    for gen, prompt in pairs:
        try:
            scores.append(SimScore(gen, prompt, scorer.similarity(gen, prompt)))
        except MediaError as e:
            skipped.append((f"{gen}|{prompt}", str(e)))
    return SIMSummary(scorer.kind, tuple(scores), tuple(skipped))
