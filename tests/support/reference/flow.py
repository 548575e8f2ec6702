"""Reference DiT estimator (stepaudio2 cosyvoice2 decoder_dit.DiT) with weights read from our
flow_matching.gguf (names: the state dict's 'decoder.estimator.*' minus 'decoder.')."""

from __future__ import annotations

import numpy as np
import torch

from llama_omni_py._native import core

from .stepaudio2_loader import load


def _count(names, prefix):
    idx = {int(n[len(prefix) :].split(".")[0]) for n in names if n.startswith(prefix)}
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
        model = dit_mod.DiT(
            in_channels=320,
            out_channels=80,
            mlp_ratio=mlp / hidden,
            depth=_count(names, "estimator.blocks."),
            num_heads=heads,
            head_dim=head_dim,
            hidden_size=hidden,
        )
    state = {n[len("estimator.") :]: torch.from_numpy(np.array(g.read(n))) for n in names}
    model.load_state_dict(state, strict=True, assign=True)
    return model.eval()


def build_encoder(encoder_gguf: str) -> torch.nn.Module:
    enc_mod = load("stepaudio2.cosyvoice2.transformer.upsample_encoder_v2")
    g = core.GgufFile(encoder_gguf)
    names = [t.name for t in g.tensors]
    d_in, d = g.find_tensor("embed.out.0.weight").ne
    d_head, heads = g.find_tensor("encoders.0.self_attn.pos_bias_u").ne
    model = enc_mod.UpsampleConformerEncoderV2(
        input_size=d_in,
        output_size=d,
        pre_lookahead_len=3,
        num_blocks=_count(names, "encoders."),
        num_up_blocks=_count(names, "up_encoders."),
        up_stride=2,
        up_scale_factor=2,
        attention_heads=heads,
        key_bias=True,
        linear_units=g.find_tensor("encoders.0.feed_forward.w_1.weight").ne[1],
        dropout_rate=0.0,
        positional_dropout_rate=0.0,
        attention_dropout_rate=0.0,
        normalize_before=True,
    )
    state = {n: torch.from_numpy(np.array(g.read(n))) for n in names}
    model.load_state_dict(state, strict=True)
    return model.eval()


def build_flow(token2wav_dir: str, n_steps: int, max_frames: int = 1000, noise_frames: int = 3000, seed: int = 0):
    """The reference CausalMaskedDiffWithXvec (encoder + CFM(DiT) + flow_extra weights) built from
    our files, with scratch buffers sized for these dimensions and a seeded `rand_noise`."""
    flow_mod = load("stepaudio2.cosyvoice2.flow.flow")
    cfm_mod = load("stepaudio2.cosyvoice2.flow.flow_matching")
    encoder = build_encoder(f"{token2wav_dir}/encoder.gguf")
    dit = build_dit(f"{token2wav_dir}/flow_matching.gguf")
    depth, heads = len(dit.blocks), dit.blocks[0].attn.num_heads
    hidden, head_dim = dit.in_proj.out_features, dit.blocks[0].attn.head_dim
    dit.cnn_cache_buffer = torch.zeros(depth, 2, 2 * hidden, 2)
    dit.att_cache_buffer = torch.zeros(depth, 2, heads, max_frames, 2 * head_dim)
    with torch.device("meta"):  # skip the 2 GB of real-size scratch buffers
        cfm = cfm_mod.CausalConditionalCFM(dit, inference_cfg_rate=0.7)
    cfm.estimator = dit
    gen = torch.Generator().manual_seed(seed)
    cfm.rand_noise = torch.randn(1, 80, noise_frames, generator=gen)
    cfm.cnn_cache_buffer = torch.zeros(n_steps, depth, 2, 2 * hidden, 2)
    cfm.att_cache_buffer = torch.zeros(n_steps, depth, 2, heads, max_frames, 2 * head_dim)
    d = encoder.output_size()
    flow = flow_mod.CausalMaskedDiffWithXvec(
        input_size=d, output_size=80, spk_embed_dim=192, vocab_size=6561, encoder=encoder, decoder=cfm
    )
    g = core.GgufFile(f"{token2wav_dir}/flow_extra.gguf")
    state = {t.name: torch.from_numpy(np.array(g.read(t.name))) for t in g.tensors}
    missing, unexpected = flow.load_state_dict(state, strict=False)
    assert not unexpected and all(k.startswith(("encoder.", "decoder.")) for k in missing), (missing, unexpected)
    return flow.eval()
