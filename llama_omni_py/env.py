"""The one reader (and writer) of the process environment. Every other module asks here; an explicit
argument or config field always wins over a variable. Each function takes ``environ`` (default:
``os.environ``) so that tests can pass their own.

    OMNI_TTS_QUEUE       LLM -> TTS channel length (EngineConfig.tts_queue)
    OMNI_T2W_THREADS     the vocoder pool (Token2WavConfig.threads)
    OMNI_NUMA_NODE       the NUMA node of the placement (EngineConfig.numa_node)
    OMNI_T2W_PROFILE     print a stage profile when a session closes
    OMNI_CPU_ISA         the CPU kernel set of the native engines: generic, avx2, avx512 or neon
                         (default: the best this CPU runs; docs/cpu-kernels.md)
    OMNI_FFMPEG, OMNI_FFPROBE   the ffmpeg and ffprobe programs
    XDG_CACHE_HOME       where generated module sets and cases go
    OMNI_BENCH_TASKSET   set by scripts/bench-pinned.sh for the benchmark manifest
    OMNI_WORKER_SECRET, OMNI_API_KEY   the serving secrets (docs/serving.md#security)
    OMNI_HUB and the hub clients' HF_ENDPOINT, HF_HUB_OFFLINE, HF_HUB_CACHE, HF_HOME,
    MODELSCOPE_ENDPOINT, MODELSCOPE_CACHE   read when a model is fetched (docs/model-files.md)

Written, only where the user has not set them: libgomp's wait policy before the core loads
(OMP_WAIT_POLICY, _native.py) and the CANN defaults before a CANN device is used (ASCEND_*,
device/backends.py). This module imports nothing of the package but its errors.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from .errors import ConfigError

ENV_TTS_QUEUE = "OMNI_TTS_QUEUE"
ENV_T2W_THREADS = "OMNI_T2W_THREADS"
ENV_NUMA_NODE = "OMNI_NUMA_NODE"
ENV_PROFILE = "OMNI_T2W_PROFILE"
ENV_CPU_ISA = "OMNI_CPU_ISA"
ENV_BENCH_TASKSET = "OMNI_BENCH_TASKSET"  # set by scripts/bench-pinned.sh: the taskset a bench runs under
ENV_WORKER_SECRET = "OMNI_WORKER_SECRET"
ENV_API_KEY = "OMNI_API_KEY"
ENV_HUB = "OMNI_HUB"
HUBS = ("huggingface", "modelscope")
_TRUE = ("1", "on", "yes", "true")  # huggingface_hub's spelling of a set boolean variable


def _env(environ):
    return os.environ if environ is None else environ


def env_int(name: str, environ=None) -> int | None:
    """An integer environment override, or None when unset; a malformed value is a ConfigError."""
    raw = _env(environ).get(name)
    if raw is None or raw.strip() == "":
        return None
    try:
        return int(raw)
    except ValueError:
        raise ConfigError(name, f"must be an integer, got {raw!r}") from None


def numa_node_choice(numa_node: int | None, environ=None) -> tuple[int | None, str]:
    """The NUMA node asked for -- the field, else OMNI_NUMA_NODE -- and the name of whichever gave
    it (for the error that names a node without usable CPUs)."""
    if numa_node is not None:
        return numa_node, "numa_node"
    return env_int(ENV_NUMA_NODE, environ), ENV_NUMA_NODE


def t2w_threads_env(environ=None) -> int | None:
    """OMNI_T2W_THREADS, or None."""
    return env_int(ENV_T2W_THREADS, environ)


def tts_queue_env(environ=None) -> int | None:
    """OMNI_TTS_QUEUE, or None."""
    return env_int(ENV_TTS_QUEUE, environ)


def worker_secret(environ=None) -> str | None:
    """OMNI_WORKER_SECRET: the secret a worker requires from its gateway (and a gateway sends to
    workers it did not start), or None."""
    return _env(environ).get(ENV_WORKER_SECRET) or None


def api_keys_from(keys=(), key_file: str | None = None, environ=None) -> tuple[str, ...]:
    """The gateway's API keys: those given, one per line of ``key_file``, and OMNI_API_KEY."""
    out = [k for k in keys if k]
    if key_file:
        try:
            text = Path(key_file).read_text()
        except OSError as e:
            raise ConfigError("api_key_file", f"cannot read {key_file}: {e}") from None
        out += [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]
    env = _env(environ).get(ENV_API_KEY)
    if env:
        out.append(env.strip())
    return tuple(dict.fromkeys(out))


def cache_dir(environ=None) -> Path:
    """Where generated sets and cases live: $XDG_CACHE_HOME/llama-omni-py (~/.cache by default)."""
    return Path(_env(environ).get("XDG_CACHE_HOME") or Path.home() / ".cache") / "llama-omni-py"


def ffmpeg_name(environ=None) -> str:
    """The ffmpeg program to run: OMNI_FFMPEG, else "ffmpeg" on the PATH."""
    return _env(environ).get("OMNI_FFMPEG") or "ffmpeg"


def ffprobe_name(environ=None) -> str:
    """The ffprobe program to run: OMNI_FFPROBE, else the ffprobe beside OMNI_FFMPEG when that
    names a path, else "ffprobe" on the PATH."""
    env = _env(environ)
    if env.get("OMNI_FFPROBE"):
        return env["OMNI_FFPROBE"]
    ffmpeg = env.get("OMNI_FFMPEG") or ""
    return str(Path(ffmpeg).with_name("ffprobe")) if os.sep in ffmpeg else "ffprobe"


def bench_taskset(environ=None) -> str | None:
    """The CPU list scripts/bench-pinned.sh ran the bench under (OMNI_BENCH_TASKSET), or None."""
    return _env(environ).get(ENV_BENCH_TASKSET) or None


def cpu_isa_override(environ=None) -> str | None:
    """The CPU kernel set forced by OMNI_CPU_ISA, or None (the best this CPU runs)."""
    raw = _env(environ).get(ENV_CPU_ISA, "").strip().lower()
    return None if raw in ("", "auto") else raw


def profiling_enabled(environ=None) -> bool:
    return _env(environ).get(ENV_PROFILE, "0") not in ("", "0")


def hub_choice(hub: str | None = None, environ=None) -> str:
    """The hub a repository id is fetched from: ``hub``, else OMNI_HUB, else the Hugging Face Hub."""
    name, source = (hub, "hub") if hub else (_env(environ).get(ENV_HUB), ENV_HUB)
    name = (name or "").strip().lower() or "huggingface"
    if name not in HUBS:
        raise ConfigError(source, f"must be one of {', '.join(HUBS)}, got {name!r}")
    return name


@dataclass(frozen=True)
class HubEnvironment:
    """What a hub client takes from the environment, read when a model is fetched (not when a
    library is imported, so a variable set later still counts): the endpoint (a mirror), whether
    the network is off, and the cache directory (None: each library's default)."""

    endpoint: str | None
    offline: bool
    cache: str | None


def hub_environment(hub: str, environ=None) -> HubEnvironment:
    """HF_ENDPOINT, HF_HUB_OFFLINE and HF_HUB_CACHE (else HF_HOME/hub) for the Hugging Face Hub;
    MODELSCOPE_ENDPOINT and MODELSCOPE_CACHE for ModelScope (its client has no offline switch:
    HF_HUB_OFFLINE stands for both)."""
    env = _env(environ)
    offline = env.get("HF_HUB_OFFLINE", "").strip().lower() in _TRUE
    if hub == "modelscope":
        return HubEnvironment(env.get("MODELSCOPE_ENDPOINT") or None, offline, env.get("MODELSCOPE_CACHE") or None)
    home = env.get("HF_HOME")
    cache = env.get("HF_HUB_CACHE") or (str(Path(home) / "hub") if home else None)
    return HubEnvironment(env.get("HF_ENDPOINT") or None, offline, cache)


def knobs(prefix: str, names=(), environ=None) -> dict[str, str]:
    """The variables named ``prefix``* or in ``names``, sorted (a benchmark manifest's record)."""
    env = _env(environ)
    return {k: env[k] for k in sorted(env) if k.startswith(prefix) or k in names}


def set_unset(defaults: dict[str, str], environ=None) -> dict[str, str]:
    """Sets each of ``defaults`` the environment does not have yet; returns what was set."""
    env = _env(environ)
    applied = {k: v for k, v in defaults.items() if k not in env}
    env.update(applied)
    return applied


def any_set(names, environ=None) -> bool:
    """Whether the user set any of ``names``."""
    env = _env(environ)
    return any(n in env for n in names)


def for_child(drop=(), environ=None, **values: str) -> dict[str, str]:
    """The environment of a process this one starts: this one's, without ``drop``, with ``values``."""
    env = {k: v for k, v in _env(environ).items() if k not in drop}
    env.update(values)
    return env
