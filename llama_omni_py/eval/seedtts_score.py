"""Seed-TTS scores of a run's wavs (``{out}/{utt}.wav``): WER with the ASR the user names, SIM
with the official speaker model and, labelled a proxy, vLLM-Omni's wavlm-base-plus similarity
(docs/evaluation.md#seed-tts-wer-and-sim). A missing wav is counted, never dropped silently."""

from __future__ import annotations

from pathlib import Path

from ..errors import InvalidArgumentError


def report(items, out: Path, language: str, *, asr=None, sv=None, sv_wavlm=None, proxy_sv=None) -> dict:
    """Every score the given models allow, as a dict (with a ``markdown`` summary)."""
    from . import seedtts as st

    wavs = {it.id: out / f"{it.id}.wav" for it in items}
    missing = sorted(k for k, p in wavs.items() if not p.is_file())
    result: dict = {"utterances": len(items), "missing_wavs": missing, "n_missing_wavs": len(missing)}
    lines = [f"# Seed-TTS ({language})", "", f"{len(items)} utterances, {len(missing)} without a wav."]
    if asr:
        wer = st.evaluate_wer([(str(wavs[it.id]), it.text) for it in items], st.load_asr(asr), language)
        result["wer"] = wer.as_dict()
        lines += ["", "## WER", "", *wer.report_lines()]
    if sv:
        if not sv_wavlm:
            raise InvalidArgumentError("--sv needs --sv-wavlm: the WavLM-large weights it was fine-tuned from")
        verifier = st.load_speaker_verifier(sv, sv_wavlm)
        sim = st.evaluate_sim([(str(wavs[it.id]), str(it.prompt_wav)) for it in items], verifier)
        result["sim"] = sim.as_dict()
        lines += ["", "## SIM (official speaker model)", "", *sim.report_lines()]
    if proxy_sv:
        proxy = st.evaluate_sim([(str(wavs[it.id]), str(it.prompt_wav)) for it in items], st.ProxySimilarity(proxy_sv))
        result["sim_proxy"] = proxy.as_dict()
        lines += ["", "## SIM proxy (wavlm-base-plus, mean-pooled: not the official model)", "", *proxy.report_lines()]
    if not (asr or sv or proxy_sv):
        lines += ["", "No --asr, --sv or --proxy-sv given: the wavs are written, nothing is scored."]
    result["markdown"] = "\n".join(lines) + "\n"
    return result
