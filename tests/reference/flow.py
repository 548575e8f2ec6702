"""Reference DiT estimator (stepaudio2 cosyvoice2 decoder_dit.DiT) with weights read from our
flow_matching.gguf (names: the state dict's 'decoder.estimator.*' minus 'decoder.')."""

from __future__ import annotations

import numpy as np
import torch

from llama_omni_py._native import core

from .stepaudio2_loader import load


def _count(names, prefix):
    idx = {int(n[len(prefix):].split(".")[0]) for n in names if n.startswith(prefix)}
    return max(idx) + 1 if idx else 0


def build_dit(flow_matching_gguf: str) -> torch.nn.Module:
    dit_mod = load("stepaudio2.cosyvoice2.flow.decoder_dit")
    g = core.GgufFile(flow_matching_gguf)
    names = [t.name for t in g.tensors]
    hidden = g.find_tensor("estimator.in_proj.weight").ne[1]
    head_dim = g.find_tensor("estimator.blocks.0.attn.q_norm.weight").ne[0]
    heads = g.find_tensor("estimator.blocks.0.attn.to_q.weight").ne[1] // head_dim
    mlp = g.find_tensor("estimator.blocks.0.mlp.fc1.weight").ne[1]
    with torch.device("meta"):  # the constructor allocates large scratch buffers; skip them
        model = dit_mod.DiT(in_channels=320, out_channels=80, mlp_ratio=mlp / hidden,
                            depth=_count(names, "estimator.blocks."), num_heads=heads, head_dim=head_dim,
                            hidden_size=hidden)
    state = {n[len("estimator."):]: torch.from_numpy(np.array(g.read(n))) for n in names}
    model.load_state_dict(state, strict=True, assign=True)
    return model.eval()


def build_encoder(encoder_gguf: str) -> torch.nn.Module:
    enc_mod = load("stepaudio2.cosyvoice2.transformer.upsample_encoder_v2")
    g = core.GgufFile(encoder_gguf)
    names = [t.name for t in g.tensors]
    d_in, d = g.find_tensor("embed.out.0.weight").ne
    d_head, heads = g.find_tensor("encoders.0.self_attn.pos_bias_u").ne
    model = enc_mod.UpsampleConformerEncoderV2(
        input_size=d_in, output_size=d, pre_lookahead_len=3, num_blocks=_count(names, "encoders."),
        num_up_blocks=_count(names, "up_encoders."), up_stride=2, up_scale_factor=2, attention_heads=heads,
        key_bias=True, linear_units=g.find_tensor("encoders.0.feed_forward.w_1.weight").ne[1],
        dropout_rate=0.0, positional_dropout_rate=0.0, attention_dropout_rate=0.0, normalize_before=True)
    state = {n: torch.from_numpy(np.array(g.read(n))) for n in names}
    model.load_state_dict(state, strict=True)
    return model.eval()
