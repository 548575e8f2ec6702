"""What beam search costs on the LLM (docs/slots.md#beam-search):

  copy       a beam that takes over another's place gets its parent's KV: libllama copies the
             parent's whole stream (n_ctx positions of every layer) at the start of the next
             llama_decode. Measured as a one-token decode with 4 copies queued minus one
             without, per copy, at each --n-ctx
  recompute  the other way to reorder: re-evaluate the tokens where the beam's sequence and its
             parent's differ (d tokens, one batch)
  search     one slot's beam search end to end for --beams (1: greedy decoding, the same prompt
             and length): ms per generated token, decode rounds, copies, rules time

Rounds alternate between configurations; best of --repeats.

    python benchmarks/beam_search.py --model-dir DIR [--beams 1,2,3] [--n-ctx 4096,8192]
        [--threads 2] [--new-tokens 32] [--repeats 3] [--out FILE]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from common import rss_mib, write_result  # noqa: E402

from llama_omni_py._native import core  # noqa: E402
from llama_omni_py.modelset.layout import discover  # noqa: E402
from llama_omni_py.modules.llm.beam_search import BeamSearch, search  # noqa: E402
from llama_omni_py.modules.llm.context import LlmContext  # noqa: E402
from llama_omni_py.modules.llm.model import LanguageModel  # noqa: E402
from llama_omni_py.modules.llm.prompt import Prompt, SpecialTokens  # noqa: E402

PROMPT = [(i * 37) % 300 + 10 for i in range(64)]


def _best(fn, repeats: int) -> float:
    return min(fn() for _ in range(repeats))


def copy_cost(model, n_ctx: int, threads: int, repeats: int, copies: int = 4) -> dict:
    """ms per whole-stream copy (``copies`` of them before a one-token decode, against the same
    decode without) and ms to recompute d tokens, at ``n_ctx``."""
    llm = core.Llm(model, n_ctx, 512, threads, n_seq=1 + copies)
    for s in range(1 + copies):
        llm.eval_tokens(PROMPT, seq=s)

    def round_ms(n_copies: int) -> float:
        llm.keep(len(PROMPT), 0)
        for d in range(1, n_copies + 1):
            llm.copy_seq(0, d)
        t0 = time.perf_counter()
        llm.decode_many([0], [11])
        return (time.perf_counter() - t0) * 1000

    round_ms(copies)  # every stream's pages in memory before timing
    plain, with_copies = [], []
    for _ in range(repeats):  # alternating
        plain.append(round_ms(0))
        with_copies.append(round_ms(copies))

    def recompute_ms(d: int) -> float:
        llm.keep(len(PROMPT), 1)
        t0 = time.perf_counter()
        llm.eval_tokens(list(range(20, 20 + d)), seq=1)
        return (time.perf_counter() - t0) * 1000

    recompute = {d: _best(lambda d=d: recompute_ms(d), repeats) for d in (1, 4, 16)}
    return {
        "n_ctx": n_ctx,
        "kv_stream_mib": llm.kv_bytes_per_seq / 2**20,
        "decode_ms": min(plain),
        "copy_ms": (min(with_copies) - min(plain)) / copies,
        "recompute_ms": recompute,
    }


def search_cost(path, beams: int, n_ctx: int, threads: int, new_tokens: int) -> dict:
    before = rss_mib()
    ctx = LlmContext(path, "cpu", n_ctx, threads, beams=beams)
    context_mib = rss_mib() - before  # the weights it loads and every KV stream
    lm = LanguageModel.slot(ctx, 0, prompt_cache=False)
    eos = SpecialTokens.resolve(lm.model).reference_eos
    lm.prefill(Prompt([("tokens", PROMPT)]))
    rules = BeamSearch(beams, eos, new_tokens, 1.2)
    advance = rules.advance
    spent = [0.0]

    def timed(logits):
        t0 = time.perf_counter()
        try:
            return advance(logits)
        finally:
            spent[0] += time.perf_counter() - t0

    rules.advance = timed
    t0 = time.perf_counter()
    found = search(lm.llm, lm.llm.logits(), rules)
    wall = (time.perf_counter() - t0) * 1000
    n = len(found.best.tokens)
    return {
        "beams": beams,
        "tokens": n,
        "ms_per_token": wall / n,
        "rounds": found.steps,
        "copies": found.copies,
        "rules_ms_per_round": spent[0] * 1000 / max(found.steps + 1, 1),
        "kv_per_slot_mib": ctx.kv_bytes_per_slot / 2**20,
        "context_rss_mib": context_mib,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model-dir", required=True)
    p.add_argument("--beams", default="1,2,3")
    p.add_argument("--n-ctx", default="4096,8192")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--new-tokens", type=int, default=32)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out")
    a = p.parse_args()
    path = discover(a.model_dir).llm
    model = core.LlmModel(str(path), "cpu")
    print(f"LLM {path.name}: {model.info.n_layer} layers, n_embd {model.info.n_embd}; threads {a.threads}")
    copies = [copy_cost(model, int(n), a.threads, a.repeats) for n in a.n_ctx.split(",")]
    for c in copies:
        rec = ", ".join(f"{d} tok {ms:.1f}" for d, ms in c["recompute_ms"].items())
        print(
            f"n_ctx {c['n_ctx']}: stream {c['kv_stream_mib']:.0f} MiB, one-token decode {c['decode_ms']:.1f} ms, "
            f"copy {c['copy_ms']:.1f} ms; recompute {rec} ms"
        )
    n_ctx = int(a.n_ctx.split(",")[0])
    rows = []
    for _ in range(a.repeats):  # alternating
        for b in (int(x) for x in a.beams.split(",")):
            rows.append(search_cost(path, b, n_ctx, a.threads, a.new_tokens))
    best = {}
    for r in rows:
        if r["beams"] not in best or r["ms_per_token"] < best[r["beams"]]["ms_per_token"]:
            best[r["beams"]] = r
    print("beams | ms/token | rounds | copies | rules ms/round | KV per slot MiB | context RSS MiB")
    for b, r in sorted(best.items()):
        print(
            f"{b:5d} | {r['ms_per_token']:8.1f} | {r['rounds']:6d} | {r['copies']:6d} | "
            f"{r['rules_ms_per_round']:14.2f} | {r['kv_per_slot_mib']:15.0f} | {r['context_rss_mib']:.0f}"
        )
    write_result(
        "beam_search",
        {"threads": a.threads, "new_tokens": a.new_tokens, "copy": copies, "search": list(best.values())},
        [path],
        a.out,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
