"""Token2Wav files: token2wav-gguf/*.gguf, all F32.

encoder / flow_matching / flow_extra / hifigan2 carry no metadata (llama.cpp-omni hard-codes
the hyperparameters); names are the PyTorch state-dict names with the prefix stripped, HiFT
with weight norm folded. prompt_cache.gguf holds the fixed-voice caches and a few keys.
"""

from __future__ import annotations

from dataclasses import dataclass

from .common import F32, T2W_VOCAB, KeyRule, Meta, TensorSpec, _conv1d, _linear, _norm

MEL = 80
SPK_DIM = 192
TIMESTEP_DIM = 256
HIFT_UPSAMPLE = ((8, 16), (5, 11), (3, 7))  # (stride, kernel) per stage
HIFT_SOURCE_DOWN = ((15, 30), (3, 6), (1, 1))  # (stride, kernel) of source_downs.i
HIFT_SOURCE_KERNELS = (7, 7, 11)
HIFT_RESBLOCK_KERNELS = (3, 7, 11)
HIFT_F0_LAYERS = (0, 2, 4, 6, 8)
STFT_CHANNELS = 18  # 9 bins, real + imaginary


@dataclass(frozen=True)
class T2wDims:
    enc_dim: int = 512  # conformer width (= token embedding width)
    enc_heads: int = 8
    enc_ff: int = 2048
    enc_blocks: int = 6
    enc_up_blocks: int = 4
    dit_dim: int = 512
    dit_heads: int = 8
    dit_depth: int = 16
    dit_mlp: int = 2048
    hift_base: int = 512  # conv_pre channels; the stages run at base/2, base/4, base/8
    f0_channels: int = 512
    prompt_frames: int = 100  # mel frames of the fixed voice prompt (~2 s)
    cfm_steps: int = 5  # steps the prompt cache was built for


T2W_REAL = T2wDims()
T2W_TINY = T2wDims(
    enc_dim=64,
    enc_heads=2,
    enc_ff=128,
    enc_blocks=2,
    enc_up_blocks=2,
    dit_dim=64,
    dit_heads=2,
    dit_depth=2,
    dit_mlp=256,
    hift_base=32,
    f0_channels=32,
    prompt_frames=20,
)


def _conformer_block(p: str, d: int, heads: int, ff: int) -> list[TensorSpec]:
    dk = d // heads
    out = [
        TensorSpec(f"{p}.self_attn.pos_bias_u", (dk, heads), F32, "bias"),
        TensorSpec(f"{p}.self_attn.pos_bias_v", (dk, heads), F32, "bias"),
    ]
    for n in ("linear_q", "linear_k", "linear_v"):
        out += _linear(f"{p}.self_attn.{n}", d, d, dtype=F32)
    out += _linear(f"{p}.self_attn.linear_out", d, d, dtype=F32, gain=0.5)
    out += _linear(f"{p}.self_attn.linear_pos", d, d, dtype=F32, bias=False)
    out += _linear(f"{p}.feed_forward.w_1", d, ff, dtype=F32)
    out += _linear(f"{p}.feed_forward.w_2", ff, d, dtype=F32, gain=0.5)
    out += _norm(f"{p}.norm_ff", d) + _norm(f"{p}.norm_mha", d)
    return out


def encoder_tensors(d: T2wDims) -> list[TensorSpec]:
    e = d.enc_dim
    out = _linear("embed.out.0", e, e, dtype=F32) + _norm("embed.out.1", e) + _norm("after_norm", e)
    out += _conv1d("pre_lookahead_layer.conv1", e, e, 4) + _conv1d("pre_lookahead_layer.conv2", e, e, 3)
    for i in range(d.enc_blocks):
        out += _conformer_block(f"encoders.{i}", e, d.enc_heads, d.enc_ff)
    out += _conv1d("up_layer.conv", e, e, 5)
    out += _linear("up_embed.out.0", e, e, dtype=F32) + _norm("up_embed.out.1", e)
    for i in range(d.enc_up_blocks):
        out += _conformer_block(f"up_encoders.{i}", e, d.enc_heads, d.enc_ff)
    return out


def flow_matching_tensors(d: T2wDims) -> list[TensorSpec]:
    h, dk = d.dit_dim, d.dit_dim // d.dit_heads
    p = "estimator"
    out = _linear(f"{p}.t_embedder.mlp.0", TIMESTEP_DIM, h, dtype=F32) + _linear(
        f"{p}.t_embedder.mlp.2", h, h, dtype=F32
    )
    out += _linear(f"{p}.in_proj", 4 * MEL, h, dtype=F32)
    for i in range(d.dit_depth):
        b = f"{p}.blocks.{i}"
        for n in ("to_q", "to_k", "to_v"):
            out += _linear(f"{b}.attn.{n}", h, h, dtype=F32)
        out += _norm(f"{b}.attn.q_norm", dk) + _norm(f"{b}.attn.k_norm", dk)
        out += _linear(f"{b}.attn.proj", h, h, dtype=F32, gain=0.5)
        out += _linear(f"{b}.mlp.fc1", h, d.dit_mlp, dtype=F32) + _linear(
            f"{b}.mlp.fc2", d.dit_mlp, h, dtype=F32, gain=0.5
        )
        out += _conv1d(f"{b}.conv.block.1", h, h, 3) + _norm(f"{b}.conv.block.3", h)
        out += _conv1d(f"{b}.conv.block.6", h, h, 3, gain=0.5)
        out += _linear(f"{b}.adaLN_modulation.1", h, 9 * h, dtype=F32, gain=0.2)
    out += _linear(f"{p}.final_layer.adaLN_modulation.1", h, 2 * h, dtype=F32, gain=0.2)
    out += _linear(f"{p}.final_layer.linear", h, MEL, dtype=F32)
    return out


def flow_extra_tensors(d: T2wDims) -> list[TensorSpec]:
    return (
        [TensorSpec("input_embedding.weight", (d.enc_dim, T2W_VOCAB), F32, "embed")]
        + _linear("spk_embed_affine_layer", SPK_DIM, MEL, dtype=F32)
        + _linear("encoder_proj", d.enc_dim, MEL, dtype=F32)
    )


def hift_stage_channels(d: T2wDims) -> tuple[int, int, int]:
    return d.hift_base // 2, d.hift_base // 4, d.hift_base // 8


def _resblock(p: str, ch: int, k: int) -> list[TensorSpec]:
    out: list[TensorSpec] = []
    for j in range(3):
        out += _conv1d(f"{p}.convs1.{j}", ch, ch, k, gain=0.5) + _conv1d(f"{p}.convs2.{j}", ch, ch, k, gain=0.5)
    for j in range(3):
        out.append(TensorSpec(f"{p}.activations1.{j}.alpha", (ch,), F32, "alpha"))
        out.append(TensorSpec(f"{p}.activations2.{j}.alpha", (ch,), F32, "alpha"))
    return out


def hifigan_tensors(d: T2wDims) -> list[TensorSpec]:
    base, stages = d.hift_base, hift_stage_channels(d)
    out = _linear("m_source.l_linear", 9, 1, dtype=F32)
    out += _conv1d("conv_pre", MEL, base, 7)
    ch_in = base
    for i, (ch, (_, k)) in enumerate(zip(stages, HIFT_UPSAMPLE)):
        # ConvTranspose1d (in, out, k) -> ne [k, out, in]
        out += [
            TensorSpec(f"ups.{i}.weight", (k, ch, ch_in), F32, "linear", ch_in, 1.0),
            TensorSpec(f"ups.{i}.bias", (ch,), F32, "bias"),
        ]
        ch_in = ch
    for i, (ch, (_, k)) in enumerate(zip(stages, HIFT_SOURCE_DOWN)):
        out += _conv1d(f"source_downs.{i}", STFT_CHANNELS, ch, k)
    for i, (ch, k) in enumerate(zip(stages, HIFT_SOURCE_KERNELS)):
        out += _resblock(f"source_resblocks.{i}", ch, k)
    for s, ch in enumerate(stages):
        for r, k in enumerate(HIFT_RESBLOCK_KERNELS):
            out += _resblock(f"resblocks.{3 * s + r}", ch, k)
    out += _conv1d("conv_post", stages[-1], STFT_CHANNELS, 7)
    f = d.f0_channels
    for n, layer in enumerate(HIFT_F0_LAYERS):
        out += _conv1d(f"f0_predictor.condnet.{layer}", MEL if n == 0 else f, f, 3)
    out += _linear("f0_predictor.classifier", f, 1, dtype=F32)
    return out


def prompt_cache_tensors(d: T2wDims) -> list[TensorSpec]:
    t, steps = d.prompt_frames, d.cfm_steps
    enc_dk, dit_dk = d.enc_dim // d.enc_heads, d.dit_dim // d.dit_heads
    p = "prompt_cache"
    return [
        TensorSpec(f"{p}.spk_cb", (SPK_DIM,), F32, "embed"),
        TensorSpec(f"{p}.conformer_cnn_cache", (d.enc_dim, 6), F32, "embed"),
        TensorSpec(
            f"{p}.conformer_att_cache", (2 * enc_dk, t, d.enc_heads, d.enc_blocks + d.enc_up_blocks), F32, "embed"
        ),
        TensorSpec(f"{p}.estimator_cnn_cache", (2 * d.dit_dim, 2, steps * d.dit_depth, 2), F32, "embed"),
        TensorSpec(f"{p}.estimator_att_cache", (2 * dit_dk, t, steps * d.dit_depth * d.dit_heads, 2), F32, "embed"),
    ]


def prompt_cache_metadata(d: T2wDims) -> Meta:
    p = "mtmd.prompt_cache"
    return [
        (f"{p}.version", "int32", 2),
        (f"{p}.n_timesteps", "int32", d.cfm_steps),
        (f"{p}.temperature", "float32", 1.0),
        (f"{p}.pre_lookahead", "int32", 3),
        (f"{p}.chunk_main", "int32", 25),
        (f"{p}.chunk_total", "int32", 28),
        (f"{p}.up_rate", "int32", 2),
    ]


# llama.cpp-omni reads n_timesteps if present (it must match the run's steps); we require it.
PROMPT_CACHE_KEYS = (KeyRule("mtmd.prompt_cache.n_timesteps", "int"),)


T2W_TABLES = {
    "encoder": encoder_tensors,
    "flow_matching": flow_matching_tensors,
    "flow_extra": flow_extra_tensors,
    "hifigan2": hifigan_tensors,
    "prompt_cache": prompt_cache_tensors,
}


def _count(names, prefix: str) -> int:
    idx = {int(n[len(prefix) :].split(".")[0]) for n in names if n.startswith(prefix)}
    return max(idx) + 1 if idx else 0


def t2w_infer(files: dict) -> T2wDims:
    """Dimensions from the five opened files (dict: stem -> reader)."""
    enc, fm, hg, pc = files["encoder"], files["flow_matching"], files["hifigan2"], files["prompt_cache"]
    enc_dk, enc_heads = enc.tensor_ne("encoders.0.self_attn.pos_bias_u")
    dit_dim = fm.tensor_ne("estimator.in_proj.weight")[1]
    dit_dk = fm.tensor_ne("estimator.blocks.0.attn.q_norm.weight")[0]
    return T2wDims(
        enc_dim=enc.tensor_ne("embed.out.0.weight")[1],
        enc_heads=enc_heads,
        enc_ff=enc.tensor_ne("encoders.0.feed_forward.w_1.weight")[1],
        enc_blocks=_count(enc.tensor_names(), "encoders."),
        enc_up_blocks=_count(enc.tensor_names(), "up_encoders."),
        dit_dim=dit_dim,
        dit_heads=max(1, dit_dim // max(1, dit_dk)),
        dit_depth=_count(fm.tensor_names(), "estimator.blocks."),
        dit_mlp=fm.tensor_ne("estimator.blocks.0.mlp.fc1.weight")[1],
        hift_base=hg.tensor_ne("conv_pre.weight")[2],
        f0_channels=hg.tensor_ne("f0_predictor.condnet.0.weight")[2],
        prompt_frames=pc.tensor_ne("prompt_cache.conformer_att_cache")[1],
        cfm_steps=pc.get_int("mtmd.prompt_cache.n_timesteps"),
    )
