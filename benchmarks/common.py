"""Shared by the benchmark scripts: the environment manifest and warm timing."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from llama_omni_py.bench.manifest import manifest  # noqa: F401 -- the one manifest, shared with `llama-omni bench`


def rss_mib() -> float:
    """This process's resident memory now (MiB; the peak where /proc is missing)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


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
    path = (
        Path(out)
        if out
        else Path(__file__).resolve().parent / "results" / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"benchmark": name, **payload, "manifest": manifest(model_files)}, indent=2))
    print(f"wrote {path}")
    return path


@contextlib.contextmanager
def kernel_set(name: str | None):
    """Runs the block on the named CPU kernel set (generic, avx2, avx512, neon); None: unchanged."""
    from llama_omni_py._native import core

    before = core.internal.cpu_isa()
    if name:
        core.internal.force_cpu_isa(name)
    try:
        yield
    finally:
        core.internal.force_cpu_isa(before)


@contextlib.contextmanager
def busy_competitor(cpu: int | None):
    """One single-threaded busy loop in another process (optionally pinned to one CPU)."""
    pin = (lambda: os.sched_setaffinity(0, {cpu})) if cpu is not None else None
    proc = subprocess.Popen([sys.executable, "-c", "while True: pass"], preexec_fn=pin)
    time.sleep(0.5)  # running before the first timed window
    try:
        yield
    finally:
        proc.kill()
        proc.wait()
