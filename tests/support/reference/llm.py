"""transformers 4.52 Qwen3ForCausalLM built from our LLM GGUF (llama.cpp "qwen3" names; Qwen
uses NeoX-style RoPE, so no q/k permutation between the two layouts)."""

from __future__ import annotations

import numpy as np
import torch

from llama_omni_py._native import core

_NAMES = {
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
}


def build_qwen3(llm_gguf: str):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    g = core.GgufFile(llm_gguf)
    a = g.value("general.architecture")
    cfg = Qwen3Config(
        vocab_size=g.find_tensor("token_embd.weight").ne[1],
        hidden_size=g.value(f"{a}.embedding_length"),
        intermediate_size=g.value(f"{a}.feed_forward_length"),
        num_hidden_layers=g.value(f"{a}.block_count"),
        num_attention_heads=g.value(f"{a}.attention.head_count"),
        num_key_value_heads=g.value(f"{a}.attention.head_count_kv"),
        head_dim=g.value(f"{a}.attention.key_length"),
        rms_norm_eps=g.value(f"{a}.attention.layer_norm_rms_epsilon"),
        rope_theta=g.value(f"{a}.rope.freq_base"),
        max_position_embeddings=4096,
        tie_word_embeddings=False,
        attention_bias=False,
        use_sliding_window=False,
        torch_dtype=torch.float32,
    )
    cfg._attn_implementation = "eager"
    model = Qwen3ForCausalLM(cfg)
    state = {}
    for t in g.tensors:
        w = torch.from_numpy(np.array(g.read_f32(t.name)))
        if t.name == "token_embd.weight":
            state["model.embed_tokens.weight"] = w
        elif t.name == "output.weight":
            state["lm_head.weight"] = w
        elif t.name == "output_norm.weight":
            state["model.norm.weight"] = w
        else:
            _, i, kind, _ = t.name.split(".")
            state[f"model.layers.{i}.{_NAMES[kind]}.weight"] = w
    model.load_state_dict(state, strict=True)
    return model.eval()
