"""Many streams over one Token2Wav: aggregate audio seconds per wall second with N streams pushing
at once from their own threads, streams of one Token2Wav (new_stream: shared weights and pools,
windows taking turns) against N independent Token2Wav copies (own weights and pools), the
configurations alternating round by round; the memory of each; and what merging the windows of
two streams into one evaluation could gain at most (DiT batch 4 against two calls of batch 2,
one vocoder call over two windows' frames against two calls).

    python benchmarks/token2wav_streams.py [--model-dir DIR] [--streams 1,2,4] [--threads 2]
        [--windows 3] [--rounds 2] [--reps 5] [--out FILE]

Each stream pushes --windows windows of 25 codes (different codes per stream); the audio of a
stream is checked equal between the two configurations. Writes JSON with the manifest.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import timed, write_result  # noqa: E402

import llama_omni_py as omni  # noqa: E402
from llama_omni_py._native import core  # noqa: E402
from llama_omni_py.modelset import spec as ms  # noqa: E402

SAMPLE_RATE, HOP = 24000, 25
VOCODER_FRAMES = 58  # a steady window's frames plus the 8 cached ones


def drive(streams: list, windows: int) -> tuple[float, list[np.ndarray]]:
    """All streams at once, each on its own thread from a common start: wall seconds and audio."""
    audio: list = [None] * len(streams)
    start = threading.Barrier(len(streams) + 1)

    def run(k: int) -> None:
        codes = np.random.default_rng(k).integers(0, 6561, windows * HOP).astype(np.int32)
        streams[k].reset()
        start.wait()
        audio[k] = np.concatenate([streams[k].push(codes[i : i + HOP]) for i in range(0, codes.size, HOP)])

    threads = [threading.Thread(target=run, args=(k,)) for k in range(len(streams))]
    for th in threads:
        th.start()
    start.wait()
    t0 = time.perf_counter()
    for th in threads:
        th.join()
    return time.perf_counter() - t0, audio


def throughput(model_dir: Path, counts: list[int], threads: int, windows: int, rounds: int) -> dict:
    base = omni.Token2Wav(model_dir, threads=threads)
    shared = [base] + [base.new_stream() for _ in range(max(counts) - 1)]
    copies = [base] + [omni.Token2Wav(model_dir, threads=threads) for _ in range(max(counts) - 1)]
    mib = 2**20
    out: dict = {
        "weight_mib": base.weight_bytes / mib,
        "stream_mib": base.stream_bytes / mib,
        "token2mel": base.token2mel,
        "rows": [],
    }
    for pool in (shared, copies):  # warm-up: every stream's first window, untimed
        drive(pool[: max(counts)], 1)
    for n in counts:
        walls: dict = {"shared": [], "copies": []}
        audio_s = identical = None
        for _ in range(rounds):
            for name, pool in (("shared", shared), ("copies", copies)):  # alternating
                wall, audio = drive(pool[:n], windows)
                walls[name].append(wall)
                audio_s = sum(a.size for a in audio) / SAMPLE_RATE
                if name == "shared":
                    want = audio
                else:
                    identical = all(np.array_equal(a, b) for a, b in zip(audio, want))
        row = {"streams": n, "audio_s": audio_s, "identical_audio": identical}
        for name, w in walls.items():
            row[f"{name}_wall_s"] = w
            row[f"{name}_audio_per_wall_s"] = audio_s / statistics.median(w)
        row["shared_over_copies"] = row["shared_audio_per_wall_s"] / row["copies_audio_per_wall_s"]
        row["shared_mib"] = (base.weight_bytes + n * base.stream_bytes) / mib
        row["copies_mib"] = n * (base.weight_bytes + base.stream_bytes) / mib
        out["rows"].append(row)
        print(
            f"{n} streams: shared {row['shared_audio_per_wall_s']:.3f} audio s/s, copies "
            f"{row['copies_audio_per_wall_s']:.3f} ({row['shared_over_copies']:.2f} x), "
            f"{row['shared_mib']:.0f} vs {row['copies_mib']:.0f} MiB, identical {identical}"
        )
    return out


def merge_bound(t2w_dir: Path, threads: int, reps: int) -> dict:
    """The most one evaluation over two streams' windows could save: the same work as one
    bigger call against two calls, alternating (no caches: the per-window shapes)."""
    rng = np.random.default_rng(0)
    dit = core.internal.DitEstimator(str(t2w_dir / "flow_matching.gguf"), "cpu", threads)
    frames = 2 * HOP

    def dit_args(batch):
        x, mu, cond = (rng.standard_normal((batch, 80, frames), dtype=np.float32) for _ in range(3))
        return x, mu, np.full(batch, 0.5, np.float32), rng.standard_normal((batch, 80), dtype=np.float32), cond

    b2, b4 = dit_args(2), dit_args(4)
    voc = core.internal.HiftVocoder(str(t2w_dir / "hifigan2.gguf"), threads)
    m1 = rng.standard_normal((80, VOCODER_FRAMES), dtype=np.float32) * 0.5
    m2 = np.concatenate([m1, m1], axis=1)
    times: dict = {k: [] for k in ("dit_2x_b2", "dit_1x_b4", "voc_2x_1w", "voc_1x_2w")}
    for _ in range(reps):  # alternating, one call each per round
        times["dit_2x_b2"] += timed(lambda: (dit.forward(*b2), dit.forward(*b2)), 1)
        times["dit_1x_b4"] += timed(lambda: dit.forward(*b4), 1)
        times["voc_2x_1w"] += timed(lambda: (voc.forward(m1), voc.forward(m1)), 1)
        times["voc_1x_2w"] += timed(lambda: voc.forward(m2), 1)
    med = {k: statistics.median(v) for k, v in times.items()}
    res = {"ms": times, "median_ms": med}
    res["dit_merged_over_separate"] = med["dit_1x_b4"] / med["dit_2x_b2"]
    res["vocoder_merged_over_separate"] = med["voc_1x_2w"] / med["voc_2x_1w"]
    print(
        f"DiT step, 2 streams: one batch-4 call {med['dit_1x_b4']:.0f} ms vs two batch-2 calls "
        f"{med['dit_2x_b2']:.0f} ms ({res['dit_merged_over_separate']:.2f} x); vocoder: one call over "
        f"2 windows {med['voc_1x_2w']:.0f} ms vs two calls {med['voc_2x_1w']:.0f} ms "
        f"({res['vocoder_merged_over_separate']:.2f} x)"
    )
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model-dir", type=Path, default=Path("/tmp/real4"))
    ap.add_argument("--streams", default="1,2,4")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--windows", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--out")
    a = ap.parse_args()
    counts = [int(n) for n in a.streams.split(",")]
    t2w_dir = a.model_dir / ms.T2W_DIR
    payload = {
        "threads": a.threads,
        "windows": a.windows,
        "rounds": a.rounds,
        "throughput": throughput(a.model_dir, counts, a.threads, a.windows, a.rounds),
        "merge_bound": merge_bound(t2w_dir, a.threads, a.reps),
    }
    write_result("token2wav_streams", payload, sorted(t2w_dir.glob("*.gguf")), a.out)


if __name__ == "__main__":
    main()
