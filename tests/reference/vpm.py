"""Reference vision encoder: transformers 4.52 SigLIP encoder layers built from our vision GGUF,
the NaViT bucketed position ids with torch.bucketize, and the MiniCPM-V resampler with
torch.nn.MultiheadAttention."""

from __future__ import annotations

import numpy as np
import torch

from llama_omni_py._native import core


def navit_position_ids(rows: int, cols: int, grid: int) -> torch.Tensor:
    """The NaViT SigLIP embedding's ids, as written there (float32 arange + bucketize)."""
    boundaries = torch.arange(1 / grid, 1.0, 1 / grid)
    h = torch.bucketize(torch.arange(0, 1 - 1e-6, 1 / rows), boundaries, right=True)
    w = torch.bucketize(torch.arange(0, 1 - 1e-6, 1 / cols), boundaries, right=True)
    return (h[:, None] * grid + w).flatten()


def exact_position_ids(rows: int, cols: int, grid: int) -> torch.Tensor:
    """The same buckets in exact rational arithmetic: floor(grid * i / n)."""
    h = torch.div(grid * torch.arange(rows), rows, rounding_mode="floor")
    w = torch.div(grid * torch.arange(cols), cols, rounding_mode="floor")
    return (h[:, None] * grid + w).flatten()


class ReferenceVpm:
    def __init__(self, vision_gguf: str):
        from transformers import SiglipVisionConfig
        from transformers.models.siglip.modeling_siglip import SiglipEncoderLayer

        g = core.GgufFile(vision_gguf)
        f = lambda n: torch.from_numpy(np.array(g.read_f32(n)))  # noqa: E731
        h = g.value("clip.vision.embedding_length")
        cfg = SiglipVisionConfig(
            hidden_size=h,
            intermediate_size=g.value("clip.vision.feed_forward_length"),
            num_attention_heads=g.value("clip.vision.attention.head_count"),
            layer_norm_eps=g.value("clip.vision.attention.layer_norm_epsilon"),
            hidden_act="gelu_pytorch_tanh",
        )
        cfg._attn_implementation = "eager"
        names = {
            "self_attn.q_proj": "attn_q",
            "self_attn.k_proj": "attn_k",
            "self_attn.v_proj": "attn_v",
            "self_attn.out_proj": "attn_out",
            "layer_norm1": "ln1",
            "layer_norm2": "ln2",
            "mlp.fc1": "ffn_down",
            "mlp.fc2": "ffn_up",
        }
        self.layers = []
        for i in range(g.value("clip.vision.block_count")):
            layer = SiglipEncoderLayer(cfg).eval()
            state = {
                f"{hf}.{k}": f(f"v.blk.{i}.{ours}.{k}").reshape(-1 if k == "bias" else f(f"v.blk.{i}.{ours}.{k}").shape)
                for hf, ours in names.items()
                for k in ("weight", "bias")
            }
            layer.load_state_dict(state)
            self.layers.append(layer)
        self.patch = g.value("clip.vision.patch_size")
        self.conv_w, self.conv_b = f("v.patch_embd.weight"), f("v.patch_embd.bias").reshape(-1)
        self.pos = f("v.position_embd.weight")
        self.grid = int(round(self.pos.shape[0] ** 0.5))
        self.post_ln = (f("v.post_ln.weight").reshape(-1), f("v.post_ln.bias").reshape(-1))
        self.eps = cfg.layer_norm_eps
        self.query, self.kv = f("resampler.query"), f("resampler.kv.weight")
        e = self.query.shape[1]
        self.attn = torch.nn.MultiheadAttention(e, max(1, e // 128)).eval()
        a = {
            n: (f(f"resampler.attn.{n}.weight"), f(f"resampler.attn.{n}.bias").reshape(-1))
            for n in ("q", "k", "v", "out")
        }
        self.attn.load_state_dict(
            {
                "in_proj_weight": torch.cat([a[n][0] for n in "qkv"]),
                "in_proj_bias": torch.cat([a[n][1] for n in "qkv"]),
                "out_proj.weight": a["out"][0],
                "out_proj.bias": a["out"][1],
            }
        )
        self.ln = {
            n: (f(f"resampler.{n}.weight").reshape(-1), f(f"resampler.{n}.bias").reshape(-1))
            for n in ("ln_q", "ln_kv", "ln_post")
        }
        self.proj = f("resampler.proj.weight").T  # the converter stored proj transposed
        self.pos_k = f("resampler.pos_embed_k")

    @torch.inference_mode()
    def encode(self, pixels: np.ndarray) -> np.ndarray:
        ln = torch.nn.functional.layer_norm
        x = torch.from_numpy(pixels)[None]
        rows, cols = x.shape[2] // self.patch, x.shape[3] // self.patch
        x = torch.nn.functional.conv2d(x, self.conv_w, self.conv_b, stride=self.patch).flatten(2).transpose(1, 2)
        x = x + self.pos[exact_position_ids(rows, cols, self.grid)]
        for layer in self.layers:
            x = layer(x, None)[0]
        x = ln(x, x.shape[-1:], *self.post_ln, eps=self.eps)[0]
        e = self.query.shape[1]
        kv = ln(x @ self.kv.T, (e,), *self.ln["ln_kv"], eps=1e-6)
        q = ln(self.query, (e,), *self.ln["ln_q"], eps=1e-6)
        grid_pos = self.pos_k.reshape(self.grid, self.grid, e)[:rows, :cols].reshape(-1, e)
        out = self.attn(q[:, None], (kv + grid_pos)[:, None], kv[:, None], need_weights=False)[0][:, 0]
        return (ln(out, (e,), *self.ln["ln_post"], eps=1e-6) @ self.proj).numpy()
