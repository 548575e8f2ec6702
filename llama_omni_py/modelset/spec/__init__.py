"""The one table of MiniCPM-o 4.5 module files (llama.cpp-omni's GGUF module set).

Every file of a module set is a :class:`FileSpec`: where it lives, which architecture string
it carries, and its tensors and metadata as functions of the set's dimensions. The
generator writes from this table, the validator checks against it, and the native loaders
mirror it. Per-file facts: docs/model-files.md.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

from .common import (
    APM_FILE,
    AUDIO_TOKENS,
    F16,
    F32,
    LLM_FILE,
    LLM_FILE_GLOB,
    PROJECTOR_FILE,
    SILENCE_TOKEN,
    SPECIAL_TOKEN_BASE,
    SPECIAL_TOKENS,
    T2W_DIR,
    T2W_FILES,
    T2W_VOCAB,
    TTS_FILE,
    VPM_FILE,
    KeyRule,
    Meta,
    TensorSpec,
)
from .encoders import (
    APM_KEYS,
    APM_REAL,
    APM_TINY,
    VPM_KEYS,
    VPM_REAL,
    VPM_TINY,
    ApmDims,
    VpmDims,
    apm_infer,
    apm_metadata,
    apm_tensors,
    vpm_infer,
    vpm_metadata,
    vpm_resampler_heads,
    vpm_tensors,
)
from .llm import LLM_BENCH, LLM_KEYS, LLM_TINY, LlmDims, llm_infer, llm_metadata, llm_tensors
from .token2wav import PROMPT_CACHE_KEYS, T2W_REAL, T2W_TABLES, T2W_TINY, T2wDims, prompt_cache_metadata, t2w_infer
from .tts import (
    PROJECTOR_REAL,
    PROJECTOR_TINY,
    TTS_KEYS,
    TTS_REAL,
    TTS_TINY,
    ProjectorDims,
    TtsDims,
    projector_infer,
    projector_metadata,
    projector_tensors,
    tts_infer,
    tts_metadata,
    tts_special_ids,
    tts_tensors,
    tts_vocab,
    tts_vocab_metadata,
)
from .vocab import Vocab, build_vocab, vocab_problems

MODULES = ("llm", "apm", "vpm", "tts", "projector", "token2wav")
SIZES = ("tiny", "real")


@dataclass(frozen=True)
class SetDims:
    """Dimensions of every module of one module set."""

    llm: LlmDims
    apm: ApmDims
    vpm: VpmDims
    tts: TtsDims
    projector: ProjectorDims
    t2w: T2wDims


def preset(size: str, vocab: Vocab | None = None) -> SetDims:
    """Dimensions of the ``tiny`` or ``real`` set (``real``: real APM/VPM/TTS/projector/
    Token2Wav, and LLM_BENCH -- the real Qwen3 widths and vocabulary with 2 layers)."""
    if size == "tiny":
        vocab = vocab or build_vocab(full_size=False)
        llm = replace(LLM_TINY, n_vocab=vocab.size)
        return SetDims(llm, APM_TINY, VPM_TINY, replace(TTS_TINY, text_vocab=vocab.size), PROJECTOR_TINY, T2W_TINY)
    if size == "real":
        return SetDims(LLM_BENCH, APM_REAL, VPM_REAL, TTS_REAL, PROJECTOR_REAL, T2W_REAL)
    raise ValueError(f"size must be one of {SIZES}, got {size!r}")


@dataclass(frozen=True)
class FileSpec:
    module: str  # one of MODULES
    key: str  # "llm", "apm", ..., "token2wav.encoder"
    relpath: str  # path inside the model directory
    architecture: str | None  # expected general.architecture (None: file has no metadata)
    tensors: Callable[[SetDims], list[TensorSpec]]
    metadata: Callable[[SetDims], Meta]
    keys: tuple[KeyRule, ...] = ()  # metadata the loaders need (validated)
    vocab_rows: Callable[[SetDims], int] | None = None  # has a llama.cpp vocabulary of this many tokens


def _no_meta(_: SetDims) -> Meta:
    return []


FILES: tuple[FileSpec, ...] = (
    FileSpec(
        "llm",
        "llm",
        LLM_FILE,
        "qwen3",
        lambda d: llm_tensors(d.llm),
        lambda d: llm_metadata(d.llm),
        LLM_KEYS,
        lambda d: d.llm.n_vocab,
    ),
    FileSpec("apm", "apm", APM_FILE, "whisper", lambda d: apm_tensors(d.apm), lambda d: apm_metadata(d.apm), APM_KEYS),
    FileSpec("vpm", "vpm", VPM_FILE, "clip", lambda d: vpm_tensors(d.vpm), lambda d: vpm_metadata(d.vpm), VPM_KEYS),
    FileSpec(
        "tts",
        "tts",
        TTS_FILE,
        "llama",
        lambda d: tts_tensors(d.tts),
        lambda d: tts_metadata(d.tts),
        TTS_KEYS,
        lambda d: d.tts.token_rows,
    ),
    FileSpec(
        "projector",
        "projector",
        PROJECTOR_FILE,
        "projector",
        lambda d: projector_tensors(d.projector),
        lambda d: projector_metadata(d.projector),
    ),
    *(
        FileSpec(
            "token2wav",
            f"token2wav.{stem}",
            f"{T2W_DIR}/{stem}.gguf",
            None,
            (lambda fn: lambda d: fn(d.t2w))(T2W_TABLES[stem]),
            (lambda d: prompt_cache_metadata(d.t2w)) if stem == "prompt_cache" else _no_meta,
            PROMPT_CACHE_KEYS if stem == "prompt_cache" else (),
        )
        for stem in T2W_FILES
    ),
)


def files_of(module: str) -> list[FileSpec]:
    if module not in MODULES:
        raise ValueError(f"unknown module {module!r}; modules are {', '.join(MODULES)}")
    return [f for f in FILES if f.module == module]


def infer_dims(module: str, readers: dict) -> object:
    """Dimensions of ``module`` read back from its opened file(s) (dict: FileSpec.key -> reader)."""
    if module == "llm":
        return llm_infer(readers["llm"])
    if module == "apm":
        return apm_infer(readers["apm"])
    if module == "vpm":
        return vpm_infer(readers["vpm"])
    if module == "tts":
        return tts_infer(readers["tts"])
    if module == "projector":
        return projector_infer(readers["projector"])
    if module == "token2wav":
        return t2w_infer({k.split(".", 1)[1]: r for k, r in readers.items()})
    raise ValueError(f"unknown module {module!r}")


def set_dims_field(module: str) -> str:
    return {"token2wav": "t2w"}.get(module, module)


__all__ = [
    "APM_FILE",
    "AUDIO_TOKENS",
    "F16",
    "F32",
    "FILES",
    "FileSpec",
    "LLM_FILE",
    "LLM_FILE_GLOB",
    "MODULES",
    "KeyRule",
    "PROJECTOR_FILE",
    "SILENCE_TOKEN",
    "SIZES",
    "SPECIAL_TOKENS",
    "SPECIAL_TOKEN_BASE",
    "SetDims",
    "T2W_DIR",
    "T2W_FILES",
    "T2W_VOCAB",
    "TTS_FILE",
    "TensorSpec",
    "VPM_FILE",
    "Vocab",
    "build_vocab",
    "files_of",
    "apm_metadata",
    "infer_dims",
    "preset",
    "set_dims_field",
    "tts_special_ids",
    "tts_vocab",
    "tts_vocab_metadata",
    "vocab_problems",
    "vpm_resampler_heads",
]
