"""Seed-TTS scoring: WER (seed-tts-eval's normalisation and jiwer alignment) and SIM (the
official WavLM-Large + ECAPA-TDNN speaker model, and vLLM-Omni's proxy). What each number means
and where the model files come from: docs/evaluation.md#seed-tts-wer-and-sim.

WER::

    asr = load_asr("whisper:/models/whisper-large-v3")          # or "paraformer:/models/paraformer-zh"
    summary = evaluate_wer([(wav, reference_text), ...], asr, "en")
    summary.wer, summary.wer_pooled, summary.report_lines()

SIM::

    sv = load_speaker_verifier("/models/wavlm_large_finetune.pth", "/models/wavlm_large.pt")
    summary = evaluate_sim([(generated_wav, prompt_wav), ...], sv)
    summary.asv, summary.asv_var, summary.report_lines()

Needs the ``eval`` extra (``pip install 'llama-omni-py[eval]'``); a missing package raises
:class:`~llama_omni_py.errors.MissingDependencyError` naming it.
"""

from .asr import ASRModel, ParaformerASR, WhisperASR, load_asr, parse_spec
from .audio import read_audio, resample_fft, resample_sinc
from .sim import (
    LoadReport,
    ProxySimilarity,
    SimScore,
    SIMSummary,
    SpeakerVerifier,
    load_speaker_verifier,
)
from .sim import evaluate as evaluate_sim
from .wer import UtteranceWER, WERSummary, normalize, punctuation, score_utterance, to_simplified
from .wer import evaluate as evaluate_wer
from .wer import summarize as summarize_wer

__all__ = [
    "ASRModel",
    "WhisperASR",
    "ParaformerASR",
    "load_asr",
    "parse_spec",
    "read_audio",
    "resample_fft",
    "resample_sinc",
    "normalize",
    "punctuation",
    "to_simplified",
    "score_utterance",
    "UtteranceWER",
    "WERSummary",
    "summarize_wer",
    "evaluate_wer",
    "SpeakerVerifier",
    "ProxySimilarity",
    "LoadReport",
    "SimScore",
    "SIMSummary",
    "load_speaker_verifier",
    "evaluate_sim",
]
