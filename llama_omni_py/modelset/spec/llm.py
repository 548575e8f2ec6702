"""LLM (Qwen3) tensors and metadata: standard llama.cpp "qwen3" names."""

from __future__ import annotations

from dataclasses import dataclass

from .common import F16, F32, KeyRule, Meta, TensorSpec, _w
from .vocab import VOCAB_KEYS

RANDOM_WEIGHTS_MARK = "llama-omni-py random weights"  # in general.name of a generated set's LLM


@dataclass(frozen=True)
class LlmDims:
    n_embd: int
    n_layer: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_ff: int
    n_vocab: int
    n_ctx_train: int = 40960
    rope_theta: float = 1_000_000.0
    rms_eps: float = 1e-6
    wtype: str = F16  # matrices; "f32" gives an exact-arithmetic LLM for parity tests


LLM_REAL = LlmDims(4096, 36, 32, 8, 128, 12288, 151748)
# Benchmark set: real widths and vocabulary, 2 of the 36 layers (per-layer cost is real;
# scale decode time by 18 for an estimate of the full model).
LLM_BENCH = LlmDims(4096, 2, 32, 8, 128, 12288, 151748)
LLM_TINY = LlmDims(256, 2, 4, 2, 64, 512, 0)  # n_vocab set by the tokenizer builder


def llm_tensors(d: LlmDims) -> list[TensorSpec]:
    q, kv = d.n_head * d.head_dim, d.n_head_kv * d.head_dim
    out = [TensorSpec("token_embd.weight", (d.n_embd, d.n_vocab), d.wtype, "embed")]
    for i in range(d.n_layer):
        p = f"blk.{i}"
        out += [
            TensorSpec(f"{p}.attn_norm.weight", (d.n_embd,), F32, "norm"),
            _w(f"{p}.attn_q.weight", (d.n_embd, q), d.wtype),
            _w(f"{p}.attn_k.weight", (d.n_embd, kv), d.wtype),
            _w(f"{p}.attn_v.weight", (d.n_embd, kv), d.wtype),
            _w(f"{p}.attn_output.weight", (q, d.n_embd), d.wtype, gain=0.5),
            TensorSpec(f"{p}.attn_q_norm.weight", (d.head_dim,), F32, "norm"),
            TensorSpec(f"{p}.attn_k_norm.weight", (d.head_dim,), F32, "norm"),
            TensorSpec(f"{p}.ffn_norm.weight", (d.n_embd,), F32, "norm"),
            _w(f"{p}.ffn_gate.weight", (d.n_embd, d.n_ff), d.wtype),
            _w(f"{p}.ffn_up.weight", (d.n_embd, d.n_ff), d.wtype),
            _w(f"{p}.ffn_down.weight", (d.n_ff, d.n_embd), d.wtype, gain=0.5),
        ]
    out += [
        TensorSpec("output_norm.weight", (d.n_embd,), F32, "norm"),
        _w("output.weight", (d.n_embd, d.n_vocab), d.wtype),
    ]
    return out


def llm_metadata(d: LlmDims) -> Meta:
    a = "qwen3"
    return [
        ("general.architecture", "string", a),
        ("general.name", "string", f"MiniCPM-o-4_5 ({RANDOM_WEIGHTS_MARK})"),
        ("general.file_type", "uint32", 0 if d.wtype == F32 else 1),
        (f"{a}.context_length", "uint32", d.n_ctx_train),
        (f"{a}.embedding_length", "uint32", d.n_embd),
        (f"{a}.block_count", "uint32", d.n_layer),
        (f"{a}.feed_forward_length", "uint32", d.n_ff),
        (f"{a}.attention.head_count", "uint32", d.n_head),
        (f"{a}.attention.head_count_kv", "uint32", d.n_head_kv),
        (f"{a}.attention.key_length", "uint32", d.head_dim),
        (f"{a}.attention.value_length", "uint32", d.head_dim),
        (f"{a}.rope.freq_base", "float32", d.rope_theta),
        (f"{a}.attention.layer_norm_rms_epsilon", "float32", d.rms_eps),
    ]


# What libllama needs of an arch "qwen3" file (docs/model-files.md); the vocabulary is checked
# against token_embd by the validator.
LLM_KEYS = (
    KeyRule("qwen3.context_length", "int"),
    KeyRule("qwen3.embedding_length", "int"),
    KeyRule("qwen3.block_count", "int"),
    KeyRule("qwen3.feed_forward_length", "int"),
    KeyRule("qwen3.attention.head_count", "int"),
    KeyRule("qwen3.attention.layer_norm_rms_epsilon", "float"),
    *VOCAB_KEYS,
)


def llm_infer(g) -> LlmDims:
    a = g.get_str("general.architecture")
    return LlmDims(
        n_embd=g.get_int(f"{a}.embedding_length"),
        n_layer=g.get_int(f"{a}.block_count"),
        n_head=g.get_int(f"{a}.attention.head_count"),
        n_head_kv=g.get_int(f"{a}.attention.head_count_kv"),
        head_dim=g.get_int(
            f"{a}.attention.key_length", g.get_int(f"{a}.embedding_length") // g.get_int(f"{a}.attention.head_count")
        ),
        n_ff=g.get_int(f"{a}.feed_forward_length"),
        n_vocab=g.tensor_ne("token_embd.weight")[1],
    )
