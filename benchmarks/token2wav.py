"""Token2Wav speed on the CPU: ms per 1 s of audio (one steady 28-token window) for Token2Mel
(5 CFM steps, caches at the voice prompt's length) and for the HiFT vocoder (58 frames), at
each thread count, beside the PyTorch reference on the same random weights in the same run
(alternating A B A B), plus the vocoder's achieved GFLOP/s beside a measured sgemm rate.

    python benchmarks/token2wav.py [--model-dir DIR] [--device cpu] [--threads 1,2] [--chunks 5] [--steps 5]
        [--no-reference] [--out FILE]

--device puts Token2Mel on an accelerator (cuda:0, cann:0); the vocoder stays on the CPU with
--threads workers. The RTF printed is (Token2Mel + vocoder) ms per 1000 ms of audio.

Without --model-dir it writes a real-dimension token2wav-gguf (random weights, ~740 MB) into
~/.cache/llama-omni/bench-token2wav. Needs scripts/install-reference.sh for the comparison.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from common import timed, write_result  # noqa: E402

from llama_omni_py import modelgen  # noqa: E402
from llama_omni_py import modelspec as ms  # noqa: E402
from llama_omni_py._native import core  # noqa: E402

VOCODER_FRAMES, VOCODER_GFLOP = 58, 35.5  # docs/performance.md


def real_token2wav(cache: Path) -> Path:
    for f in ms.files_of("token2wav"):
        if not (cache / f.relpath).exists():
            modelgen.write_file(f, cache, ms.preset("real"), ms.build_vocab(False), seed=0)
    return cache / ms.T2W_DIR


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model-dir", help="module set (or token2wav-gguf dir) at real dimensions")
    ap.add_argument("--device", default="cpu", help="Token2Mel's device (the vocoder runs on the CPU)")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--chunks", type=int, default=5)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--no-reference", action="store_true")
    ap.add_argument("--out")
    args = ap.parse_args(argv)

    if args.model_dir:
        d = Path(args.model_dir)
        t2w = d if (d / "encoder.gguf").exists() else d / ms.T2W_DIR
    else:
        t2w = real_token2wav(Path.home() / ".cache" / "llama-omni" / "bench-token2wav")
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, 6561, 28).astype(np.int32)
    mel = rng.standard_normal((80, VOCODER_FRAMES)).astype(np.float32)
    src = (0.1 * rng.standard_normal(VOCODER_FRAMES * 480)).astype(np.float32)

    torch = flow = hift = ref_cache = spk_t = None
    if not args.no_reference:
        try:
            import torch
            from reference import flow as flow_ref
            from reference import hift as hift_ref
            from reference.token2wav_stream import prompt_caches

            flow = flow_ref.build_flow(str(t2w), args.steps)
            dit = flow.decoder.estimator
            ref_cache, spk_t = prompt_caches(
                str(t2w / "prompt_cache.gguf"), args.steps, len(dit.blocks), dit.blocks[0].attn.num_heads
            )
            hift = hift_ref.build(str(t2w / "hifigan2.gguf"))
            # Steady state: stream a few windows so the reference caches hold prompt + 100 recent
            # frames, as ours do (its bounding rule, applied by ReferenceStream).
            from reference.token2wav_stream import ReferenceStream

            warm = ReferenceStream(flow, hift, ref_cache, spk_t, args.steps)
            for _ in range(4):
                warm.stream(tokens, False)
            ref_cache = warm.cache
        except ImportError as exc:
            print(f"reference unavailable ({exc}); run scripts/install-reference.sh", file=sys.stderr)

    results = []
    window = rng.integers(0, 6561, 25).astype(np.int32)
    for threads in [int(t) for t in args.threads.split(",")]:
        # Ours: the real streaming path. Each timed push adds 25 tokens = one steady window
        # (Token2Mel with bounded prompt+recent caches, then the vocoder on 8 cached + 50 frames).
        # The reference cache policy, so both engines attend over the same bounded caches.
        stream = core.Token2Wav(str(t2w), args.device, args.steps, threads, cache_policy="reference")
        stream.push(window)  # the first window (no vocoder cache yet) is not steady state
        row = {"device": args.device, "threads": threads, "token2mel_ms": [], "vocoder_ms": []}
        row.update(ref_token2mel_ms=[], ref_vocoder_ms=[])
        if torch is not None:
            torch.set_num_threads(threads)
        for _ in range(2):  # A B A B
            for _ in range(args.chunks):
                stream.push(window)
                row["token2mel_ms"].append(stream.last_timings["token2mel_ms"])
                row["vocoder_ms"].append(stream.last_timings["vocoder_ms"])
            if flow is not None:
                with torch.inference_mode():
                    tk = torch.from_numpy(tokens.astype(np.int64))[None]
                    row["ref_token2mel_ms"] += timed(
                        lambda: flow.inference_chunk(
                            tk,
                            spk_t,
                            {k: v.clone() for k, v in ref_cache.items()},
                            last_chunk=False,
                            n_timesteps=args.steps,
                        ),
                        args.chunks,
                    )
                    m, s = torch.from_numpy(mel)[None], torch.from_numpy(src)[None, None]
                    row["ref_vocoder_ms"] += timed(lambda: hift.decode(m, s), args.chunks)
        summary = {k + "_median": statistics.median(v) for k, v in row.items() if isinstance(v, list) and v}
        row.update(summary)
        row["total_ms"] = row["token2mel_ms_median"] + row["vocoder_ms_median"]
        row["rtf"] = row["total_ms"] / 1000.0  # one push = 25 tokens = 1 s of audio
        row["vocoder_gflops"] = VOCODER_GFLOP / row["vocoder_ms_median"] * 1000
        row["sgemm_gflops"] = core.internal.sgemm_gflops(threads)
        results.append(row)
        ref = ""
        if row.get("ref_token2mel_ms_median"):
            ref = (
                f" | PyTorch: token2mel {row['ref_token2mel_ms_median']:.0f} ms, vocoder "
                f"{row['ref_vocoder_ms_median']:.0f} ms"
            )
        print(
            f"threads {threads}: token2mel {row['token2mel_ms_median']:.0f} ms, "
            f"vocoder {row['vocoder_ms_median']:.0f} ms, "
            f"total {row['total_ms']:.0f} ms per 1 s of audio (RTF {row['rtf']:.3f}){ref}; "
            f"vocoder {row['vocoder_gflops']:.0f} GFLOP/s "
            f"vs sgemm {row['sgemm_gflops']:.0f}"
        )

    write_result(
        "token2wav",
        {"device": args.device, "steps": args.steps, "results": results},
        [t2w / f"{s}.gguf" for s in ms.T2W_FILES],
        args.out,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
