"""Per-stage timings of the pipeline and the two RTF definitions users are judged by.

* wall RTF = (time of the last audio sample - request start) / audio duration;
* compute RTF = sum of stage compute / sum of audio over the steady chunks (the first chunk,
  which pays for warm-up, and the final flush are excluded);
* time to first audio.
With ``OMNI_T2W_PROFILE=1`` a session prints a table (n, p50, p95, max per stage) at close.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from .config import profiling_enabled
from .results import Timings

COMPUTE_STAGES = ("llm", "tts", "token2wav")


def stage_durations(events) -> dict[str, list[float]]:
    """Milliseconds per item for each stage (and its .wait/.blocked queue times), in order."""
    out: dict[str, list[float]] = defaultdict(list)
    for name, start, end in events:
        out[name].append((end - start) * 1000)
    return dict(out)


def compute_rtf(events, chunk_audio_s: list[float]) -> float | None:
    """Item i of every compute stage belongs to chunk i (each stage maps one item to one)."""
    d = stage_durations(events)
    steady = range(1, len(chunk_audio_s) - 1)
    audio = sum(chunk_audio_s[i] for i in steady)
    if audio <= 0:
        return None
    compute_ms = sum(d[s][i] for s in COMPUTE_STAGES if s in d for i in steady if i < len(d[s]))
    return compute_ms / 1000 / audio


def stage_ms(events) -> dict[str, float]:
    """Total compute milliseconds per compute stage."""
    out = {s: 0.0 for s in COMPUTE_STAGES}
    for name, start, end in events:
        if name in out:
            out[name] += (end - start) * 1000
    return out


def request_timings(
    events,
    chunk_audio_s: list[float],
    *,
    start: float,
    end: float,
    first_audio: float | None,
    last_audio: float | None,
    **counts,
) -> Timings:
    """The Timings of one request from its stage events and per-chunk audio seconds. Times are
    perf_counter seconds; ``first_audio``/``last_audio`` are seconds after ``start``; ``counts``
    are the remaining Timings fields (seed, prefill_ms, n_tokens, n_tts_tokens, apm_ms, vpm_ms)."""
    ms = stage_ms(events)
    audio_s = sum(chunk_audio_s)
    return Timings(
        wall_s=end - start,
        time_to_first_audio_s=first_audio,
        llm_ms=ms["llm"],
        tts_ms=ms["tts"],
        token2wav_ms=ms["token2wav"],
        audio_s=audio_s,
        wall_rtf=last_audio / audio_s if audio_s > 0 and last_audio is not None else None,
        compute_rtf=compute_rtf(events, chunk_audio_s),
        events=tuple(events),
        **counts,
    )


def summary_table(durations: dict[str, list[float]]) -> str:
    rows = [f"{'stage':<18}{'n':>6}{'p50 ms':>10}{'p95 ms':>10}{'max ms':>10}"]
    for name in sorted(durations):
        v = np.asarray(durations[name])
        rows.append(f"{name:<18}{v.size:>6}{np.percentile(v, 50):>10.1f}{np.percentile(v, 95):>10.1f}{v.max():>10.1f}")
    return "\n".join(rows)


class Profiler:
    """Collects stage timings over a session's requests."""

    def __init__(self, enabled: bool | None = None):
        self.enabled = profiling_enabled() if enabled is None else enabled
        self.durations: dict[str, list[float]] = defaultdict(list)

    def add(self, events, extra: dict[str, float] | None = None) -> None:
        for name, values in stage_durations(events).items():
            self.durations[name] += values
        for name, ms in (extra or {}).items():
            self.durations[name].append(ms)

    def report(self) -> str:
        return summary_table(self.durations) if self.durations else "no requests profiled"
