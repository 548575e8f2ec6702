"""Reference vision encoder: transformers 4.52 SigLIP encoder layers built from our vision GGUF,
the NaViT bucketed position ids with torch.bucketize, and the MiniCPM-V resampler with
torch.nn.MultiheadAttention. :meth:`ReferenceVpm.encode_batch` runs several images (an image's
overview and slices) the way MiniCPM-o's ``get_vision_embedding`` does: 14-pixel-high patch
strips padded to the longest with zeros, a patch attention mask in the encoder and a key padding
mask in the resampler."""

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


def sincos_positions(rows: int, cols: int, dim: int) -> torch.Tensor:
    """The resampler's 2-D sin-cos table as MiniCPM-o computes it (float32 numpy), (rows * cols, dim):
    the first half of the channels from the column, the second from the row."""
    omega = np.arange(dim // 4, dtype=np.float32)
    omega /= dim / 4.0
    omega = 1.0 / 10000**omega
    gw, gh = np.meshgrid(np.arange(cols, dtype=np.float32), np.arange(rows, dtype=np.float32))

    def one(pos):
        out = np.einsum("hw,d->hwd", pos, omega)
        return np.concatenate([np.sin(out), np.cos(out)], axis=-1)

    return torch.from_numpy(np.concatenate([one(gw), one(gh)], axis=-1).reshape(rows * cols, dim)).float()


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

    def _key_positions(self, rows: int, cols: int) -> torch.Tensor:
        e = self.query.shape[1]
        if rows <= self.grid and cols <= self.grid:  # the file's table, cropped
            return self.pos_k.reshape(self.grid, self.grid, e)[:rows, :cols].reshape(-1, e)
        return sincos_positions(rows, cols, e)  # the reference enlarges its table

    @torch.inference_mode()
    def encode_batch(self, images: list[np.ndarray]) -> np.ndarray:
        """Normalised (3, H, W) images of any sizes -> (n, 64, E), batched with padding and masks."""
        from transformers.modeling_attn_mask_utils import _prepare_4d_attention_mask

        from reference.image_processor import ReferenceSlicer

        p, ln = self.patch, torch.nn.functional.layer_norm
        sizes = [(x.shape[1] // p, x.shape[2] // p) for x in images]
        strips = [torch.from_numpy(ReferenceSlicer.strip(x)) for x in images]  # (3, 14, L * 14)
        flat = [s.flatten(end_dim=1).permute(1, 0) for s in strips]  # (L * 14, 42)
        padded = torch.nn.utils.rnn.pad_sequence(flat, batch_first=True, padding_value=0.0)
        n, longest = len(images), max(r * c for r, c in sizes)
        pixels = padded.permute(0, 2, 1).reshape(n, 3, p, -1)
        mask = torch.zeros((n, longest), dtype=torch.bool)
        pos = torch.zeros((n, longest), dtype=torch.long)
        for i, (r, c) in enumerate(sizes):
            mask[i, : r * c] = True
            pos[i, : r * c] = exact_position_ids(r, c, self.grid)
        x = torch.nn.functional.conv2d(pixels, self.conv_w, self.conv_b, stride=p).flatten(2).transpose(1, 2)
        x = x + self.pos[pos]
        att = None if bool(mask.all()) else _prepare_4d_attention_mask(mask, x.dtype)
        for layer in self.layers:
            x = layer(x, att)[0]
        x = ln(x, x.shape[-1:], *self.post_ln, eps=self.eps)
        e = self.query.shape[1]
        kv = ln(x @ self.kv.T, (e,), *self.ln["ln_kv"], eps=1e-6)
        keys_pos = torch.nn.utils.rnn.pad_sequence(
            [self._key_positions(r, c) for r, c in sizes], batch_first=True, padding_value=0.0
        )
        q = ln(self.query, (e,), *self.ln["ln_q"], eps=1e-6)[:, None].repeat(1, n, 1)
        out = self.attn(
            q, (kv + keys_pos).permute(1, 0, 2), kv.permute(1, 0, 2), key_padding_mask=~mask, need_weights=False
        )[0]
        return (ln(out.permute(1, 0, 2), (e,), *self.ln["ln_post"], eps=1e-6) @ self.proj).numpy()

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
        out = self.attn(q[:, None], (kv + self._key_positions(rows, cols))[:, None], kv[:, None], need_weights=False)
        out = out[0][:, 0]
        return (ln(out, (e,), *self.ln["ln_post"], eps=1e-6) @ self.proj).numpy()
