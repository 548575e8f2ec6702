"""Medians over a run's requests, the pooled compute RTF, and the Markdown tables of runs: the one
renderer of bench JSON as text (``llama-omni bench`` prints it, benchmarks/report.py adds plots)."""

from __future__ import annotations

import statistics

from ..constants import OUTPUT_SAMPLE_RATE
from ..orchestration import timings

METRICS = ("wall_rtf", "compute_rtf", "time_to_first_audio_s", "audio_s", "wall_s")


def _median(values) -> float | None:
    v = [x for x in values if x is not None]
    return statistics.median(v) if v else None


def pooled_compute_rtf(requests: list[dict]) -> float | None:
    """The official aggregate: Σ compute / Σ audio over every request's steady chunks, pooled
    (not a mean of per-request ratios)."""
    compute_ms = audio_s = 0.0
    for r in requests:
        for c in r["chunks"][1:-1]:
            compute_ms += sum(c[f"{s}_ms"] or 0.0 for s in timings.COMPUTE_STAGES)
            audio_s += c["samples"] / OUTPUT_SAMPLE_RATE
    return compute_ms / 1000 / audio_s if audio_s > 0 else None


def summarise(requests: list[dict]) -> dict:
    """Medians over all measured requests and per prompt."""
    out = {m: _median(r[m] for r in requests) for m in METRICS}
    out["compute_rtf_pooled"] = pooled_compute_rtf(requests)
    out["requests"] = len(requests)
    out["per_prompt"] = {
        p: {m: _median(r[m] for r in requests if r["prompt"] == p) for m in METRICS}
        for p in dict.fromkeys(r["prompt"] for r in requests)
    }
    return out


def fmt(x, digits: int = 2) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def markdown_table(runs: list[dict]) -> str:
    """One row per run (a configuration), side by side."""
    rows = [
        "| run | T2W threads | TTS queue | pinning | wall RTF | compute RTF (pooled) | first audio s "
        "| audio s | valid |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        c, s = run["config"], run["summary"]
        valid = (
            "yes" if run["valid"] else "no: " + ", ".join(sorted({f.split(": ", 1)[1] for f in run["failed_gates"]}))
        )
        rows.append(
            f"| {run['label']} | {c['t2w_threads']} | {c['tts_queue']} | {c['pinning']} "
            f"| {fmt(s['wall_rtf'])} | {fmt(s['compute_rtf'])} ({fmt(s['compute_rtf_pooled'])}) "
            f"| {fmt(s['time_to_first_audio_s'])} | {fmt(s['audio_s'])} | {valid} |"
        )
    return "\n".join(rows)


def stage_table(runs: list[dict]) -> str:
    """One row per run and prompt: medians of the RTFs, first audio, stage ms and the longest
    Token2Wav queue wait."""
    rows = [
        "| run | prompt | wall RTF | compute RTF | first audio s | LLM ms | TTS ms | Token2Wav ms | APM ms | VPM ms "
        "| max T2W queue wait ms |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        for prompt in dict.fromkeys(q["prompt"] for q in run["requests"]):
            qs = [q for q in run["requests"] if q["prompt"] == prompt]
            med = lambda get, qs=qs: _median(map(get, qs))  # noqa: E731
            rows.append(
                f"| {run['label']} | {prompt} | {fmt(med(lambda q: q['wall_rtf']))} | "
                f"{fmt(med(lambda q: q['compute_rtf']))} | {fmt(med(lambda q: q['time_to_first_audio_s']))} | "
                + " | ".join(
                    fmt(med(lambda q, k=k: q["stage_ms"].get(k)), 0)
                    for k in ("llm_ms", "tts_ms", "token2wav_ms", "apm_ms", "vpm_ms")
                )
                + f" | {fmt(med(lambda q: q['queue_waits']['t2w_queue_max_ms']), 0)} |"
            )
    return "\n".join(rows)
