"""The LLM's session slots, two ways to hold them (docs/slots.md):

  shared   one libllama context with a KV stream per slot (n_seq_max = slots); the decode steps
           of all slots in one llama_decode
  contexts one context per slot over the same loaded model; each slot's step its own llama_decode

For 1, 2 and 4 generating slots: aggregate decode tokens/s and ms per round (one token for every
slot), alternating the two layouts round by round; and the resident memory each layout adds.

    python benchmarks/llm_slots.py --model-dir DIR [--slots 1,2,4] [--threads 2] [--seconds 4]
        [--competitor] [--out FILE]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from common import busy_competitor, rss_mib, write_result  # noqa: E402

from llama_omni_py._native import core  # noqa: E402
from llama_omni_py.modelset.layout import discover  # noqa: E402

N_CTX = 1024
PROMPT = [(i * 37) % 300 + 10 for i in range(64)]


class Shared:
    def __init__(self, model, slots, threads):
        self.ctx = core.Llm(model, N_CTX, 512, threads, n_seq=slots)
        for s in range(slots):
            self.ctx.eval_tokens(PROMPT, seq=s)

    def round(self, n, k):
        self.ctx.decode_many(list(range(n)), [100 + k % 50] * n)
        for s in range(n):
            self.ctx.sample(s)

    def rewind(self):
        for s in range(self.ctx.n_seq):
            self.ctx.keep(len(PROMPT), s)


class Contexts:
    def __init__(self, model, slots, threads):
        self.ctxs = [core.Llm(model, N_CTX, 512, threads) for _ in range(slots)]
        for c in self.ctxs:
            c.eval_tokens(PROMPT)

    def round(self, n, k):
        for c in self.ctxs[:n]:
            c.decode_step(100 + k % 50)

    def rewind(self):
        for c in self.ctxs:
            c.keep(len(PROMPT))


def _time(layout, n, seconds):
    layout.rewind()
    t0, k = time.perf_counter(), 0
    while time.perf_counter() - t0 < seconds and len(PROMPT) + k + 1 < N_CTX:
        layout.round(n, k)
        k += 1
    dt = time.perf_counter() - t0
    return {"tokens_per_s": k * n / dt, "ms_per_round": dt / k * 1000, "rounds": k}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model-dir", required=True)
    p.add_argument("--slots", default="1,2,4")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seconds", type=float, default=4.0)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--competitor", action="store_true", help="one busy process beside the run")
    p.add_argument("--out")
    a = p.parse_args()
    slots = [int(x) for x in a.slots.split(",")]
    path = discover(a.model_dir).llm
    model = core.LlmModel(str(path), "cpu")
    top = max(slots)
    before = rss_mib()
    shared = Shared(model, top, a.threads)
    after_shared = rss_mib()
    contexts = Contexts(model, top, a.threads)
    after_contexts = rss_mib()
    memory = {
        "model_mib": float(model.info.size_bytes) / 2**20,
        "shared_context_mib": after_shared - before,
        "contexts_mib": after_contexts - after_shared,
        "kv_per_slot_mib": shared.ctx.kv_bytes_per_seq / 2**20,
    }
    rows = []
    with busy_competitor(None) if a.competitor else _nothing():
        for n in slots:
            runs = {"shared": [], "contexts": []}
            for _ in range(a.repeats):  # alternating
                runs["shared"].append(_time(shared, n, a.seconds))
                runs["contexts"].append(_time(contexts, n, a.seconds))
            best = {k: max(v, key=lambda r: r["tokens_per_s"]) for k, v in runs.items()}
            rows.append({"slots": n, **{k: v for k, v in best.items()}})
    one = rows[0]["shared"]["tokens_per_s"] if rows and rows[0]["slots"] == 1 else None
    print(f"LLM {path.name}: {model.info.n_layer} layers, n_embd {model.info.n_embd}; threads {a.threads}")
    print(f"memory: {memory}")
    print("slots | shared tok/s (x one slot) | contexts tok/s | shared / contexts")
    for r in rows:
        s, c = r["shared"]["tokens_per_s"], r["contexts"]["tokens_per_s"]
        gain = f" ({s / one:.2f}x)" if one else ""
        print(f"{r['slots']:5d} | {s:9.1f}{gain} | {c:9.1f} | {s / c:.2f}")
    write_result(
        "llm_slots",
        {"threads": a.threads, "competitor": a.competitor, "memory": memory, "rows": rows},
        [path],
        a.out,
    )
    return 0


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


if __name__ == "__main__":
    raise SystemExit(main())
