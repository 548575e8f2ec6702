"""WavLM as the official Seed-TTS speaker model sees it: s3prl's WavLM, run as transformers'
``WavLMModel``, with s3prl's checkpoint names mapped onto transformers' (the mapping is exact
for WavLM with gated relative position bias; docs/evaluation.md#seed-tts-wer-and-sim).

The hidden states the speaker head weights are s3prl's: the input of each transformer layer and
the encoder's output, which for the layer-norm-first (Large) variant is the final layer norm of
the last layer's output -- transformers' ``output_hidden_states`` gives exactly these
(``num_hidden_layers + 1`` tensors).

The configuration comes from one of two places:
- s3prl's ``wavlm_large.pt`` (a dict with ``cfg`` and ``model``), the file the official
  pipeline loads; its ``cfg["normalize"]`` says whether each waveform is layer-normalised;
- a transformers folder (``config.json``; ``preprocessor_config.json``'s ``do_normalize`` stands
  in for the normalise flag).
"""

from __future__ import annotations

import ast
import json
import os
import re
from dataclasses import dataclass

from ...errors import ModelFileError
from .. import deps as _deps

# s3prl WavLMConfig defaults for the fields the mapping reads (a cfg may omit any of them).
S3PRL_DEFAULTS = {
    "extractor_mode": "default",
    "encoder_layers": 12,
    "encoder_embed_dim": 768,
    "encoder_ffn_embed_dim": 3072,
    "encoder_attention_heads": 12,
    "activation_fn": "gelu",
    "layer_norm_first": False,
    "conv_feature_layers": "[(512,10,5)] + [(512,3,2)] * 4 + [(512,2,2)] * 2",
    "conv_bias": False,
    "normalize": False,
    "conv_pos": 128,
    "conv_pos_groups": 16,
    "relative_position_embedding": False,
    "num_buckets": 320,
    "max_distance": 1280,
    "gru_rel_pos": False,
}


@dataclass(frozen=True)
class WavLMSource:
    """A loaded WavLM: the transformers model (base weights in), whether waveforms are
    layer-normalised, and where that flag was read."""

    model: object
    normalize: bool
    normalize_source: str


def _literal(node):
    """Value of a conv layer spec expression: lists/tuples of ints joined by ``+`` and ``*``."""
    if isinstance(node, ast.Expression):
        return _literal(node.body)
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_literal(e) for e in node.elts]
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mult)):
        a, b = _literal(node.left), _literal(node.right)
        return a + b if isinstance(node.op, ast.Add) else a * b
    raise ValueError(f"unsupported expression {ast.dump(node)}")


def conv_layers(spec: str) -> list[tuple[int, int, int]]:
    """``"[(512,10,5)] + [(512,3,2)] * 4"`` -> ``[(512, 10, 5), (512, 3, 2), ...]`` (no eval)."""
    try:
        layers = _literal(ast.parse(spec, mode="eval"))
        return [(int(d), int(k), int(s)) for d, k, s in layers]
    except (SyntaxError, ValueError, TypeError) as e:
        raise ModelFileError(f"conv_feature_layers {spec!r} is not a list of (dim, kernel, stride): {e}") from None


def config_from_s3prl(cfg: dict):
    """transformers ``WavLMConfig`` equal to an s3prl WavLM cfg (inference: no dropout)."""
    c = {**S3PRL_DEFAULTS, **cfg}
    unsupported = [
        f"{k}={c[k]!r}"
        for k, ok in (
            ("relative_position_embedding", True),
            ("gru_rel_pos", True),
            ("activation_fn", "gelu"),
        )
        if c[k] != ok
    ]
    if c["extractor_mode"] not in ("default", "layer_norm"):
        unsupported.append(f"extractor_mode={c['extractor_mode']!r}")
    if unsupported:
        raise ModelFileError(f"WavLM cfg not supported by the transformers mapping: {', '.join(unsupported)}")
    convs = conv_layers(c["conv_feature_layers"])
    tf = _deps.transformers()
    return tf.WavLMConfig(
        hidden_size=c["encoder_embed_dim"],
        num_hidden_layers=c["encoder_layers"],
        num_attention_heads=c["encoder_attention_heads"],
        intermediate_size=c["encoder_ffn_embed_dim"],
        hidden_act="gelu",
        feat_extract_activation="gelu",
        feat_extract_norm="layer" if c["extractor_mode"] == "layer_norm" else "group",
        conv_dim=[d for d, _, _ in convs],
        conv_kernel=[k for _, k, _ in convs],
        conv_stride=[s for _, _, s in convs],
        conv_bias=bool(c["conv_bias"]),
        do_stable_layer_norm=bool(c["layer_norm_first"]),
        num_conv_pos_embeddings=c["conv_pos"],
        num_conv_pos_embedding_groups=c["conv_pos_groups"],
        num_buckets=c["num_buckets"],
        max_bucket_distance=c["max_distance"],
        layer_norm_eps=1e-5,
        hidden_dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
        feat_proj_dropout=0.0,
        layerdrop=0.0,
    )


# transformers WavLMModel names -> s3prl names (below the WavLM module), by module or by tensor.
_TOP = {
    "feature_projection.layer_norm": "layer_norm",
    "feature_projection.projection": "post_extract_proj",
    "masked_spec_embed": "mask_emb",
    "encoder.pos_conv_embed.conv.bias": "encoder.pos_conv.0.bias",
    "encoder.pos_conv_embed.conv.weight_g": "encoder.pos_conv.0.weight_g",
    "encoder.pos_conv_embed.conv.weight_v": "encoder.pos_conv.0.weight_v",
    "encoder.pos_conv_embed.conv.parametrizations.weight.original0": "encoder.pos_conv.0.weight_g",
    "encoder.pos_conv_embed.conv.parametrizations.weight.original1": "encoder.pos_conv.0.weight_v",
    "encoder.layer_norm": "encoder.layer_norm",
}
_LAYER = {  # inside encoder.layers.N
    **{f"attention.{p}_proj": f"self_attn.{p}_proj" for p in ("q", "k", "v", "out")},
    "attention.rel_attn_embed": "self_attn.relative_attention_bias",
    "attention.gru_rel_pos_linear": "self_attn.grep_linear",
    "attention.gru_rel_pos_const": "self_attn.grep_a",
    "layer_norm": "self_attn_layer_norm",
    "feed_forward.intermediate_dense": "fc1",
    "feed_forward.output_dense": "fc2",
    "final_layer_norm": "final_layer_norm",
}
_CONV = re.compile(r"feature_extractor\.conv_layers\.(\d+)\.(conv|layer_norm)\.(weight|bias)\Z")
_ENC_LAYER = re.compile(r"encoder\.layers\.(\d+)\.(.+)\Z")
# Newer torch saves a weight-normed conv's halves under these names.
_WEIGHT_NORM_ALIASES = {
    "weight_g": "parametrizations.weight.original0",
    "weight_v": "parametrizations.weight.original1",
}


def _lookup(name: str, table: dict) -> str | None:
    if name in table:
        return table[name]
    module, _, leaf = name.rpartition(".")
    return f"{table[module]}.{leaf}" if module in table else None


def official_name(name: str, config) -> str:
    """s3prl's name of a transformers WavLMModel tensor. A conv block is ``Sequential(conv,
    dropout, norm, GELU)``; its norm sits at ``.2.1`` (a LayerNorm between two transposes, every
    block) or ``.2`` (GroupNorm, block 0)."""
    m = _CONV.match(name)
    if m:
        part = "0" if m[2] == "conv" else ("2.1" if config.feat_extract_norm == "layer" else "2")
        return f"feature_extractor.conv_layers.{m[1]}.{part}.{m[3]}"
    m = _ENC_LAYER.match(name)
    inner = _lookup(m[2], _LAYER) if m else None
    found = f"encoder.layers.{m[1]}.{inner}" if inner else _lookup(name, _TOP)
    if found is None:
        raise ModelFileError(f"no s3prl name known for WavLM tensor {name}")
    return found


@dataclass(frozen=True)
class Mapped:
    """s3prl tensors renamed for a transformers model, the s3prl names the state lacked, and the
    state's names no tensor of the model takes."""

    state: dict
    missing: tuple[str, ...]
    unexpected: tuple[str, ...]


def _no_projection(state: dict, config) -> bool:
    return config.conv_dim[-1] == config.hidden_size and "post_extract_proj.weight" not in state


def map_state_dict(state: dict, model) -> Mapped:
    """Rename an s3prl WavLM state dict for ``model`` (a transformers WavLMModel)."""
    out, missing, used = {}, [], set()
    for name, tensor in model.state_dict().items():
        s3 = official_name(name, model.config)
        if s3.startswith("post_extract_proj.") and _no_projection(state, model.config):
            # s3prl has no projection when the conv output already has the model width
            torch = _deps.torch()
            out[name] = torch.eye(tensor.shape[0]) if s3.endswith("weight") else torch.zeros_like(tensor)
            continue
        head, _, leaf = s3.rpartition(".")
        for key in (s3, f"{head}.{_WEIGHT_NORM_ALIASES.get(leaf, leaf)}"):
            if key in state:
                out[name] = state[key]
                used.add(key)
                break
        else:
            missing.append(s3)
    return Mapped(out, tuple(missing), tuple(k for k in state if k not in used))


def _numpy_scalars() -> list:
    """numpy scalar and dtype reconstructors, allowed in a weights-only load: training scripts
    save metrics such as ``best_valid_eer`` as numpy floats. Files pickled under numpy 1 name the
    scalar ``numpy.core.multiarray.scalar``."""
    import numpy as np

    scalar = np._core.multiarray.scalar if hasattr(np, "_core") else np.core.multiarray.scalar
    dtypes = [type(np.dtype(t)) for t in ("float64", "float32", "float16", "int64", "int32", "bool")]
    return [scalar, (scalar, "numpy.core.multiarray.scalar"), np.dtype, *dtypes]


def load_checkpoint(path: str, what: str, allow_pickle: bool = False) -> dict:
    """``torch.load`` on the CPU (memory-mapped when the file's format allows it); tensors,
    containers and numpy scalars only unless ``allow_pickle``."""
    torch = _deps.torch()
    if not os.path.isfile(path):
        raise ModelFileError(f"{what} not found", path)
    with torch.serialization.safe_globals(_numpy_scalars()):
        try:
            return torch.load(path, map_location="cpu", mmap=True, weights_only=not allow_pickle)
        except Exception:  # noqa: BLE001 -- a legacy (non-zip) file cannot be memory-mapped: retry
            pass
        try:
            return torch.load(path, map_location="cpu", weights_only=not allow_pickle)
        except Exception as e:  # noqa: BLE001 -- torch.load raises pickle, zip and runtime errors alike
            hint = "" if allow_pickle else " (if it holds more than tensors and you trust it, pass allow_pickle=True)"
            raise ModelFileError(f"cannot read {what}: {e}{hint}", path) from None


def _from_s3prl(path: str, allow_pickle: bool) -> WavLMSource:
    ckpt = load_checkpoint(path, "s3prl WavLM checkpoint", allow_pickle)
    if not isinstance(ckpt, dict) or "cfg" not in ckpt or "model" not in ckpt:
        raise ModelFileError("not an s3prl WavLM checkpoint: expected a dict with 'cfg' and 'model'", path)
    cfg = dict(ckpt["cfg"])
    model = _deps.transformers().WavLMModel(config_from_s3prl(cfg))
    mapped = map_state_dict(ckpt["model"], model)
    if mapped.missing:
        raise ModelFileError(f"s3prl WavLM checkpoint lacks {list(mapped.missing)[:8]}", path)
    load_tensors(model, mapped.state, path)
    return WavLMSource(model, bool(cfg.get("normalize", S3PRL_DEFAULTS["normalize"])), f"{path}: cfg['normalize']")


def _from_transformers(path: str) -> WavLMSource:
    pre = os.path.join(path, "preprocessor_config.json")
    if not os.path.isfile(os.path.join(path, "config.json")) or not os.path.isfile(pre):
        raise ModelFileError("not a transformers WavLM folder: config.json and preprocessor_config.json needed", path)
    with open(pre, encoding="utf-8") as f:
        do_normalize = json.load(f).get("do_normalize")
    if not isinstance(do_normalize, bool):
        raise ModelFileError("preprocessor_config.json has no boolean do_normalize", path)
    tf = _deps.transformers()
    try:
        model = tf.WavLMModel.from_pretrained(path, local_files_only=True, torch_dtype=_deps.torch().float32)
    except (OSError, ValueError) as e:
        raise ModelFileError(f"cannot load WavLM: {e}", path) from None
    return WavLMSource(model, do_normalize, f"{pre}: do_normalize")


def load_tensors(module, state: dict, path: str) -> None:
    """``load_state_dict(strict=False)``; a shape mismatch is a ModelFileError."""
    try:
        module.load_state_dict(state, strict=False)
    except RuntimeError as e:
        raise ModelFileError(f"weights do not fit the model's shapes: {e}", path) from None


def load_wavlm(path: str, *, allow_pickle: bool = False) -> WavLMSource:
    """WavLM from an s3prl checkpoint file or a transformers folder, in eval mode, float32."""
    if os.path.isdir(path):
        src = _from_transformers(path)
    elif os.path.isfile(path):
        src = _from_s3prl(path, allow_pickle)
    else:
        raise ModelFileError("WavLM checkpoint or folder not found", path)
    src.model.eval()
    return src
