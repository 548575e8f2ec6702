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

from ..env import profiling_enabled
from ..results import Timings

COMPUTE_STAGES = ("llm", "tts", "token2wav")
T2W_HALVES = ("token2mel", "vocoder")  # Token2Wav as two stages (stages.token2wav_stages)


def stage_durations(events) -> dict[str, list[float]]:
    """Milliseconds per item for each stage (and its .wait/.blocked queue times), in order. When
    Token2Wav ran as two stages, "token2wav" holds the sum of its halves per item."""
    out: dict[str, list[float]] = defaultdict(list)
    for name, start, end in events:
        out[name].append((end - start) * 1000)
    if "token2wav" not in out and T2W_HALVES[0] in out:
        out["token2wav"] = [a + b for a, b in zip(out[T2W_HALVES[0]], out.get(T2W_HALVES[1], []))]
    return dict(out)


def token2wav_consumer(events) -> str:
    """The stage that takes the TTS's codes: "token2wav", or "token2mel" when split."""
    return T2W_HALVES[0] if any(name == T2W_HALVES[0] for name, _, _ in events) else "token2wav"


def first_end(events, stage: str) -> float | None:
    """perf_counter time at which ``stage`` first handed an item on, or None."""
    ends = [e for name, _, e in events if name == stage]
    return min(ends) if ends else None


def compute_rtf(events, chunk_audio_s: list[float]) -> float | None:
    """Stage compute per second of audio over the steady audio windows.

    ``chunk_audio_s`` holds the audio seconds of every Token2Wav output, in order; window i was
    made by Token2Wav item i from TTS item i (one code chunk each). Steady windows leave out the
    first (it pays for the prefill and warm-up) and the final flush. Each steady window counts its
    own TTS and Token2Wav time plus the LLM's decode time per second of audio (the LLM's chunks
    do not line up with windows, so its time is spread evenly; its first chunk, which holds the
    prefill, is left out)."""
    d = stage_durations(events)
    steady = range(1, len(chunk_audio_s) - 1)
    audio = sum(chunk_audio_s[i] for i in steady)
    total_audio = sum(chunk_audio_s)
    if audio <= 0 or total_audio <= 0:
        return None
    per_window = sum(d[s][i] for s in ("tts", "token2wav") if s in d for i in steady if i < len(d[s]))
    llm_per_s = sum(d.get("llm", [])[1:]) / total_audio
    return per_window / 1000 / audio + llm_per_s / 1000


def stage_ms(events) -> dict[str, float]:
    """Total compute milliseconds per compute stage (Token2Wav's halves count as Token2Wav)."""
    out = {s: 0.0 for s in COMPUTE_STAGES}
    for name, start, end in events:
        name = "token2wav" if name in T2W_HALVES else name
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
    seed: int,
    stats=(),
) -> Timings:
    """The Timings of one request from its stage events, the audio seconds of each Token2Wav
    output and the stages' stat records. Times are perf_counter seconds; ``first_audio`` /
    ``last_audio`` are seconds after ``start``."""
    ms = stage_ms(events)
    audio_s = sum(chunk_audio_s)
    since = lambda t: None if t is None else t - start  # noqa: E731
    return Timings.build(
        stats,
        seed=seed,
        wall_s=end - start,
        first_text_s=since(first_end(events, "llm")),
        first_codes_s=since(first_end(events, "tts")),
        time_to_first_audio_s=first_audio,
        llm_ms=ms["llm"],
        tts_ms=ms["tts"],
        token2wav_ms=ms["token2wav"],
        audio_s=audio_s,
        wall_rtf=last_audio / audio_s if audio_s > 0 and last_audio is not None else None,
        compute_rtf=compute_rtf(events, chunk_audio_s),
        events=tuple(events),
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
