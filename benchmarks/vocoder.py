"""HiFT vocoder speed: ms per 1 s of audio (a steady streaming chunk: 8 cached + 50 new mel
frames = 58 frames), at each thread count, beside the PyTorch reference on the same weights
in the same run (alternating A B A B), and the achieved GFLOP/s beside a measured sgemm rate.

    python benchmarks/vocoder.py [--model-dir DIR] [--threads 1,2] [--chunks 7] [--out FILE]

Without --model-dir it writes the real-dimension hifigan2.gguf (random weights) to a cache dir.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))

from common import timed, write_result  # noqa: E402

from llama_omni_py._native import core  # noqa: E402
from llama_omni_py.modelset import generate as modelgen  # noqa: E402
from llama_omni_py.modelset import spec as ms  # noqa: E402

FRAMES = 58
GFLOP_PER_CHUNK = 35.5  # HiFT on 58 frames (docs/performance.md)


def _real_hifigan(cache: Path) -> Path:
    f = next(f for f in ms.FILES if f.key == "token2wav.hifigan2")
    path = cache / f.relpath
    if not path.exists():
        modelgen.write_file(f, cache, ms.preset("real"), ms.build_vocab(False), seed=0)
    return path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model-dir", help="module set with token2wav-gguf/hifigan2.gguf (real dimensions)")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--chunks", type=int, default=7, help="timed chunks per implementation and round")
    ap.add_argument("--no-reference", action="store_true", help="skip the PyTorch reference")
    ap.add_argument("--out", help="JSON result path (default benchmarks/results/vocoder-<time>.json)")
    args = ap.parse_args(argv)

    path = (
        (Path(args.model_dir) / ms.T2W_DIR / "hifigan2.gguf")
        if args.model_dir
        else _real_hifigan(Path.home() / ".cache" / "llama-omni" / "bench-hifigan")
    )
    rng = np.random.default_rng(0)
    mel = rng.standard_normal((80, FRAMES)).astype(np.float32)
    src = (0.1 * rng.standard_normal(FRAMES * 480)).astype(np.float32)

    ref_model = None
    if not args.no_reference:
        try:
            import torch
            from reference import hift as ref

            ref_model = ref.build(str(path))
        except ImportError as exc:
            print(f"reference unavailable ({exc}); run scripts/install-reference.sh", file=sys.stderr)

    results = []
    for threads in [int(t) for t in args.threads.split(",")]:
        voc = core.internal.HiftVocoder(str(path), threads)
        row = {"threads": threads, "ours_ms": [], "reference_ms": []}
        if ref_model is not None:
            torch.set_num_threads(threads)
        for _ in range(2):  # two alternating rounds: A B A B
            row["ours_ms"] += timed(lambda: voc.decode(mel, src), args.chunks)
            if ref_model is not None:
                with torch.inference_mode():
                    m, s = torch.from_numpy(mel)[None], torch.from_numpy(src)[None, None]
                    row["reference_ms"] += timed(lambda: ref_model.decode(m, s), args.chunks)
        row["ours_median_ms"] = statistics.median(row["ours_ms"])
        row["ours_gflops"] = GFLOP_PER_CHUNK / row["ours_median_ms"] * 1000
        row["sgemm_gflops"] = core.internal.sgemm_gflops(threads)
        row["share_of_sgemm"] = row["ours_gflops"] / row["sgemm_gflops"]
        if row["reference_ms"]:
            row["reference_median_ms"] = statistics.median(row["reference_ms"])
            row["speedup_vs_reference"] = row["reference_median_ms"] / row["ours_median_ms"]
        results.append(row)
        ref_txt = (
            f", PyTorch {row['reference_median_ms']:.0f} ms ({row['speedup_vs_reference']:.2f}x)"
            if row["reference_ms"]
            else ""
        )
        print(
            f"threads {threads}: vocoder {row['ours_median_ms']:.0f} ms per 1 s of audio{ref_txt}; "
            f"{row['ours_gflops']:.0f} GFLOP/s = {100 * row['share_of_sgemm']:.0f}% of sgemm "
            f"({row['sgemm_gflops']:.0f} GFLOP/s)"
        )

    write_result("vocoder", {"frames_per_chunk": FRAMES, "results": results}, [path], args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
