"""Audio (APM) and vision (VPM) encoder files."""

from __future__ import annotations

from dataclasses import dataclass

from .common import F16, F32, KeyRule, Meta, TensorSpec, _b, _linear, _norm, _w
from .llm import LLM_TINY


# =======================================================================================
# APM: Whisper-medium encoder + projector (convert_apm layout).
@dataclass(frozen=True)
class ApmDims:
    d_model: int
    n_layer: int
    n_head: int
    n_ff: int
    llm_embd: int
    n_mel: int = 80
    n_audio_ctx: int = 1500
    pool_step: int = 5
    n_fft_bins: int = 201  # width of the mel filter bank (n_fft 400); the file's "n_fft" key


APM_REAL = ApmDims(1024, 24, 16, 4096, 4096)
APM_TINY = ApmDims(64, 2, 4, 256, LLM_TINY.n_embd)


def apm_tensors(d: ApmDims) -> list[TensorSpec]:
    m = d.d_model
    out = [
        _w("encoder.conv1.weight", (3, d.n_mel, m), fan_in=3 * d.n_mel),
        _b("encoder.conv1.bias", (1, m)),
        _w("encoder.conv2.weight", (3, m, m), fan_in=3 * m),
        _b("encoder.conv2.bias", (1, m)),
        TensorSpec("encoder.positional_embedding", (m, d.n_audio_ctx), F32, "embed"),
    ]
    for i in range(d.n_layer):
        p = f"encoder.blocks.{i}"
        out += _norm(f"{p}.attn_ln", m)
        out += _linear(f"{p}.attn.query", m, m)
        out += _linear(f"{p}.attn.key", m, m, bias=False)
        out += _linear(f"{p}.attn.value", m, m)
        out += _linear(f"{p}.attn.out", m, m, gain=0.5)
        out += _norm(f"{p}.mlp_ln", m)
        out += _linear(f"{p}.mlp.0", m, d.n_ff)
        out += _linear(f"{p}.mlp.2", d.n_ff, m, gain=0.5)
    out += _norm("encoder.ln_post", m)
    out += _linear("audio_projector.linear1", m, d.llm_embd)
    out += _linear("audio_projector.linear2", d.llm_embd, d.llm_embd)
    return out


def apm_metadata(d: ApmDims, mel_filters: list[float] | None = None) -> Meta:
    n_fft_bins = d.n_fft_bins  # the file stores the filter width, not n_fft
    return [
        ("general.architecture", "string", "whisper"),
        ("general.file_type", "uint32", 1),
        ("general.description", "string", "audio encoder for MiniCPM-omni"),
        ("encoder_attention_heads", "uint32", d.n_head),
        ("encoder_ffn_dim", "uint32", d.n_ff),
        ("encoder_layers", "uint32", d.n_layer),
        ("num_hidden_layers", "uint32", d.n_layer),
        ("d_model", "uint32", d.d_model),
        ("audio_pool_step", "uint32", d.pool_step),
        ("use_f16", "uint32", 1),
        ("n_mel", "uint32", d.n_mel),
        ("n_fft", "uint32", n_fft_bins),
        ("filters", "float32[]", mel_filters if mel_filters is not None else [0.0] * (d.n_mel * n_fft_bins)),
    ]


def apm_infer(g) -> ApmDims:
    return ApmDims(
        d_model=g.get_int("d_model"),
        n_layer=g.get_int("encoder_layers"),
        n_head=g.get_int("encoder_attention_heads"),
        n_ff=g.get_int("encoder_ffn_dim"),
        llm_embd=g.tensor_ne("audio_projector.linear1.weight")[1],
        n_mel=g.get_int("n_mel", 80),
        n_audio_ctx=g.tensor_ne("encoder.positional_embedding")[1],
        pool_step=g.get_int("audio_pool_step", 5),
        n_fft_bins=g.get_int("n_fft", 400),  # the audio loader's default when the key is absent
    )


# What llama.cpp-omni's audio loader needs (docs/model-files.md): it copies n_mel x n_fft floats
# out of "filters".
APM_KEYS = (
    KeyRule("d_model", "int"),
    KeyRule("encoder_attention_heads", "int"),
    KeyRule("encoder_layers", "int"),
    KeyRule("filters", "float[]", length=lambda d: d.apm.n_mel * d.apm.n_fft_bins),
)


# =======================================================================================
# VPM: SigLIP + MiniCPM-V resampler (convert_vpm layout, version 100045).
@dataclass(frozen=True)
class VpmDims:
    hidden: int
    n_layer: int
    n_head: int
    n_ff: int
    llm_embd: int
    patch: int = 14
    image_size: int = 448
    pos_grid: int = 70
    query_num: int = 64


VPM_REAL = VpmDims(1152, 26, 16, 4304, 4096)
VPM_TINY = VpmDims(48, 2, 4, 96, LLM_TINY.n_embd)


def vpm_resampler_heads(d: VpmDims) -> int:
    return max(1, d.llm_embd // 128)  # MiniCPM-V: embed_dim // 128 heads


def vpm_tensors(d: VpmDims) -> list[TensorSpec]:
    h, e, npos = d.hidden, d.llm_embd, d.pos_grid * d.pos_grid
    out = [
        _w("v.patch_embd.weight", (d.patch, d.patch, 3, h), fan_in=3 * d.patch * d.patch),
        _b("v.patch_embd.bias", h),
        TensorSpec("v.position_embd.weight", (h, npos), F16, "embed"),
    ]
    for i in range(d.n_layer):
        p = f"v.blk.{i}"
        for n in ("attn_q", "attn_k", "attn_v"):
            out += _linear(f"{p}.{n}", h, h)
        out += _linear(f"{p}.attn_out", h, h, gain=0.5)
        out += _norm(f"{p}.ln1", h)
        out += _linear(f"{p}.ffn_down", h, d.n_ff)  # converter's name for fc1 (in -> ff)
        out += _linear(f"{p}.ffn_up", d.n_ff, h, gain=0.5)  # ... and for fc2
        out += _norm(f"{p}.ln2", h)
    out += _norm("v.post_ln", h)
    out += [
        TensorSpec("resampler.query", (e, d.query_num), F32, "embed"),
        _w("resampler.kv.weight", (h, e)),
    ]
    for n in ("q", "k", "v"):
        out += _linear(f"resampler.attn.{n}", e, e)
    out += _linear("resampler.attn.out", e, e)
    for n in ("ln_q", "ln_kv", "ln_post"):
        out += _norm(f"resampler.{n}", e)
    out += [
        _w("resampler.proj.weight", (e, e)),
        TensorSpec("resampler.pos_embed_k", (e, npos), F32, "fixed"),
    ]
    return out


def vpm_metadata(d: VpmDims) -> Meta:
    return [
        ("general.architecture", "string", "clip"),
        ("clip.has_text_encoder", "bool", False),
        ("clip.has_vision_encoder", "bool", True),
        ("clip.has_minicpmv_projector", "bool", True),
        ("general.file_type", "uint32", 1),
        ("general.description", "string", "image encoder for MiniCPM-V"),
        ("clip.projector_type", "string", "resampler"),
        ("clip.minicpmv_version", "int32", 100045),
        ("clip.vision.image_size", "uint32", d.image_size),
        ("clip.vision.patch_size", "uint32", d.patch),
        ("clip.vision.embedding_length", "uint32", d.hidden),
        ("clip.vision.feed_forward_length", "uint32", d.n_ff),
        ("clip.vision.projection_dim", "uint32", 0),
        ("clip.vision.attention.head_count", "uint32", d.n_head),
        ("clip.vision.attention.layer_norm_epsilon", "float32", 1e-6),
        ("clip.vision.block_count", "uint32", d.n_layer),
        ("clip.minicpmv_query_num", "uint32", d.query_num),
        ("clip.vision.image_mean", "float32[]", [0.5, 0.5, 0.5]),
        ("clip.vision.image_std", "float32[]", [0.5, 0.5, 0.5]),
        ("clip.use_gelu", "bool", True),
    ]


# What llama.cpp-omni's vision loader needs (docs/model-files.md).
VPM_KEYS = (
    *(
        KeyRule(f"clip.vision.{k}", "int")
        for k in (
            "embedding_length",
            "attention.head_count",
            "feed_forward_length",
            "block_count",
            "projection_dim",
            "image_size",
            "patch_size",
        )
    ),
    KeyRule("clip.vision.attention.layer_norm_epsilon", "float"),
    KeyRule("clip.vision.image_mean", "float[]", length=lambda d: 3),
    KeyRule("clip.vision.image_std", "float[]", length=lambda d: 3),
    KeyRule("clip.minicpmv_version", "int", required=False),
)


def vpm_infer(g) -> VpmDims:
    npos = g.tensor_ne("v.position_embd.weight")[1]
    grid = int(round(npos**0.5))
    return VpmDims(
        hidden=g.get_int("clip.vision.embedding_length"),
        n_layer=g.get_int("clip.vision.block_count"),
        n_head=g.get_int("clip.vision.attention.head_count"),
        n_ff=g.get_int("clip.vision.feed_forward_length"),
        llm_embd=g.tensor_ne("resampler.query")[0],
        patch=g.get_int("clip.vision.patch_size"),
        image_size=g.get_int("clip.vision.image_size", 448),
        pos_grid=grid,
        query_num=g.get_int("clip.minicpmv_query_num", 64),
    )
