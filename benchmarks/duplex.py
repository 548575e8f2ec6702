"""Full-duplex speed: units of 1 s of input audio pushed in real time order through
``OmniSession.duplex()``; per unit the wall time from send to result and the stage costs, and
the duplex RTF (wall time of the whole run / seconds of audio sent: below 1 keeps up).

    python benchmarks/duplex.py --model-dir DIR [--device cpu] [--units 20] [--out FILE]

Units are sent as fast as results come back (send one ahead, then one per result), so the run
measures throughput; a live microphone would also wait for each second of input. Random
weights decide listen or speak at random; the split is reported.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import write_result  # noqa: E402

import llama_omni_py as omni  # noqa: E402
from llama_omni_py.duplex.session import FIRST_UNIT_SAMPLES, UNIT_SAMPLES  # noqa: E402


def _unit(i: int, n: int) -> np.ndarray:
    t = np.arange(n) / 16000
    rng = np.random.default_rng(i)
    return (0.2 * np.sin(2 * np.pi * (180 + 20 * i) * t) + 0.02 * rng.standard_normal(n)).astype(np.float32)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model-dir", required=True)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--units", type=int, default=20)
    ap.add_argument("--threads", type=int, default=None, help="LLM/TTS threads (default: libllama's)")
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    if args.units < 2:
        ap.error("--units must be at least 2")

    cfg = omni.SessionConfig(threads=args.threads)
    units = [_unit(0, FIRST_UNIT_SAMPLES)] + [_unit(i, UNIT_SAMPLES) for i in range(1, args.units)]
    t_load = time.perf_counter()
    with omni.OmniSession(args.model_dir, args.device, cfg) as s, s.duplex() as d:
        load_s = time.perf_counter() - t_load
        sent, results = [], []
        t0 = time.perf_counter()
        d.send(units[0])
        sent.append(time.perf_counter())
        it = d.results()
        for i in range(1, args.units + 1):
            if i < args.units:
                d.send(units[i])  # one unit ahead, so the next prefill overlaps this one's speech
                sent.append(time.perf_counter())
            r = next(it)
            results.append((r, time.perf_counter() - sent[i - 1]))
        wall_s = time.perf_counter() - t0
    audio_in_s = sum(u.size for u in units) / 16000
    per_unit_ms = [1000 * dt for _, dt in results]
    stage = {
        k: statistics.median(r.timings[k] for r, _ in results if k in r.timings)
        for k in ("cost_llm_ms", "cost_tts_ms", "cost_token2wav_ms")
        if any(k in r.timings for r, _ in results)
    }
    res = {
        "device": args.device,
        "units": args.units,
        "load_s": load_s,
        "wall_s": wall_s,
        "audio_in_s": audio_in_s,
        "rtf": wall_s / audio_in_s,
        "first_result_ms": per_unit_ms[0],
        "unit_ms_median": statistics.median(per_unit_ms[1:]),
        "unit_ms_max": max(per_unit_ms[1:]),
        "speaking_units": sum(1 for r, _ in results if not r.is_listen),
        "stage_ms_median": stage,
    }
    print(
        f"duplex on {args.device}: {args.units} units ({audio_in_s:.1f} s of input) in {wall_s:.2f} s, "
        f"RTF {res['rtf']:.3f}; first result {res['first_result_ms']:.0f} ms, then median "
        f"{res['unit_ms_median']:.0f} ms per unit (max {res['unit_ms_max']:.0f}); "
        f"{res['speaking_units']} units spoke; stage medians {stage}"
    )
    write_result("duplex", res, [], args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
