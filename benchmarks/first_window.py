"""Token2Wav's first window shortened (``Token2WavConfig.first_window_codes``): how much sooner the
first audio comes, and how far the whole reply's audio moves from the default schedule's.

    python benchmarks/first_window.py [--model-dir DIR] [--codes 300] [--windows 25,16,12,8,5]
                                      [--threads 2] [--rounds 3] [--out FILE]

The same speech codes go through a Token2Wav stream once per first-window size, pushed as the
pipeline pushes them (the first window's codes, then 25 at a time, then the rest). For each size:

* latency: the codes the first window waits for (k codes = k / 25 s of speech the TTS must
  produce first) and the compute of that first push (Token2Mel + vocoder, warm, median of
  ``--rounds``), next to the default's;
* quality: relative RMS distance ||a - b|| / ||b|| between its audio and the default schedule's
  (b) over the whole reply, over the first second and over the rest, with the initial noise at
  zero (the schedule's own effect) and at temperature 1 (as deployed; the noise is drawn frame by
  frame in the same order under both schedules).

Without --model-dir a real-dimension token2wav-gguf (random weights) is written to
~/.cache/llama-omni/bench-token2wav-first-window. Results: docs/token2wav-streaming.md.
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

from llama_omni_py import Token2Wav, make_models  # noqa: E402
from llama_omni_py.config import Token2WavConfig  # noqa: E402
from llama_omni_py.constants import CODES_PER_SECOND, OUTPUT_SAMPLE_RATE  # noqa: E402
from llama_omni_py.env import cache_dir


def stream(t2w: Token2Wav, codes: np.ndarray, first: int) -> tuple[np.ndarray, float]:
    """The reply's audio and the ms of the first push (the first window's compute)."""
    t2w.reset()
    t0 = time.perf_counter()
    parts = [t2w.push(codes[:first])]
    first_ms = (time.perf_counter() - t0) * 1000
    at = first
    while codes.size - at >= CODES_PER_SECOND:
        parts.append(t2w.push(codes[at : at + CODES_PER_SECOND]))
        at += CODES_PER_SECOND
    parts.append(t2w.push(codes[at:], final=True))
    return np.concatenate(parts), first_ms


def rel(a: np.ndarray, b: np.ndarray) -> float:
    n = min(a.size, b.size)
    return float(np.linalg.norm(a[:n] - b[:n]) / max(np.linalg.norm(b[:n]), 1e-12))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model-dir", help="a module set or its token2wav-gguf (default: a generated real-size one)")
    ap.add_argument("--codes", type=int, default=300, help="speech codes in the reply (25 per second)")
    ap.add_argument("--windows", default="25,16,12,8,5", help="first-window sizes to compare (25 = default)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3, help="timed repeats of each stream (after a warm-up)")
    ap.add_argument("--policy", default="llama.cpp-omni", choices=("llama.cpp-omni", "reference"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out")
    a = ap.parse_args()
    model_dir = Path(a.model_dir) if a.model_dir else cache_dir().parent / "llama-omni" / "bench-token2wav-first-window"
    if a.model_dir is None and not (model_dir / "token2wav-gguf").exists():
        print(f"writing a real-dimension token2wav-gguf to {model_dir} ...", flush=True)
        make_models(model_dir, "real", only=["token2wav"], seed=0)
    sizes = [int(k) for k in a.windows.split(",")]
    codes = np.random.default_rng(a.seed).integers(0, 6561, a.codes).astype(np.int32)
    rows, audio = [], {}
    for temperature in (0.0, 1.0):
        for k in sizes:
            cfg = Token2WavConfig(
                threads=a.threads, first_window_codes=k, temperature=temperature, cache_policy=a.policy
            )
            t2w = Token2Wav(model_dir, "cpu", cfg)
            stream(t2w, codes, k)  # warm-up
            runs = [stream(t2w, codes, k) for _ in range(a.rounds)]
            audio[(temperature, k)] = runs[0][0]
            assert all(np.array_equal(r[0], runs[0][0]) for r in runs), "a stream is not reproducible"
            first_ms = statistics.median(r[1] for r in runs)
            rows.append({"temperature": temperature, "first_window_codes": k, "first_push_ms": first_ms})
            t2w.close()
    sec = OUTPUT_SAMPLE_RATE
    for row in rows:
        ref = audio[(row["temperature"], 25)]
        out = audio[(row["temperature"], row["first_window_codes"])]
        row.update(
            samples=int(out.size),
            dist_whole=rel(out, ref),
            dist_first_second=rel(out[:sec], ref[:sec]),
            dist_after_first_second=rel(out[sec:], ref[sec:]),
            waits_s=row["first_window_codes"] / CODES_PER_SECOND,
        )
    print(f"{a.codes} codes ({a.codes / CODES_PER_SECOND:.1f} s), policy {a.policy}, {a.threads} threads")
    print("| temperature | first window (codes) | waits for | first push (ms) | distance: whole / first s / rest |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['temperature']:g} | {r['first_window_codes']} | {r['waits_s']:.2f} s | {r['first_push_ms']:.0f} | "
            f"{r['dist_whole']:.3f} / {r['dist_first_second']:.3f} / {r['dist_after_first_second']:.3f} |"
        )
    t2w_dir = model_dir if (model_dir / "encoder.gguf").exists() else model_dir / "token2wav-gguf"
    write_result("first_window", {"args": vars(a), "rows": rows}, sorted(t2w_dir.glob("*.gguf")), a.out)


if __name__ == "__main__":
    main()
