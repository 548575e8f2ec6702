"""TTS slots: aggregate speech codes per second of 1, 2, 4 ... slots generating at the same time
from their own threads over one set of weights, with their code steps batched into shared graphs
and with batch_invariant (exact: each slot's lone logits), alternating round by round; how often
the batched mode's codes differ from the exact ones (slots whose codes differ, and the first
differing code). Also the bytes of the shared weights and of one slot's KV cache.

    python benchmarks/tts_slots.py [--model-dir DIR] [--slots 1,2,4] [--codes 50] [--rounds 3]
                                   [--threads 2] [--device cpu] [--out FILE]

Needs a real-dimension set (`llama-omni make-models DIR --size real --only llm,tts,projector`).
Product goal: codes/s at 4 slots >= 2.5 x one slot.
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

from common import write_result  # noqa: E402

from llama_omni_py._native import core  # noqa: E402
from llama_omni_py.modelset.layout import discover  # noqa: E402
from llama_omni_py.modules.tts import KV_POSITIONS, TtsModel  # noqa: E402

GOAL_4_SLOTS = 2.5


def _sampler(seed: int):
    o = core.TtsSamplerOptions()
    o.seed = seed
    return core.TtsSampler(o)


def run_slots(tts: TtsModel, slots: list[TtsModel], codes: int) -> tuple[float, list[list[int]], float]:
    """Every slot generates `codes` codes from 10 condition rows, all started together. Returns the
    wall seconds, each slot's codes and the mean rows per step graph."""
    rng = np.random.default_rng(0)
    rows = [
        tts.conditions(list(range(10 + k)), rng.standard_normal((10 + k, tts.dims.llm_embd)).astype(np.float32))
        for k in range(len(slots))
    ]
    out: list = [None] * len(slots)
    start = threading.Barrier(len(slots) + 1)

    def work(k):
        slots[k].start_turn()
        start.wait()
        out[k] = slots[k].generate(rows[k], _sampler(k), codes, min_codes=codes)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(len(slots))]
    for t in threads:
        t.start()
    graphs0, rows0 = tts.step_batches
    start.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    graphs, stepped = (a - b for a, b in zip(tts.step_batches, (graphs0, rows0)))
    return wall, out, stepped / max(graphs, 1)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model-dir", required=True)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--slots", default="1,2,4")
    ap.add_argument("--codes", type=int, default=50, help="codes per slot per run")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--exact", action="store_true", help="F32 weights")
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    s = discover(args.model_dir)
    counts = [int(n) for n in args.slots.split(",")]

    def load(batch_invariant: bool) -> TtsModel:
        return TtsModel(
            s.path("tts"), s.path("projector"), args.device, args.threads, args.exact, KV_POSITIONS, batch_invariant
        )

    modes = {"batched": load(False), "batch_invariant": load(True)}
    pools = {name: [m.new_slot() for _ in range(max(counts))] for name, m in modes.items()}
    for name, m in modes.items():  # warm-up: first-use costs out of the timed runs
        run_slots(m, pools[name][:1], 5)
    walls: dict = {name: {n: [] for n in counts} for name in modes}
    fill: dict = {name: {n: [] for n in counts} for name in modes}
    diverged: list = []  # per slot and run: None (same codes) or the index of the first differing code
    for r in range(args.rounds):
        order = list(modes) if r % 2 == 0 else list(reversed(modes))  # alternate which mode goes first
        for n in counts:
            got = {}
            for name in order:
                wall, got[name], rows_per_graph = run_slots(modes[name], pools[name][:n], args.codes)
                walls[name][n].append(wall)
                fill[name][n].append(rows_per_graph)
            for a, b in zip(got["batched"], got["batch_invariant"]):
                diverged.append(next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None))
    result: dict = {
        "device": args.device,
        "threads": args.threads,
        "codes_per_slot": args.codes,
        "rounds": args.rounds,
        "exact": args.exact,
        "first_differing_code": diverged,
        "modes": {},
    }
    for name in modes:
        result["modes"][name] = {}
        for n in counts:
            cps = n * args.codes / statistics.median(walls[name][n])
            result["modes"][name][str(n)] = {
                "codes_per_s": cps,
                "rows_per_graph": statistics.mean(fill[name][n]),
                "walls_s": walls[name][n],
            }
            if 1 in counts:  # per round against that round's lone batched slot: steadier under load
                ratios = [n * w1 / w for w, w1 in zip(walls[name][n], walls["batched"][1])]
                result["modes"][name][str(n)]["x_one_slot_per_round"] = ratios
                result["modes"][name][str(n)]["x_one_slot_median"] = statistics.median(ratios)
    one = result["modes"]["batched"]["1"]["codes_per_s"] if 1 in counts else None  # the lone slot
    tts = modes["batched"]
    result["weight_bytes"] = tts.weight_bytes
    result["kv_bytes_per_slot"] = tts.new_slot(KV_POSITIONS).kv_bytes
    result["tts_ctx"] = KV_POSITIONS
    print(
        f"TTS {tts.dims.layers} x {tts.dims.hidden}, {args.threads} threads, {args.codes} codes per slot, "
        f"median of {args.rounds}; slot runs whose batched codes differ from the exact ones: "
        f"{sum(i is not None for i in diverged)} of {len(diverged)} (first differing code: "
        f"{sorted(i for i in diverged if i is not None)})"
    )
    print("slots | batched: codes/s, x one slot (median of per-round ratios), rows/graph | batch_invariant: same")
    for n in counts:
        b, i = result["modes"]["batched"][str(n)], result["modes"]["batch_invariant"][str(n)]
        x = (lambda m: f", {m['x_one_slot_median']:.2f} x") if one else (lambda m: "")
        print(
            f"{n:5d} | {b['codes_per_s']:7.1f}{x(b)}, {b['rows_per_graph']:.2f} | "
            f"{i['codes_per_s']:7.1f}{x(i)}, {i['rows_per_graph']:.2f}"
        )
    if one and 4 in counts:
        result["goal_4_slots"] = {"want": GOAL_4_SLOTS, "got": result["modes"]["batched"]["4"]["x_one_slot_median"]}
    print(
        f"weights {tts.weight_bytes / 2**20:.1f} MiB shared; KV {result['kv_bytes_per_slot'] / 2**20:.1f} MiB "
        f"per slot at tts_ctx {KV_POSITIONS}"
    )
    write_result("tts_slots", result, [s.path("tts"), s.path("projector")], args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
