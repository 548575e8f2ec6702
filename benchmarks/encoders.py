"""Encoder speed at real dimensions: our VPM vs upstream llama.cpp's libmtmd on the same vision
file and 448 x 448 image (alternating, so machine noise hits both), and the APM per 10 s of audio.

    python benchmarks/encoders.py --model-dir DIR [--threads 2] [--repeats 3] [--out FILE]
    python benchmarks/encoders.py --model-dir DIR --scaling 1,2 [--repeats 3]

``--scaling``: the VPM on a 540x960 frame (the duplex case's shape) at each thread count,
alternating, quiet and then beside one single-threaded busy process: whether more encoder
threads still pay when another process shares the cores.

    python benchmarks/encoders.py --model-dir DIR --slices [--threads 2] [--repeats 3]

``--slices``: a 1344x1008 image (``llama-omni bench``'s "page" prompt) sliced as MiniCPM-o's
processor does (overview 518x392, 3 x 2 slices of 420x476), alternating round by round: the
preprocessing (resize, crop, normalise), the overview, the 6 slices in one batched evaluation and
one at a time, and the whole ``encode_sliced`` call. Needs only the vision file
(``make-models DIR --size real --only vpm``).

Needs a real-dimension set (`llama-omni make-models DIR --size real --only llm,apm,vpm`).
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests" / "support"))  # reference.mtmd drives libmtmd through ctypes

from common import busy_competitor, write_result  # noqa: E402

from llama_omni_py.modelset.layout import discover  # noqa: E402
from llama_omni_py.modules.apm import AudioEncoder  # noqa: E402
from llama_omni_py.modules.vpm import ImageEncoder  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model-dir", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--scaling", help="comma list of thread counts: VPM scaling, quiet and beside a busy process")
    ap.add_argument("--slices", action="store_true", help="time per slice and per sliced image (1344x1008)")
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    counts = [int(t) for t in args.scaling.split(",") if t.strip().isdigit() and int(t) > 0] if args.scaling else []
    if args.scaling and len(counts) != len(args.scaling.split(",")):
        ap.error(f"--scaling: a comma list of positive thread counts, got {args.scaling!r}")
    if args.slices:
        return slices(args)
    s = discover(args.model_dir)
    if counts:
        return scaling(args, s, counts)
    from reference.mtmd import UpstreamVision

    image = (np.random.default_rng(0).random((448, 448, 3)) * 255).astype(np.uint8)
    ours, theirs = (
        ImageEncoder(args.model_dir, threads=args.threads),
        UpstreamVision(str(s.llm), str(s.path("vpm")), args.threads),
    )
    t_ours, t_theirs = [], []
    a, b = ours.encode(image), theirs.encode(image)[0]  # warm-up, and a sanity check
    for _ in range(args.repeats):
        for fn, acc in ((lambda: ours.encode(image), t_ours), (lambda: theirs.encode(image), t_theirs)):
            t0 = time.perf_counter()
            fn()
            acc.append(time.perf_counter() - t0)
    theirs.close()

    apm = AudioEncoder(args.model_dir, threads=args.threads)
    audio = (0.1 * np.random.default_rng(0).standard_normal(16000 * 10)).astype(np.float32)
    apm.encode(audio)
    t_apm = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        apm.encode(audio)
        t_apm.append(time.perf_counter() - t0)

    res = {
        "threads": args.threads,
        "vpm_s_ours": statistics.median(t_ours),
        "vpm_s_mtmd": statistics.median(t_theirs),
        "vpm_rel_diff_vs_mtmd": float(np.abs(a - b).max() / np.abs(b).max()),
        "apm_s_per_10s_audio": statistics.median(t_apm),
    }
    print(
        f"VPM 448x448 ({args.threads} threads): ours {res['vpm_s_ours']:.2f} s, upstream libmtmd "
        f"{res['vpm_s_mtmd']:.2f} s (ratio {res['vpm_s_ours'] / res['vpm_s_mtmd']:.2f}); "
        f"max diff {res['vpm_rel_diff_vs_mtmd']:.1e} of max |x|"
    )
    print(f"APM: {res['apm_s_per_10s_audio']:.2f} s per 10 s of audio")
    write_result("encoders", {**res}, [s.path("vpm"), s.path("apm")], args.out)
    return 0


def scaling(args, s, counts: list[int]) -> int:
    frame = (np.random.default_rng(0).random((540, 960, 3)) * 255).astype(np.uint8)
    encoders = {t: ImageEncoder(args.model_dir, threads=t) for t in counts}
    for enc in encoders.values():
        enc.encode(frame)  # warm-up
    res = {"frame": [540, 960], "repeats": args.repeats}
    for load in ("quiet", "busy"):
        times: dict[int, list[float]] = {t: [] for t in counts}
        with busy_competitor(None) if load == "busy" else contextlib.nullcontext():
            for _ in range(args.repeats):
                for t, enc in encoders.items():
                    t0 = time.perf_counter()
                    enc.encode(frame)
                    times[t].append(time.perf_counter() - t0)
        res[f"vpm_s_{load}"] = {str(t): statistics.median(v) for t, v in times.items()}
        print(f"VPM 540x960, {load}: " + ", ".join(f"{t} threads {res[f'vpm_s_{load}'][str(t)]:.2f} s" for t in counts))
    write_result("encoders_scaling", res, [s.path("vpm")], args.out)
    return 0


def slices(args) -> int:
    from llama_omni_py.bench.prompts import PROMPTS
    from llama_omni_py.modelset import spec as ms

    image = PROMPTS["page"].inputs()["image"]
    enc = ImageEncoder(args.model_dir, threads=args.threads)

    def preprocess():
        cut = enc.slice(image)
        return cut, [enc.normalize(x) for x in (cut.overview, *cut.slices)]

    cut, pixels = preprocess()
    overview, parts = pixels[0], pixels[1:]

    def one_at_a_time():
        return [enc.vpm.encode(x) for x in parts]

    # the VPM cases take pixels already cut and normalised; "sliced_image" is the whole
    # encode_sliced call a request makes (preprocessing + overview + the slices in one batch)
    cases = {
        "preprocess": preprocess,
        "overview": lambda: enc.vpm.encode(overview),
        "slices_batched": lambda: enc.encode_pixels(parts),
        "slices_one_at_a_time": one_at_a_time,
        "sliced_image": lambda: enc.encode_sliced(image),
    }
    batched, single = enc.encode_pixels(parts), one_at_a_time()  # warm-up, and a sanity check
    diff = max(float(np.abs(a - b).max() / np.abs(b).max()) for a, b in zip(batched, single))
    times: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(args.repeats):  # alternating, so machine noise hits every case alike
        for name, fn in cases.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) for k, v in times.items()}
    n = len(parts)
    res = {
        "threads": args.threads,
        "repeats": args.repeats,
        "image": [int(image.shape[1]), int(image.shape[0])],
        "grid": list(cut.plan.grid),
        "slice_size": list(cut.slices[0].shape[1::-1]),
        "overview_size": list(cut.overview.shape[1::-1]),
        "seconds": med,
        "rounds_s": times,  # every round's time per case, in the order they ran
        "per_slice_batched_s": med["slices_batched"] / n,
        "per_slice_one_at_a_time_s": med["slices_one_at_a_time"] / n,
        "batched_vs_one_at_a_time": med["slices_batched"] / med["slices_one_at_a_time"],
        "batched_rel_diff": diff,
    }
    w, h = res["slice_size"]
    print(
        f"VPM ({args.threads} threads), {res['image'][0]}x{res['image'][1]} image, grid {cut.plan.grid}: "
        f"overview {res['overview_size'][0]}x{res['overview_size'][1]} {med['overview']:.2f} s; "
        f"{n} slices of {w}x{h} batched {med['slices_batched']:.2f} s ({res['per_slice_batched_s']:.2f} s each), "
        f"one at a time {med['slices_one_at_a_time']:.2f} s (ratio {res['batched_vs_one_at_a_time']:.2f}); "
        f"preprocessing {med['preprocess']:.2f} s; whole sliced image {med['sliced_image']:.2f} s; "
        f"batched vs one at a time {diff:.1e} of max |x|"
    )
    write_result("encoders_slices", res, [Path(args.model_dir) / ms.VPM_FILE], args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
