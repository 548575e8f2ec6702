"""Reference TTS: transformers LlamaModel (the MiniCPMTTS backbone) + the projector and head in
torch, built from our TTS and projector GGUFs. llama.cpp's converter permutes q/k rows for its
interleaved RoPE; the reference undoes that permutation."""

from __future__ import annotations

import numpy as np
import torch

from llama_omni_py._native import core


def _unpermute(w: np.ndarray, n_head: int) -> np.ndarray:
    out_dim = w.shape[0]
    return w.reshape(n_head, out_dim // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


class ReferenceTts(torch.nn.Module):
    def __init__(self, tts_gguf: str, projector_gguf: str):
        super().__init__()
        from transformers import LlamaConfig, LlamaModel

        g = core.GgufFile(tts_gguf)
        hidden, layers = g.value("llama.embedding_length"), g.value("llama.block_count")
        heads, ff = g.value("llama.attention.head_count"), g.value("llama.feed_forward_length")
        cfg = LlamaConfig(
            hidden_size=hidden,
            intermediate_size=ff,
            num_hidden_layers=layers,
            num_attention_heads=heads,
            num_key_value_heads=heads,
            rms_norm_eps=g.value("llama.attention.layer_norm_rms_epsilon"),
            rope_theta=g.value("llama.rope.freq_base"),
            max_position_embeddings=4096,
            vocab_size=g.find_tensor("token_embd.weight").ne[1],
        )
        cfg._attn_implementation = "eager"
        self.model = LlamaModel(cfg)
        names = {
            "attn_q": "self_attn.q_proj",
            "attn_k": "self_attn.k_proj",
            "attn_v": "self_attn.v_proj",
            "attn_output": "self_attn.o_proj",
            "ffn_gate": "mlp.gate_proj",
            "ffn_up": "mlp.up_proj",
            "ffn_down": "mlp.down_proj",
            "attn_norm": "input_layernorm",
            "ffn_norm": "post_attention_layernorm",
        }
        state = {
            "embed_tokens.weight": torch.from_numpy(np.array(g.read_f32("token_embd.weight"))),
            "norm.weight": torch.from_numpy(np.array(g.read_f32("output_norm.weight"))),
        }
        for i in range(layers):
            for kind, hf in names.items():
                w = np.array(g.read_f32(f"blk.{i}.{kind}.weight"))
                if kind in ("attn_q", "attn_k"):
                    w = _unpermute(w, heads)
                state[f"layers.{i}.{hf}.weight"] = torch.from_numpy(np.ascontiguousarray(w))
        self.model.load_state_dict(state, strict=True)
        self.head = torch.from_numpy(np.array(g.read_f32("head_code.0.weight")))  # (hidden, codes)
        self.emb_text = torch.from_numpy(np.array(g.read_f32("emb_text.weight")))
        p = core.GgufFile(projector_gguf)
        self.l1w, self.l1b = (torch.from_numpy(np.array(p.read_f32(n))) for n in ("linear1.weight", "linear1.bias"))
        self.l2w, self.l2b = (torch.from_numpy(np.array(p.read_f32(n))) for n in ("linear2.weight", "linear2.bias"))

    @torch.inference_mode()
    def conditions(self, tokens, hidden):
        proj = torch.relu(hidden @ self.l1w.T + self.l1b) @ self.l2w.T + self.l2b
        return self.emb_text[torch.tensor(tokens)] + torch.nn.functional.normalize(proj, p=2, dim=-1)

    @torch.inference_mode()
    def logits(self, rows: torch.Tensor) -> torch.Tensor:
        """Head logits for every row of a sequence (1, n, hidden) evaluated from position 0."""
        h = self.model(inputs_embeds=rows[None]).last_hidden_state[0]
        return h @ self.head
