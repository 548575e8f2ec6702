"""One request's numbers and validity gates, from the pipeline's stage events.

Gates follow the validity rules of llama.cpp-omni's official RTF benchmark (docs/benchmark-schema.md):
* ``no_dropped_input``: every media input was encoded and every LLM chunk went through TTS and
  Token2Wav to the caller, ending with the final flush;
* ``steady_chunk_samples``: at least one steady chunk (a turn's first chunk and the final flush
  are excluded), each exactly 24000 samples (25 speech codes = 1 s at 24 kHz);
* ``t2w_queue_wait`` (realtime): no chunk waited 1 s or more in the Token2Wav input queue.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..constants import OUTPUT_SAMPLE_RATE
from ..orchestration.timings import stage_durations, token2wav_consumer

STEADY_SAMPLES = OUTPUT_SAMPLE_RATE  # one Token2Wav window: 25 codes
T2W_QUEUE_LIMIT_MS = 1000.0
DATA_GATES = ("no_dropped_input", "steady_chunk_samples")
REALTIME_GATES = ("t2w_queue_wait",)


@dataclass
class Chunk:
    """What the caller saw of one SpeechChunk: its sample count, when it arrived (seconds after
    the request started) and whether it was the final flush."""

    samples: int
    t_s: float
    is_final: bool


def _ends(events, name: str) -> list[float]:
    return [e for n, _, e in events if n == name]


def queue_residence_ms(events, producer: str, consumer: str) -> list[float]:
    """Per item, how long it sat in the queue between two stages: from the producer's put
    (the end of its ``.blocked`` event) to the consumer's get (the end of its ``.wait``)."""
    put, got = _ends(events, producer + ".blocked"), _ends(events, consumer + ".wait")
    return [max(0.0, (g - p) * 1000) for p, g in zip(put, got)]


def _gate(ok: bool, detail: str) -> dict:
    return {"ok": bool(ok), "detail": detail}


def gates(chunks: list[Chunk], durations: dict, t2w_queue_ms: list[float], media: dict[str, bool]) -> dict:
    n = len(chunks)
    # Every code chunk the TTS handed on became one Token2Wav output the caller received.
    counts = {s: len(durations.get(s, [])) for s in ("tts", "token2wav")}
    missing_media = [k for k, ok in media.items() if not ok]
    dropped = missing_media or any(c != n for c in counts.values()) or not n or not chunks[-1].is_final
    steady = chunks[1:-1]
    bad = [i + 1 for i, c in enumerate(steady) if c.samples != STEADY_SAMPLES]
    worst = max(t2w_queue_ms, default=0.0)
    return {
        "no_dropped_input": _gate(
            not dropped,
            f"chunks received {n}, items per stage {counts}, last final "
            f"{bool(n) and chunks[-1].is_final}, media not encoded {missing_media}",
        ),
        "steady_chunk_samples": _gate(
            steady and not bad,
            f"{len(steady)} steady chunks; not {STEADY_SAMPLES} samples: chunks {bad}"
            if bad or not steady
            else f"{len(steady)} steady chunks of {STEADY_SAMPLES} samples",
        ),
        "t2w_queue_wait": _gate(
            worst < T2W_QUEUE_LIMIT_MS,
            f"longest Token2Wav queue wait {worst:.0f} ms (limit {T2W_QUEUE_LIMIT_MS:.0f} ms)",
        ),
    }


def request_record(prompt: str, chunks: list[Chunk], events, timings: dict, media: dict[str, bool]) -> dict:
    """The JSON record of one request (see docs/benchmark-schema.md)."""
    d = stage_durations(events)
    t2w_q = queue_residence_ms(events, "tts", token2wav_consumer(events))
    tts_q = queue_residence_ms(events, "llm", "tts")
    # Window i: Token2Wav item i from TTS item i; the LLM's decode time (its first item, which
    # holds the prefill, left out) is spread over the audio, as compute_rtf does.
    total = sum(c.samples for c in chunks)
    llm_decode = sum(d.get("llm", [])[1:])
    per_chunk = [
        {
            "samples": c.samples,
            "t_s": c.t_s,
            "is_final": c.is_final,
            "llm_ms": llm_decode * c.samples / total if total else None,
            **{f"{s}_ms": (d[s][i] if i < len(d.get(s, [])) else None) for s in ("tts", "token2wav")},
            "tts_queue_ms": None,  # text chunks do not line up with windows: see queue_waits
            "t2w_queue_ms": t2w_q[i] if i < len(t2w_q) else None,
        }
        for i, c in enumerate(chunks)
    ]
    stage_waits = {
        name: {"total_ms": sum(v), "max_ms": max(v, default=0.0)}
        for name, v in sorted(d.items())
        if name.endswith((".wait", ".blocked"))
    }
    g = gates(chunks, d, t2w_q, media)
    vision = (
        {"vision": {"slices": timings["vision_slices"], "tokens": timings.get("vision_tokens", 0)}}
        if timings.get("vision_slices")
        else {}
    )
    return {
        "prompt": prompt,
        "audio_s": timings.get("audio_s", 0.0),
        "wall_s": timings.get("wall_s"),
        "wall_rtf": timings.get("wall_rtf"),
        "compute_rtf": timings.get("compute_rtf"),
        "time_to_first_audio_s": timings.get("time_to_first_audio_s"),
        "first_audio_steps": {
            "prefill_ms": timings.get("prefill_ms"),
            "first_text_s": timings.get("first_text_s"),
            "first_codes_s": timings.get("first_codes_s"),
            "first_audio_s": timings.get("time_to_first_audio_s"),
        },
        "stage_ms": {k: timings[k] for k in ("llm_ms", "tts_ms", "token2wav_ms", "apm_ms", "vpm_ms") if k in timings},
        "queue_waits": {
            "tts_queue_max_ms": max(tts_q, default=0.0),
            "t2w_queue_max_ms": max(t2w_q, default=0.0),
            "stages": stage_waits,
        },
        "chunks": per_chunk,
        "gates": g,
        "data_valid": all(g[k]["ok"] for k in DATA_GATES),
        "realtime_eligible": all(g[k]["ok"] for k in REALTIME_GATES),
        **vision,  # the vision encoder's inputs (overviews and slices) and their rows
    }
