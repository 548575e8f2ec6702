"""Writes MiniCPM-o 4.5 module sets with random weights (``llama-omni make-models``).

Files, tensor names, shapes, dtypes and metadata come from :mod:`~llama_omni_py.modelset.spec` (llama.cpp-omni's
layout). ``tiny`` is the whole set in a few MB for tests and the demo; ``real`` has real
dimensions for APM, VPM, TTS, projector and Token2Wav and a 2-layer Qwen3 at real width and
vocabulary (benchmarks; ``llm_layers=36`` writes the whole 36-layer Qwen3, about 16 GB in F16).
Every tensor draws from its own generator seeded by (seed, file,
tensor name), so the same seed gives byte-identical files and ``--only`` subsets match a
full run. Weights are scaled by fan-in so activations stay finite through every module.
"""

from __future__ import annotations

import logging
import time
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from . import spec as ms
from .dsp import mel_filterbank, sincos_2d
from .gguf_writer import GGML_TYPES, GgufWriter
from .spec.llm import LLM_REAL

log = logging.getLogger(__name__)

_CHUNK = 1 << 24  # elements per generated chunk: bounds memory for multi-GB tensors
MAX_LLM_LAYERS = LLM_REAL.n_layer  # Qwen3-8B's 36
MAX_WORKERS = 64


@dataclass(frozen=True)
class GeneratedFile:
    key: str
    path: Path
    bytes: int
    seconds: float


def _rng(seed: int, file_key: str, name: str) -> np.random.Generator:
    return np.random.default_rng([seed, zlib.crc32(file_key.encode()), zlib.crc32(name.encode())])


def _fixed_values(spec: ms.TensorSpec) -> np.ndarray:
    if spec.name == "resampler.pos_embed_k":
        e, npos = spec.ne
        return sincos_2d(e, int(round(npos**0.5))).reshape(-1)
    raise ValueError(f"no fixed initialiser for {spec.name}")


def _draw(spec: ms.TensorSpec, rng: np.random.Generator, m: int) -> np.ndarray:
    if spec.init == "linear":
        return rng.standard_normal(m, dtype=np.float32) * np.float32(spec.gain / np.sqrt(max(1, spec.fan_in)))
    if spec.init in ("embed", "bias"):
        return rng.standard_normal(m, dtype=np.float32) * np.float32(0.02)
    if spec.init == "norm":
        return 1.0 + rng.standard_normal(m, dtype=np.float32) * np.float32(0.05)
    if spec.init == "alpha":
        return rng.uniform(0.5, 1.5, m).astype(np.float32)
    raise ValueError(f"unknown init {spec.init!r} for {spec.name}")


def _tensor_chunks(spec: ms.TensorSpec, rng: np.random.Generator, np_dtype) -> Iterable[np.ndarray]:
    n = int(np.prod(spec.ne, dtype=np.int64))
    if spec.init == "fixed":
        yield _fixed_values(spec).astype(np_dtype)
        return
    # Values for the first live_rows rows only; the rest of a padded table stays zero.
    live = n if not spec.live_rows else spec.live_rows * int(np.prod(spec.ne[:-1], dtype=np.int64))
    for start in range(0, n, _CHUNK):
        m = min(_CHUNK, n - start)
        k = min(m, max(0, live - start))  # live elements in this chunk
        x = _draw(spec, rng, k) if k == m else np.concatenate([_draw(spec, rng, k), np.zeros(m - k, np.float32)])
        yield x.astype(np_dtype, copy=False)


def _metadata(file: ms.FileSpec, dims: ms.SetDims, vocab: ms.Vocab) -> ms.Meta:
    if file.key == "llm":
        return file.metadata(dims) + vocab.metadata()
    if file.key == "apm":
        # The real mel filter bank, not noise: the audio front end reads it from this file.
        return ms.apm_metadata(dims.apm, mel_filterbank(16000, 400, dims.apm.n_mel).reshape(-1).tolist())
    if file.key == "tts":
        meta = file.metadata(dims) + ms.tts_vocab_metadata(ms.tts_vocab(vocab, dims.tts))
        if vocab.special_base != ms.SPECIAL_TOKEN_BASE:
            bos, eos = ms.tts_special_ids(vocab.special_base)
            # Not in llama.cpp-omni's files (it hard-codes 151687/151692); only the tiny set needs them.
            meta += [("omni.tts.audio_bos_token_id", "uint32", bos), ("omni.tts.text_eos_token_id", "uint32", eos)]
        return meta
    return file.metadata(dims)


def write_file(
    file: ms.FileSpec, out_dir: Path, dims: ms.SetDims, vocab: ms.Vocab, seed: int, workers: int = 1
) -> GeneratedFile:
    t0 = time.perf_counter()
    path = out_dir / file.relpath
    if file.key == "llm" and dims.llm.wtype != ms.F16:
        path = out_dir / ms.LLM_FILE.replace("F16", dims.llm.wtype.upper())
    w = GgufWriter(path)
    for key, vtype, value in _metadata(file, dims, vocab):
        w.add(key, vtype, value)
    specs = {s.name: s for s in file.tensors(dims)}
    for s in specs.values():
        w.declare(s.name, s.ne, s.dtype)

    def data(name, ne, dtype):
        return _tensor_chunks(specs[name], _rng(seed, file.key, name), GGML_TYPES[dtype][1])

    w.write(data, workers)
    return GeneratedFile(file.key, path, path.stat().st_size, time.perf_counter() - t0)


def make_models(
    out_dir: str | Path,
    size: str = "tiny",
    only: Sequence[str] | None = None,
    seed: int = 0,
    cfm_steps: int = 5,
    llm_dtype: str = "f16",
    llm_layers: int | None = None,
    workers: int = 1,
) -> list[GeneratedFile]:
    """Writes the module set (or the modules in ``only``) under ``out_dir``.

    ``cfm_steps``: the CFM step count the Token2Wav prompt cache is built for (Token2Wav must
    then run with the same ``steps``; llama.cpp-omni uses 5, the PyTorch reference 10).
    ``llm_dtype="f32"`` writes the LLM in F32 (MiniCPM-o-4_5-F32.gguf), for exact parity tests.
    ``llm_layers``: the LLM's layer count instead of the preset's (2 for both sizes; 36 is the
    real Qwen3-8B depth). Layers are generated independently, so the first layers of a deeper
    set are byte-identical to a shallower one's.
    ``workers``: threads writing each file's tensors (same bytes for any count)."""
    if size not in ms.SIZES:
        raise ValueError(f"size must be one of {', '.join(ms.SIZES)}, got {size!r}")
    modules = list(only) if only else list(ms.MODULES)
    unknown = [m for m in modules if m not in ms.MODULES]
    if unknown:
        raise ValueError(f"unknown module(s) {', '.join(unknown)}; choose from {', '.join(ms.MODULES)}")
    if not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    if not isinstance(cfm_steps, int) or not 1 <= cfm_steps <= 100:
        raise ValueError(f"cfm_steps must be an integer in 1..100, got {cfm_steps!r}")
    vocab = ms.build_vocab(full_size=(size == "real"))
    dims = ms.preset(size, vocab)
    if llm_dtype not in ("f16", "f32"):
        raise ValueError(f"llm_dtype must be f16 or f32, got {llm_dtype!r}")
    if llm_layers is not None and (
        isinstance(llm_layers, bool) or not isinstance(llm_layers, int) or not 1 <= llm_layers <= MAX_LLM_LAYERS
    ):
        raise ValueError(f"llm_layers must be an integer in 1..{MAX_LLM_LAYERS}, got {llm_layers!r}")
    if isinstance(workers, bool) or not isinstance(workers, int) or not 1 <= workers <= MAX_WORKERS:
        raise ValueError(f"workers must be an integer in 1..{MAX_WORKERS}, got {workers!r}")
    llm = replace(dims.llm, wtype=llm_dtype, n_layer=llm_layers or dims.llm.n_layer)
    dims = replace(dims, t2w=replace(dims.t2w, cfm_steps=cfm_steps), llm=llm)
    out = Path(out_dir)
    written = []
    for file in ms.FILES:
        if file.module in modules:
            g = write_file(file, out, dims, vocab, seed, workers)
            log.info("wrote %s (%.1f MiB, %.1f s)", g.path, g.bytes / 2**20, g.seconds)
            written.append(g)
    return written
