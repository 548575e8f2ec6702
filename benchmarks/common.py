"""Shared by the benchmark scripts: the environment manifest and warm timing."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
import time
from importlib import metadata
from pathlib import Path

ENV_KNOBS = ("OMNI_T2W_THREADS", "OMNI_TTS_QUEUE", "OMNI_T2W_PROFILE", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], capture_output=True, text=True, timeout=10,
                              cwd=Path(__file__).resolve().parent).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def _version(pkg: str) -> str | None:
    try:
        return metadata.version(pkg)
    except metadata.PackageNotFoundError:
        return None


def file_sha256(path: str | Path, limit: int = 1 << 30) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def manifest(model_files: list[str | Path] = ()) -> dict:
    from llama_omni_py import placement
    from llama_omni_py._native import core

    topo = placement.read_topology()
    return {
        "git_commit": _git("rev-parse", "HEAD"),
        "git_dirty": bool(_git("status", "--porcelain")),
        "python": platform.python_version(),
        "packages": {p: _version(p) for p in ("llama-omni-py", "llama-cpp-python", "numpy", "torch", "scipy-openblas32")},
        "ggml": core.ggml_version(),
        "blas": core.blas_description(),
        "cpu_model": topo.cpu_model,
        "logical_cpus": topo.logical_cpus,
        "allowed_cpus": placement.format_cpulist(list(topo.allowed_cpus)),
        "numa_nodes": {n.id: placement.format_cpulist(list(n.cpus)) for n in topo.nodes},
        "env": {k: os.environ[k] for k in ENV_KNOBS if k in os.environ},
        "model_files": {str(p): file_sha256(p) for p in model_files},
    }


def timed(fn, n: int) -> list[float]:
    """Milliseconds of n calls of fn, after one excluded warm-up call."""
    fn()
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1000)
    return out


def write_result(name: str, payload: dict, model_files: list[str | Path] = (), out: str | None = None) -> Path:
    """Writes {"benchmark": name, **payload, "manifest": ...} to `out` or results/<name>-<time>.json."""
    path = Path(out) if out else Path(__file__).resolve().parent / "results" / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"benchmark": name, **payload, "manifest": manifest(model_files)}, indent=2))
    print(f"wrote {path}")
    return path
