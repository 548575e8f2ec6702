"""Model module sets: the llama.cpp-omni directory layout, discovery and validation.

A module set is a directory with the LLM GGUF at its root and ``audio/``, ``vision/``,
``tts/`` and ``token2wav-gguf/`` beneath it (docs/model-files.md). :func:`discover`
finds the files from the directory or from the LLM file's path; :func:`validate` opens
each one with the native validating reader and checks architecture, the metadata keys the
loaders need (and the vocabulary llama.cpp reads from the LLM and TTS files), every tensor's
name, shape and dtype against :mod:`~llama_omni_py.modelset.spec`, and the dtype rules of the target device.
Every problem raises :class:`ModelFileError` naming the file and what is wrong.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .._native import core
from ..errors import ModelFileError
from . import spec as ms

log = logging.getLogger(__name__)

# CANN's MUL_MAT supports these weight types; anything else, e.g. the
# K-quants of Q4_K_M, silently runs on the CPU there, 10x slower.
CANN_MATMUL_TYPES = {"f32", "f16", "bf16", "q8_0", "q4_0"}
CANN_PREFERRED = {"f16", "f32", "bf16"}


@dataclass
class ModelSet:
    """Paths of one module set; a module whose file(s) are absent maps to None."""

    root: Path
    llm: Path | None
    files: dict[str, Path] = field(default_factory=dict)  # FileSpec.key -> path (present files only)

    def path(self, key: str) -> Path | None:
        return self.files.get(key)

    def modules_present(self) -> list[str]:
        return [m for m in ms.MODULES if all(f.key in self.files for f in ms.files_of(m))]

    def missing(self, modules: Iterable[str] = ms.MODULES) -> list[str]:
        return [str(self.root / f.relpath) for m in modules for f in ms.files_of(m) if f.key not in self.files]


def _find_llm(root: Path) -> Path | None:
    exact = root / ms.LLM_FILE
    if exact.is_file():
        return exact
    # Quantised variants (Q8_0, Q4_K_M) share the pattern; prefer F16, then the first in name order.
    candidates = sorted(p for p in root.glob(ms.LLM_FILE_GLOB) if p.is_file())
    return candidates[0] if candidates else None


def discover(path: str | Path) -> ModelSet:
    """Module set from a model directory or from the path of its LLM file."""
    p = Path(path).expanduser()
    if not p.exists():
        raise ModelFileError("model path does not exist", str(p))
    if p.is_file():
        root, llm = p.parent, p
    else:
        root, llm = p, _find_llm(p)
    files = {}
    for f in ms.FILES:
        candidate = llm if f.key == "llm" else root / f.relpath
        if candidate is not None and candidate.is_file():
            files[f.key] = candidate
    return ModelSet(root=root, llm=llm, files=files)


def random_weights(path: str | Path | None) -> bool:
    """Whether the set at ``path`` was written by make_models (random weights: gibberish)."""
    from .spec.llm import RANDOM_WEIGHTS_MARK

    try:
        llm = discover(path).llm if path is not None else None
        if llm is None:
            return False
        g = core.GgufFile(str(llm))
        return g.has_key("general.name") and RANDOM_WEIGHTS_MARK in str(g.value("general.name"))
    except Exception:  # noqa: BLE001 -- an unreadable file is the loader's to report
        return False


class _Reader:
    """Adapter of the native GgufFile to the accessors spec's infer functions use."""

    def __init__(self, path: Path):
        self.path = path
        self.g = core.GgufFile(str(path))
        self._tensors = {t.name: t for t in self.g.tensors}

    def _fail(self, problem: str):
        raise ModelFileError(problem, str(self.path))

    def get_int(self, key: str, default: int | None = None) -> int:
        if not self.g.has_key(key):
            if default is not None:
                return default
            self._fail(f"missing metadata key '{key}'")
        v = self.g.value(key)
        if isinstance(v, bool) or not isinstance(v, int):
            self._fail(f"metadata key '{key}' should be an integer, found {v!r}")
        return v

    def get_str(self, key: str) -> str:
        if not self.g.has_key(key):
            self._fail(f"missing metadata key '{key}'")
        v = self.g.value(key)
        if not isinstance(v, str):
            self._fail(f"metadata key '{key}' should be a string, found {type(v).__name__}")
        return v

    def tensor_ne(self, name: str) -> list[int]:
        t = self._tensors.get(name)
        if t is None:
            self._fail(f"missing tensor '{name}'")
        return list(t.ne)

    def tensor_names(self) -> list[str]:
        return list(self._tensors)


@dataclass(frozen=True)
class FileReport:
    key: str
    path: Path
    tensors: int
    bytes: int
    weight_types: tuple[str, ...]


def _check_tensors(
    reader: _Reader, specs: list[ms.TensorSpec], file: ms.FileSpec, device_backend: str
) -> tuple[str, ...]:
    weight_types = set()
    for spec in specs:
        t = reader._tensors.get(spec.name)
        if t is None:
            reader._fail(f"missing tensor '{spec.name}' ({file.key} expects {len(specs)} tensors)")
        if tuple(t.ne) != spec.ne:
            reader._fail(f"tensor '{spec.name}' has shape {list(t.ne)}, expected {list(spec.ne)} (ggml order)")
        tname = t.type_name.lower()
        if file.key == "llm" and spec.dtype == ms.F16 and len(spec.ne) == 2:
            weight_types.add(t.type_name)  # the LLM may be quantised; the device decides (below)
            continue
        allowed = {spec.dtype} | ({"f32"} if spec.dtype == ms.F16 else set())
        if tname not in allowed:
            reader._fail(
                f"tensor '{spec.name}' is {tname}, expected {spec.dtype}"
                + (" (Token2Wav files must be F32)" if file.module == "token2wav" else "")
            )
    if file.key == "llm" and device_backend == "cann":
        bad = sorted(w for w in weight_types if w.lower() not in CANN_MATMUL_TYPES)
        if bad:
            reader._fail(
                f"LLM weights are {', '.join(bad)}, which the CANN backend cannot multiply: they would run "
                "on the CPU (Q4_K_M prefill measured 7.9 s vs 0.58 s for F16). Use MiniCPM-o-4_5-F16.gguf"
            )
        slow = sorted(w for w in weight_types if w.lower() not in CANN_PREFERRED)
        if slow:
            log.warning(
                "%s: LLM weights %s run on CANN but gave no speed-up over F16 on 910B; F16 is recommended",
                reader.path,
                ", ".join(slow),
            )
    return tuple(sorted(weight_types))


_KINDS = {
    "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "float": lambda v: isinstance(v, float),
    "str": lambda v: isinstance(v, str),
    "bool": lambda v: isinstance(v, bool),
    "str[]": lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v),
    "int[]": lambda v: isinstance(v, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in v),
    "float[]": lambda v: isinstance(v, list) and all(isinstance(x, float) for x in v),
}


def _check_metadata(reader: _Reader, file: ms.FileSpec, dims: ms.SetDims) -> None:
    """The keys file.keys lists, with their kinds, values and lengths; then the vocabulary."""
    g = reader.g
    for rule in file.keys:
        if not g.has_key(rule.key):
            if rule.required:
                reader._fail(f"missing metadata key '{rule.key}' (the {file.key} loader needs it)")
            continue
        v = g.value(rule.key)
        if not _KINDS[rule.kind](v):
            reader._fail(f"metadata key '{rule.key}' should be {rule.kind}, found {type(v).__name__}")
        if rule.value is not None and v != rule.value(dims):
            reader._fail(f"metadata key '{rule.key}' is {v!r}, expected {rule.value(dims)!r}")
        if rule.length is not None and len(v) != rule.length(dims):
            reader._fail(f"metadata key '{rule.key}' has {len(v)} entries, expected {rule.length(dims)}")
    if file.vocab_rows is not None:
        keys = ("tokenizer.ggml.model", "tokenizer.ggml.tokens", "tokenizer.ggml.token_type", "tokenizer.ggml.merges")
        meta = {k: g.value(k) for k in keys if g.has_key(k)}
        problems = ms.vocab_problems(meta, file.vocab_rows(dims))
        if problems:
            reader._fail("; ".join(problems))


def validate(model_set: ModelSet, modules: Sequence[str] | None = None, device: str = "cpu") -> list[FileReport]:
    """Checks every file of ``modules`` (default: all) for ``device``; returns one report per file.

    Raises ModelFileError for the first missing file, unreadable GGUF, wrong architecture,
    missing or mistyped metadata key, unusable vocabulary, missing or misshapen tensor, or
    dtype the module or device cannot use.
    """
    modules = list(modules) if modules else list(ms.MODULES)
    backend = device.split(":")[0]
    reports = []
    for module in modules:
        files = ms.files_of(module)
        readers = {}
        for f in files:
            path = model_set.path(f.key)
            if path is None:
                expected = model_set.root / f.relpath if f.key != "llm" else model_set.root / ms.LLM_FILE_GLOB
                raise ModelFileError(f"missing file of module '{module}'", str(expected))
            readers[f.key] = _Reader(path)
            if f.architecture is not None:
                arch = readers[f.key].get_str("general.architecture")
                if arch != f.architecture:
                    raise ModelFileError(
                        f"general.architecture is '{arch}', expected '{f.architecture}' (is this the {module} file?)",
                        str(path),
                    )
        try:
            dims = ms.infer_dims(module, readers)
        except (ValueError, ZeroDivisionError, IndexError) as exc:
            raise ModelFileError(
                f"cannot derive {module} dimensions: {exc}", str(model_set.path(files[0].key))
            ) from exc
        set_dims = _single_module_dims(module, dims)
        for f in files:
            r = readers[f.key]
            _check_metadata(r, f, set_dims)
            wt = _check_tensors(r, f.tensors(set_dims), f, backend)
            reports.append(FileReport(f.key, r.path, len(r.g.tensors), r.g.file_size, wt))
    return reports


def _single_module_dims(module: str, dims) -> ms.SetDims:
    """A SetDims whose ``module`` field is ``dims`` (the other fields are never read)."""
    base = ms.preset("real")
    from dataclasses import replace

    return replace(base, **{ms.set_dims_field(module): dims})


def load(path: str | Path, modules: Sequence[str] | None = None, device: str = "cpu") -> ModelSet:
    """discover() + validate(): the module set, ready for the loaders."""
    model_set = discover(path)
    validate(model_set, modules, device)
    return model_set
