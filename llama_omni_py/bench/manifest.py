"""The environment manifest every benchmark result carries: what ran, where, with which knobs.

A number is only comparable with another when the manifests say the same build, host, NUMA
plan, thread counts and model files (docs/ascend.md: a CPU range copied to another host
moved RTF from 0.57 to 0.68)."""

from __future__ import annotations

import hashlib
import json
import platform
import subprocess
from importlib import metadata
from pathlib import Path

from ..env import knobs

# Knobs that change speed; every OMNI_* variable is recorded as well.
ENV_KNOBS = (
    "OMP_NUM_THREADS",
    "OMP_WAIT_POLICY",
    "GOMP_SPINCOUNT",
    "OPENBLAS_NUM_THREADS",
    "GGML_CANN_WEIGHT_NZ",
    "GGML_CANN_ACL_GRAPH",
    "ASCEND_RT_VISIBLE_DEVICES",
    "CUDA_VISIBLE_DEVICES",
)
HEAD_BYTES = 1 << 20  # "head" checksums hash the first MiB: a 6 GB set hashes in milliseconds


def _git(*args: str, cwd: Path | None = None) -> str | None:
    try:
        r = subprocess.run(
            ["git", *args], capture_output=True, text=True, timeout=10, cwd=cwd or Path(__file__).resolve().parent
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return r.stdout.strip() if r.returncode == 0 else None


def _version(pkg: str) -> str | None:
    try:
        return metadata.version(pkg)
    except metadata.PackageNotFoundError:
        return None


def file_sha256(path: str | Path, limit: int | None = None) -> str:
    """sha256 of the file, or of its first ``limit`` bytes."""
    h = hashlib.sha256()
    left = limit
    with open(path, "rb") as f:
        while left is None or left > 0:
            chunk = f.read(1 << 20 if left is None else min(1 << 20, left))
            if not chunk:
                break
            h.update(chunk)
            if left is not None:
                left -= len(chunk)
    return h.hexdigest()


def model_checksums(files, full: bool = False) -> dict:
    """{path: {bytes, sha256, hashed}}; ``hashed`` is "full" or "head" (the first MiB only)."""
    return {
        str(p): {
            "bytes": Path(p).stat().st_size,
            "sha256": file_sha256(p, None if full else HEAD_BYTES),
            "hashed": "full" if full else "head",
        }
        for p in files
    }


def env_knobs(environ=None) -> dict[str, str]:
    return knobs("OMNI_", ENV_KNOBS, environ)


def git_state() -> dict:
    """Commit and dirty flag (tracked files) of the code that runs: recorded at build time for an
    installed package (build_info.json), else read from the source tree it was imported from;
    None when neither knows (e.g. built from an sdist)."""
    info = Path(__file__).resolve().parents[1] / "build_info.json"
    if info.exists():
        data = json.loads(info.read_text())
        return {"commit": data.get("git_commit"), "dirty": data.get("git_dirty")}
    root = _git("rev-parse", "--show-toplevel")
    pkg = Path(__file__).resolve().parents[2]
    if root is None or Path(root).resolve() != pkg:
        return {"commit": None, "dirty": None}
    return {"commit": _git("rev-parse", "HEAD"), "dirty": bool(_git("status", "--porcelain", "--untracked-files=no"))}


def manifest(model_files=(), full_hash: bool = True) -> dict:
    """Build, host and environment; model files hashed in full, or by their first MiB."""
    from .._native import core, cpu_kernels
    from ..device import backends, placement

    topo = placement.read_topology()
    return {
        "git": git_state(),
        "python": platform.python_version(),
        "packages": {
            p: _version(p) for p in ("llama-omni-py", "llama-cpp-python", "numpy", "torch", "scipy-openblas32")
        },
        "ggml": core.ggml_version(),
        "blas": core.internal.blas_description(),
        "cpu_kernels": cpu_kernels(),
        "compiled_backends": backends.compiled_backends(),
        "devices": [
            {
                "id": d.id,
                "description": d.description,
                "pci_bus_id": d.pci_bus_id or None,
                "numa_node": placement.pci_numa_node(d.pci_bus_id),
            }
            for d in backends.devices()
        ],
        "cpu_model": topo.cpu_model,
        "logical_cpus": topo.logical_cpus,
        "physical_cores": topo.physical_cores,
        "allowed_cpus": placement.format_cpulist(list(topo.allowed_cpus)),
        "numa_nodes": {str(n.id): placement.format_cpulist(list(n.cpus)) for n in topo.nodes},
        "env": env_knobs(),
        "model_files": model_checksums(model_files, full_hash),
    }
