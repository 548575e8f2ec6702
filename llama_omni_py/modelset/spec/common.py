"""Shared pieces of the module table: names, shapes, dtypes and metadata.

It describes llama.cpp-omni's GGUF module set exactly (docs/model-files.md) as a
function of each module's dimensions, so that the generator (:mod:`~llama_omni_py.modelset.generate`), the
validator (:mod:`models`) and the native loaders agree by construction. Shapes are ggml
``ne`` order (``ne[0]`` fastest; the reverse of numpy/PyTorch), e.g. a PyTorch
``Linear(in, out)`` weight is ``(in, out)`` here and a ``Conv1d(in, out, k)`` is ``(k, in, out)``.

Each module has a ``*Dims`` dataclass, presets ``TINY`` and ``REAL``, a ``tensors(dims)``
function and an ``infer(gguf)`` function that reads the dimensions back from a file.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

F32, F16 = "f32", "f16"

# ---------------------------------------------------------------------------------------
# Files of a module set (docs/model-files.md). Paths are relative to the model directory.
LLM_FILE = "MiniCPM-o-4_5-F16.gguf"
LLM_FILE_GLOB = "MiniCPM-o-4_5-*.gguf"
APM_FILE = "audio/MiniCPM-o-4_5-audio-F16.gguf"
VPM_FILE = "vision/MiniCPM-o-4_5-vision-F16.gguf"
TTS_FILE = "tts/MiniCPM-o-4_5-tts-F16.gguf"
PROJECTOR_FILE = "tts/MiniCPM-o-4_5-projector-F16.gguf"
T2W_DIR = "token2wav-gguf"
T2W_FILES = ("encoder", "flow_matching", "flow_extra", "hifigan2", "prompt_cache")


@dataclass(frozen=True)
class TensorSpec:
    """One tensor: name, ggml shape, dtype and how the generator initialises it.

    ``init`` is one of: ``linear`` (N(0, gain/sqrt(fan_in))), ``embed`` (N(0, 0.02)),
    ``norm`` (1 + N(0, 0.05)), ``bias`` (N(0, 0.02)), ``alpha`` (U(0.5, 1.5), positive),
    or ``fixed`` (values computed by the generator, e.g. sin-cos position tables).
    ``live_rows`` > 0: only the first rows (outermost ``ne``) get values, the rest are zero
    (a table zero-padded to a larger vocabulary).
    """

    name: str
    ne: tuple[int, ...]
    dtype: str
    init: str = "linear"
    fan_in: int = 0
    gain: float = 1.0
    live_rows: int = 0


def _w(name: str, ne: tuple[int, ...], dtype: str = F16, fan_in: int | None = None, gain: float = 1.0) -> TensorSpec:
    return TensorSpec(name, ne, dtype, "linear", fan_in if fan_in is not None else ne[0], gain)


def _b(name: str, n: int | tuple[int, ...]) -> TensorSpec:
    return TensorSpec(name, n if isinstance(n, tuple) else (n,), F32, "bias")


def _norm(prefix: str, n: int, bias: bool = True) -> list[TensorSpec]:
    out = [TensorSpec(f"{prefix}.weight", (n,), F32, "norm")]
    if bias:
        out.append(TensorSpec(f"{prefix}.bias", (n,), F32, "bias"))
    return out


def _linear(
    prefix: str, n_in: int, n_out: int, dtype: str = F16, bias: bool = True, gain: float = 1.0
) -> list[TensorSpec]:
    out = [_w(f"{prefix}.weight", (n_in, n_out), dtype, gain=gain)]
    if bias:
        out.append(_b(f"{prefix}.bias", n_out))
    return out


def _conv1d(prefix: str, n_in: int, n_out: int, k: int, dtype: str = F32, gain: float = 1.0) -> list[TensorSpec]:
    return [_w(f"{prefix}.weight", (k, n_in, n_out), dtype, fan_in=k * n_in, gain=gain), _b(f"{prefix}.bias", n_out)]


# Metadata entries: (key, gguf value type, value). Types follow the gguf spec names.
Meta = list[tuple[str, str, object]]


@dataclass(frozen=True)
class KeyRule:
    """A metadata key a loader needs (docs/model-files.md): its kind ("int", "float", "str",
    "bool", "str[]", "int[]", "float[]"), whether its absence is an error, and optionally the value
    or array length it must have, as a function of the set's dimensions (a SetDims)."""

    key: str
    kind: str
    required: bool = True
    value: Callable[[object], object] | None = None
    length: Callable[[object], int] | None = None


# ---------------------------------------------------------------------------------------
# MiniCPM-o / Qwen3 special tokens at their real ids. Ids in the
# gaps of the published table are filled with reserved placeholders so the vocabulary
# stays dense; the generator places this list at REAL ids when the vocabulary is full
# size and right after the ordinary tokens in the tiny set (same order, same names).
SPECIAL_TOKEN_BASE = 151643
_SPECIALS_BY_ID = {
    151643: "<|endoftext|>",
    151644: "<|im_start|>",
    151645: "<|im_end|>",
    151646: "<|object_ref_start|>",
    151647: "<|object_ref_end|>",
    151648: "<|box_start|>",
    151649: "<|box_end|>",
    151650: "<|quad_start|>",
    151651: "<|quad_end|>",
    151652: "<|vision_start|>",
    151653: "<|vision_end|>",
    151654: "<|vision_pad|>",
    151655: "<|image_pad|>",
    151656: "<|video_pad|>",
    151657: "<tool_call>",
    151658: "</tool_call>",
    151659: "<|fim_prefix|>",
    151660: "<|fim_middle|>",
    151661: "<|fim_suffix|>",
    151662: "<|fim_pad|>",
    151663: "<|repo_name|>",
    151664: "<|file_sep|>",
    151665: "<tool_response>",
    151666: "</tool_response>",
    151667: "<think>",
    151668: "</think>",
    151669: "<image>",
    151670: "</image>",
    151679: "<slice>",
    151680: "</slice>",
    151681: "<image_id>",
    151682: "</image_id>",
    151683: "<unit>",
    151684: "</unit>",
    151697: "<|audio_start|>",
    151698: "<|audio|>",
    151699: "<|audio_end|>",
    151700: "<|spk_bos|>",
    151701: "<|spk|>",
    151702: "<|spk_eos|>",
    151703: "<|tts_bos|>",
    151704: "<|tts_eos|>",
    151705: "<|listen|>",
    151706: "<|speak|>",
    151707: "<|interrupt|>",
    151708: "<|vad_start|>",
    151709: "<|vad_end|>",
    151716: "<|turn_bos|>",
    151717: "<|turn_eos|>",
    151718: "<|chunk_eos|>",
    151719: "<|chunk_bos|>",
    151720: "<|chunk_tts_bos|>",
    151721: "<|chunk_tts_eos|>",
    151722: "<|tts_pad|>",
    **{151723 + i: f"<|timbre_{7 + i}|>" for i in range(25)},
}
SPECIAL_TOKEN_COUNT = 151748 - SPECIAL_TOKEN_BASE  # ids 151643..151747
SPECIAL_TOKENS: tuple[str, ...] = tuple(
    _SPECIALS_BY_ID.get(SPECIAL_TOKEN_BASE + i, f"<|omni_reserved_{SPECIAL_TOKEN_BASE + i}|>")
    for i in range(SPECIAL_TOKEN_COUNT)
)
# TTS-side ids into emb_text, hard-coded in llama.cpp-omni.
TTS_AUDIO_BOS_ID = 151687
TTS_TEXT_EOS_ID = 151692
AUDIO_TOKENS = 6562  # 6561 speech codes + EOS (rel 6561)
T2W_VOCAB = 6561
SILENCE_TOKEN = 4218
