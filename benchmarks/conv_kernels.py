"""Convolution kernels on this CPU: GFLOP/s of every kernel set's register tiles and of the
im2col + sgemm route, on the shapes the vocoder and the native Token2Mel engines run, beside the
BLAS's plain sgemm rate; rounds alternate (A B A B) so drift hits every row alike.

    python benchmarks/conv_kernels.py [--threads 1,2] [--rounds 2] [--reps 10] [--out FILE]

A route is kept where it is fastest: a set whose tiles lose to im2col + sgemm on these shapes
runs its convolutions through sgemm (Kernels::blas_convs, docs/cpu-kernels.md). Set
OPENBLAS_CORETYPE (e.g. Nehalem, Sandybridge) to see what the sgemm route gives on CPUs older
than this one.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import kernel_set, write_result  # noqa: E402

from llama_omni_py._native import core  # noqa: E402

# (name, out channels, in channels, taps, output columns)
SHAPES = [
    ("vocoder stage 0 resblock, k=3", 256, 256, 3, 464),
    ("vocoder stage 0 resblock, k=11", 256, 256, 11, 464),
    ("vocoder stage 1 resblock, k=7", 128, 128, 7, 2320),
    ("vocoder stage 2 resblock, k=11", 64, 64, 11, 6961),
    ("vocoder conv_pre", 512, 80, 7, 58),
    ("vocoder conv_post", 18, 64, 7, 6961),
    ("DiT qkv (CFG batch)", 1536, 512, 1, 100),
    ("DiT mlp.fc2", 512, 2048, 1, 100),
    ("DiT conv block, k=3", 512, 512, 3, 50),
    ("conformer feed-forward w_1", 2048, 512, 1, 50),
]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--reps", type=int, default=10, help="convolutions per timing")
    ap.add_argument("--out", help="JSON result path (default benchmarks/results/conv_kernels-<time>.json)")
    args = ap.parse_args(argv)
    internal = core.internal
    routes = [(s, "tiles") for s in internal.cpu_isas()] + [(internal.cpu_isas()[-1], "sgemm")]
    threads = [int(t) for t in args.threads.split(",")]
    gf: dict = {}
    sgemm: dict = {t: [] for t in threads}
    for _ in range(args.rounds):
        for t in threads:
            sgemm[t].append(internal.sgemm_gflops(t))
            for name, out, inp, k, n in SHAPES:
                for isa, route in routes:
                    with kernel_set(isa):
                        v = internal.conv_gflops(t, out, inp, k, n, args.reps, route=route)
                    gf.setdefault((name, t, isa, route), []).append(v)
    labels = [f"{isa} tiles" if route == "tiles" else "im2col+sgemm" for isa, route in routes]
    rows = []
    for t in threads:
        s = statistics.median(sgemm[t])
        blas = internal.blas_description()
        print(f"\nthreads {t}: GFLOP/s (median of {args.rounds} rounds); plain sgemm {s:.0f} ({blas})")
        print(f"{'shape':<34}" + "".join(f"{lab:>15}" for lab in labels))
        for name, *_ in SHAPES:
            vals = [statistics.median(gf[(name, t, isa, route)]) for isa, route in routes]
            print(f"{name:<34}" + "".join(f"{v:>15.1f}" for v in vals))
            rows.append({"shape": name, "threads": t, "sgemm_gflops": s, **dict(zip(labels, vals))})
    write_result("conv_kernels", {"rows": rows, "routes": labels, "shapes": SHAPES}, out=args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
