"""LLM and TTS speed: TTS ms per audio token (backbone + audio-code head in one graph, and the
sampler separately) at real TTS dimensions, and LLM prefill time and decode tokens/s on the
generator's Qwen3 (real widths; 2 layers by default, 36 with `make-models --llm-layers 36`).

    python benchmarks/llm_tts.py [--model-dir DIR] [--device cpu] [--threads 2] [--tokens 64] [--out FILE]

Needs a real-dimension set (`llama-omni make-models DIR --size real --only llm,tts,projector`).
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

from llama_omni_py._native import core  # noqa: E402
from llama_omni_py.modelset.layout import discover  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model-dir", required=True)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    s = discover(args.model_dir)

    tts = core.Tts(str(s.path("tts")), str(s.path("projector")), args.device, args.threads)
    o = core.TtsSamplerOptions()
    o.seed = 1
    sampler = core.TtsSampler(o)
    rng = np.random.default_rng(0)
    cond = tts.conditions(list(range(10)), rng.standard_normal((10, tts.dims.llm_embd)).astype(np.float32), False)
    logits = tts.forward(cond)
    step_ms, sample_ms = [], []
    code = 0
    for _ in range(args.tokens):
        t0 = time.perf_counter()
        code = sampler.sample(logits) % 6561
        t1 = time.perf_counter()
        logits = tts.forward(tts.code_embedding(code))
        t2 = time.perf_counter()
        sample_ms.append((t1 - t0) * 1000)
        step_ms.append((t2 - t1) * 1000)

    head_plain_ms, head_graph_ms = tts.head_cost_ms(20)

    llm_model = core.LlmModel(str(s.llm), args.device)
    llm = core.Llm(llm_model, 1024, 512, args.threads)
    prompt = llm_model.tokenize("<|im_start|>user\nhello, please tell me a story<|im_end|>\n", True)
    t0 = time.perf_counter()
    llm.eval_tokens(prompt)
    prefill_cold_s = time.perf_counter() - t0  # includes first-use costs (kernel loading, handles)
    llm.keep(0)
    t0 = time.perf_counter()
    llm.eval_tokens(prompt)
    prefill_s = time.perf_counter() - t0
    tok = llm.sample()
    decode = []
    for _ in range(args.tokens):
        t0 = time.perf_counter()
        tok, _h = llm.decode_step(tok)
        decode.append(time.perf_counter() - t0)
        tok = tok % 150000  # keep to ordinary tokens (random weights pick anything)

    res = {
        "device": args.device,
        "threads": args.threads,
        "tts": {
            "hidden": tts.dims.hidden,
            "layers": tts.dims.layers,
            "step_ms_median": statistics.median(step_ms),
            "sample_ms_median": statistics.median(sample_ms),
            "head_ms_ours": head_graph_ms,
            "head_ms_plain_cpp": head_plain_ms,
        },
        "llm": {
            "n_embd": llm_model.info.n_embd,
            "n_layer": llm_model.info.n_layer,
            "n_vocab": llm_model.info.n_vocab,
            "prefill_tokens": len(prompt),
            "prefill_ms": prefill_s * 1000,
            "prefill_ms_cold": prefill_cold_s * 1000,
            "decode_tokens_per_s": 1.0 / statistics.median(decode),
        },
    }
    print(
        f"TTS ({tts.dims.layers} x {tts.dims.hidden}): {res['tts']['step_ms_median']:.2f} ms per audio token "
        f"(backbone + head), sampler {res['tts']['sample_ms_median']:.3f} ms; the head alone: "
        f"{head_graph_ms:.3f} ms as a ggml matmul vs {head_plain_ms:.3f} ms as llama.cpp-omni's plain C++ loop"
    )
    print(
        f"LLM ({llm_model.info.n_layer} x {llm_model.info.n_embd}, vocab {llm_model.info.n_vocab}): "
        f"{res['llm']['decode_tokens_per_s']:.1f} tokens/s decode, prefill {len(prompt)} tokens "
        f"in {res['llm']['prefill_ms']:.0f} ms ({res['llm']['prefill_ms_cold']:.0f} ms the first time)"
    )
    write_result("llm_tts", {**res}, [s.path("tts"), s.path("projector")], args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
