"""The numbers of one duplex run, from its per-unit records (docs/benchmark-schema.md, "Duplex").

Two RTFs, as llama.cpp-omni's duplex benchmarks define them:

* **e2e SPEAK->WAV RTF** (perf-duplex's): per speaking turn (consecutive speaking units), the time
  from the turn's first push to its last audio, over the seconds of audio it produced; pooled over
  the turns (sum of spans / sum of audio). Pushing one unit a second bounds it from below by
  about (n - 1) / n for a turn of n units.
* **core-frame pooled RTF** (the current official one): sum of per-unit compute over sum of audio,
  counting only the *core* units: speaking, not the first of their turn (the head) and not the one
  that carries the end-of-turn flush (the tail). Each core unit must carry exactly 1 s (24000
  samples at 24 kHz).

A unit's compute is everything run for it, in the order it runs: audio encoder + vision encoder
(one after the other on the LLM thread), prefill, decode, TTS, Token2Wav.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from ..constants import OUTPUT_SAMPLE_RATE

STAGES = ("apm", "vpm", "prefill", "decode", "tts", "token2wav")
# what each of the session's three threads runs for a unit (they overlap across units)
THREADS = {"llm": ("apm", "vpm", "prefill", "decode"), "tts": ("tts",), "token2wav": ("token2wav",)}
LATE_PUSH_MS = 100.0  # a push held up longer than this means the input backed up


def compute_ms(frame: dict) -> float:
    return sum(frame["stage_ms"][s] for s in STAGES)


def _stats(values: Sequence[float]) -> dict:
    v = sorted(values)
    if not v:
        return {"p50": None, "p95": None, "max": None, "mean": None}
    p95 = v[min(len(v) - 1, max(0, round(0.95 * len(v) + 0.5) - 1))]  # nearest rank
    return {"p50": statistics.median(v), "p95": p95, "max": v[-1], "mean": statistics.fmean(v)}


def speaking_turns(frames: list[dict]) -> list[list[dict]]:
    """Runs of consecutive speaking units; a unit with end_of_turn closes its run."""
    turns: list[list[dict]] = []
    current: list[dict] = []
    for f in frames:
        if f["is_listen"]:
            if current:
                turns.append(current)
            current = []
            continue
        current.append(f)
        if f["end_of_turn"]:
            turns.append(current)
            current = []
    if current:
        turns.append(current)
    return turns


def core_frames(frames: list[dict]) -> list[dict]:
    """Speaking units that are neither the head of their turn nor its flush tail."""
    return [f for turn in speaking_turns(frames) for f in turn[1:] if not f["end_of_turn"]]


def e2e_speak_wav_rtf(frames: list[dict]) -> dict:
    spans = audio = 0.0
    per_turn = []
    for turn in speaking_turns(frames):
        span = turn[-1]["t_result_s"] - turn[0]["t_push_s"]
        seconds = sum(f["audio_samples"] for f in turn) / OUTPUT_SAMPLE_RATE
        if seconds > 0:
            spans, audio = spans + span, audio + seconds
            per_turn.append({"units": len(turn), "span_s": span, "audio_s": seconds, "rtf": span / seconds})
    return {"rtf": spans / audio if audio else None, "turns": per_turn}


PLAYOUT_DELAY_S = 0.3  # the duplex page's playout buffer (server/gateway/static/duplex.js)


def playback(frames: list[dict], delay_s: float = PLAYOUT_DELAY_S) -> dict:
    """Every unit's audio played back to back as the duplex page plays it: the first result, and
    the first after an underrun, starts ``delay_s`` after it arrives; every other one right after
    the audio before it. A gap opens wherever a result arrives after that audio has run out (a
    stutter). ``buffer_needed_s``: the smallest delay that plays the whole run without a gap."""
    end, gaps = None, []
    for f in frames:
        if end is None or f["t_result_s"] > end:
            start = f["t_result_s"] + delay_s
            if end is not None:
                gaps.append(start - end)
        else:
            start = end
        end = start + f["audio_samples"] / OUTPUT_SAMPLE_RATE
    return {
        "delay_s": delay_s,
        "gaps": len(gaps),
        "gap_s": sum(gaps),
        "longest_gap_s": max(gaps, default=0.0),
        "buffer_needed_s": buffer_needed(frames),
    }


def buffer_needed(frames: list[dict]) -> float:
    """How late the first second must start so that every later one is there before the audio
    ahead of it has run out: max over units of (arrival - first arrival - audio before it)."""
    if not frames:
        return 0.0
    before, need = 0.0, 0.0
    for f in frames:
        need = max(need, f["t_result_s"] - frames[0]["t_result_s"] - before)
        before += f["audio_samples"] / OUTPUT_SAMPLE_RATE
    return need


def summarise(frames: list[dict], interval_s: float) -> dict:
    """The run's metrics and validity (data_valid: every unit answered, every core unit exactly
    one second; realtime_eligible: no push held up, no playback gap, no unit over the interval)."""
    costs = [compute_ms(f) for f in frames]
    core = core_frames(frames)
    core_audio = sum(f["audio_samples"] for f in core) / OUTPUT_SAMPLE_RATE
    latencies = [(f["t_result_s"] - f["t_push_s"]) * 1000 for f in frames if not f["is_listen"] and f["text_chars"] > 0]
    late = [f["push_late_ms"] for f in frames]
    stutters = [f["index"] for f, c in zip(frames, costs) if c > interval_s * 1000]
    bad_core = [f["index"] for f in core if f["audio_samples"] != OUTPUT_SAMPLE_RATE]
    play = playback(frames)
    held = [f["index"] for f in frames if f["push_late_ms"] > LATE_PUSH_MS]
    threads = {
        name: _stats([sum(f["stage_ms"][s] for s in stages) for f in frames]) for name, stages in THREADS.items()
    }
    return {
        "units": len(frames),
        "listening_units": sum(f["is_listen"] for f in frames),
        "speaking_units": sum(not f["is_listen"] for f in frames),
        "turns": len(speaking_turns(frames)),
        "unit_compute_ms": _stats(costs),
        "stutter_units": stutters,
        "playback": play,
        "stage_ms": {s: _stats([f["stage_ms"][s] for f in frames]) for s in STAGES},
        "speaking_stage_ms": {s: _stats([f["stage_ms"][s] for f in frames if not f["is_listen"]]) for s in STAGES},
        "thread_ms": threads,
        "e2e_speak_wav": e2e_speak_wav_rtf(frames),
        "core": {
            "frames": len(core),
            "rtf": sum(compute_ms(f) for f in core) / 1000 / core_audio if core_audio else None,
            "not_one_second": bad_core,
        },
        "speak_to_wav_ms": {
            "mean": statistics.fmean(latencies) if latencies else None,
            "median": statistics.median(latencies) if latencies else None,
            "units": len(latencies),
        },
        "push_late_ms": {"max": max(late, default=0.0), "held_up": held},
        "data_valid": bool(frames) and not bad_core and all(f["audio_samples"] > 0 for f in frames),
        "realtime_eligible": not held and not play["gaps"] and not stutters,
    }


def _fmt(v, unit: str = "", digits: int = 0) -> str:
    return "n/a" if v is None else f"{v:.{digits}f}{unit}"


def headline(s: dict) -> str:
    c, e2e = s["unit_compute_ms"], s["e2e_speak_wav"]["rtf"]
    return (
        f"{s['units']} units ({s['speaking_units']} speaking, {s['turns']} turns); compute per unit "
        f"p50 {_fmt(c['p50'], ' ms')}, p95 {_fmt(c['p95'], ' ms')}, max {_fmt(c['max'], ' ms')}; "
        f"{len(s['stutter_units'])} units over the interval, {s['playback']['gaps']} playback gaps "
        f"({s['playback']['gap_s']:.1f} s behind a {s['playback']['delay_s']:.1f} s buffer; gapless needs "
        f"{s['playback']['buffer_needed_s']:.2f} s); e2e SPEAK->WAV RTF {_fmt(e2e, '', 3)}; core RTF "
        f"{_fmt(s['core']['rtf'], '', 3)} over {s['core']['frames']} core units; SPEAK->wav "
        f"median {_fmt(s['speak_to_wav_ms']['median'], ' ms')}"
    )
