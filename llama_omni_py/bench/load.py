"""``llama-omni bench --mode load``: the whole pipeline under load, many sessions at once, two
ways on the same cores:

* **engine**: one process, one OmniEngine of N slots, N sessions streaming from N threads;
* **workers**: N processes of one single-slot OmniSession each (what one engine per session
  gives today).

For each slot count and round, each mode's processes are started (load_host.py), warmed up, and
run one phase per session kind: N sessions of that kind started together (``text``: a spoken
reply to a text question; ``audio``: to a spoken question, the bench's chirp; ``duplex``: a few
1 s units of speech-like audio). Session i has seed ``seed + i`` and the same prompt in both modes.
The modes alternate round by round (engine first in even rounds, workers first in odd ones) so
machine noise hits both alike; only one mode's processes are alive at a time (memory). With
``--competitor`` a spin loop runs on one of the cores throughout. Metrics: load_metrics.py; the
JSON record: docs/benchmark-schema.md ("Load").
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from .. import checks
from ..device import placement
from ..env import bench_taskset, for_child
from ..errors import ConfigError, OmniError
from . import load_metrics
from .load_metrics import KINDS, MODES
from .manifest import manifest
from .schema import validate_load_run

LOAD_SCHEMA_VERSION = 1
START_DELAY_S = 0.3  # the phase's common start lies this far ahead of the command: all hosts read it
PACKAGE_ROOT = Path(__file__).resolve().parents[2]
WARMUP_TOKENS = 8  # the warm-up phase's reply length (it loads the encoders and sizes the buffers)
WARMUP_UNITS = 2


@dataclass(frozen=True)
class LoadBenchOptions:
    model_dir: str | None = None  # None: the real-dimension random set in the user cache
    device: str = "auto"
    slots: tuple[int, ...] = (1, 2, 4)
    kinds: tuple[str, ...] = KINDS
    repeats: int = 2  # measured rounds per slot count
    warmup: bool = True  # a short phase of each kind after each load, recorded apart
    max_new_tokens: int = 24
    codes_per_chunk: int = 25
    units: int = 4  # duplex units per session
    interval_s: float = 0.0  # between duplex units (0: as fast as accepted)
    force_listen: int = 0  # duplex units that listen before the model may speak
    threads: int | None = None
    t2w_threads: int | None = None
    pin: bool | None = None
    batch_invariant: bool = False
    seed: int = 0
    competitor: bool = False
    cpus: tuple[int, ...] | None = None  # the CPUs every process runs on (None: this process's mask)
    out_dir: str = "bench-results"
    tag: str = ""
    full_hash: bool = False

    def __post_init__(self):
        if not self.slots or any(not checks.is_int(n) or not 1 <= n <= 256 for n in self.slots):
            raise ConfigError("slots", f"must be slot counts in 1..256, got {self.slots!r}")
        if len(set(self.slots)) != len(self.slots):
            raise ConfigError("slots", f"slot counts repeat: {self.slots!r}")
        if not self.kinds or any(k not in KINDS for k in self.kinds) or len(set(self.kinds)) != len(self.kinds):
            raise ConfigError("kinds", f"must be distinct kinds from {', '.join(KINDS)}, got {self.kinds!r}")
        checks.int_in("repeats", self.repeats, 1)
        checks.int_in("max_new_tokens", self.max_new_tokens, 1)
        checks.int_in("codes_per_chunk", self.codes_per_chunk, 1)
        checks.int_in("units", self.units, 1, 1000)
        checks.number_in("interval_s", self.interval_s, 0.0, 10.0)
        checks.int_in("force_listen", self.force_listen, 0, 1000)
        checks.seed(self.seed, config=True)
        if self.t2w_threads is not None:
            checks.int_in("t2w_threads", self.t2w_threads, 1)
        if self.cpus is not None and not set(self.cpus) <= set(checks.usable_cpus()):
            raise ConfigError("cpus", f"{list(self.cpus)} is not within this process's CPUs {checks.usable_cpus()}")

    @property
    def label(self) -> str:
        base = f"load-{'-'.join(map(str, self.slots))}" + ("-competitor" if self.competitor else "")
        return f"{self.tag}-{base}" if self.tag else base

    def configs(self) -> dict:
        """Every process's EngineConfig and ReplyConfig fields, as JSON (``engine.t2w_threads``:
        Token2WavConfig's threads)."""
        return {
            "engine": {
                "threads": self.threads,
                "t2w_threads": self.t2w_threads,
                "pin": self.pin,
                "batch_invariant": self.batch_invariant,
            },
            "reply": {
                "seed": self.seed,
                "max_new_tokens": self.max_new_tokens,
                "max_audio_per_chunk": self.codes_per_chunk,
            },
        }


class _Host:
    """A load_host process: JSON lines in on stdin, out on stdout."""

    def __init__(self, spec: dict):
        env = for_child(PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "llama_omni_py.bench.load_host", json.dumps(spec)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
            cwd=PACKAGE_ROOT,  # `-m` imports from the working directory first: the package running now
        )

    def read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            code = self.proc.wait(timeout=60)
            raise OmniError(f"a load benchmark process ended (exit status {code}); its errors are above")
        msg = json.loads(line)
        if msg.get("ready") is False:
            raise OmniError(f"a load benchmark process could not load the module set: {msg['error']}")
        if msg.get("error"):
            raise OmniError(f"a load benchmark process failed: {msg['error']}")
        return msg

    def send(self, cmd: dict) -> None:
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.send({"cmd": "quit"})
                self.proc.stdin.close()
                self.proc.wait(timeout=120)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()


class ModeHosts:
    """One mode's processes for N sessions: one engine of N slots, or N lone sessions."""

    def __init__(self, opts: LoadBenchOptions, mode: str, slots: int, model_dir: str):
        single = mode == "workers"
        spec = {"model_dir": model_dir, "device": opts.device, "single": single, "config": opts.configs()}
        self.mode, self.slots, self.opts = mode, slots, opts
        self.hosts: list[_Host] = []
        try:
            for _ in range(slots if single else 1):
                self.hosts.append(_Host(dict(spec, slots=1 if single else slots)))
            self.ready = [h.read() for h in self.hosts]  # the workers load side by side
        except BaseException:
            self.close()
            raise

    def run(self, kind: str, warmup: bool = False) -> dict:
        """One phase: N sessions of ``kind`` started together."""
        o = self.opts
        t0 = time.monotonic() + START_DELAY_S
        seeds = [o.seed + i for i in range(self.slots)]
        cmd = {
            "cmd": "run",
            "kind": kind,
            "t0": t0,
            "max_new_tokens": min(WARMUP_TOKENS, o.max_new_tokens) if warmup else o.max_new_tokens,
            "units": min(WARMUP_UNITS, o.units) if warmup else o.units,
            "interval_s": o.interval_s,
            "force_listen": o.force_listen,
        }
        per_host = len(seeds) // len(self.hosts)
        for k, h in enumerate(self.hosts):
            h.send(dict(cmd, seeds=seeds[k * per_host : (k + 1) * per_host], slot_base=k * per_host))
        replies = [h.read() for h in self.hosts]
        sessions = [load_metrics.session_timing(s, t0) for r in replies for s in r["sessions"]]
        wall = max(s["end_s"] for s in sessions) - min(s["start_s"] for s in sessions)
        return {
            "mode": self.mode,
            "slots": self.slots,
            "kind": kind,
            "wall_s": wall,
            "sessions": sessions,
            "processes": [r["process"] for r in replies],
            "scheduler": {k: sum(r["scheduler"][k] for r in replies) for k in ("llm_batches", "llm_batched_steps")},
            "aggregate": load_metrics.phase_aggregate(sessions, wall),
        }

    def host_records(self, rnd: int) -> list[dict]:
        return [
            {"mode": self.mode, "slots": self.slots, "round": rnd, **{k: r.get(k) for k in HOST_FIELDS}}
            for r in self.ready
        ]

    def close(self) -> None:
        for h in self.hosts:
            h.close()


HOST_FIELDS = ("pid", "load_s", "memory", "memory_note", "process", "resolved")


def start_competitor(cpu: int) -> subprocess.Popen:
    """A busy process spinning on ``cpu``."""
    code = f"import os\nos.sched_setaffinity(0, {{{cpu}}})\nwhile True:\n    pass\n"
    return subprocess.Popen([sys.executable, "-c", code])


def _stop(proc: subprocess.Popen | None) -> None:
    if proc is not None and proc.poll() is None:
        proc.kill()
        proc.wait()


def _run_rounds(opts: LoadBenchOptions, model_dir: str, log) -> tuple[list, list, list]:
    """Every slot count and round, both modes alternating; returns (phases, warm-up phases, host records)."""
    phases, warmups, hosts = [], [], []
    for n in opts.slots:
        for rnd in range(opts.repeats):
            for mode in MODES if rnd % 2 == 0 else MODES[::-1]:
                group = ModeHosts(opts, mode, n, model_dir)
                try:
                    hosts += group.host_records(rnd)
                    if opts.warmup:
                        warmups += [dict(group.run(k, warmup=True), round=rnd) for k in opts.kinds]
                    for kind in opts.kinds:
                        p = dict(group.run(kind), round=rnd)
                        phases.append(p)
                        a = p["aggregate"]
                        log(
                            f"{n} slots, round {rnd + 1}/{opts.repeats}, {mode:<7} {kind:<6} "
                            f"{a['audio_s']:.1f} s audio in {p['wall_s']:.1f} s "
                            f"({load_metrics._f(a['audio_per_wall_s'], 3)} s/s), "
                            f"{load_metrics._f(a['llm_tokens_per_s'], 1)} tok/s"
                        )
                finally:
                    group.close()
    return phases, warmups, hosts


def _failures(phases: list[dict]) -> list[str]:
    """One line per session that failed, then one per session that ended without audio."""
    failed = [f"{p['slots']}/{p['mode']}/{p['kind']}#{p['round']}: slot {s['slot']}: {s['error']}"
              for p in phases for s in p["sessions"] if s["error"]]  # fmt: skip
    silent = [f"{p['slots']}/{p['mode']}/{p['kind']}#{p['round']}: slot {s['slot']}: no audio"
              for p in phases for s in p["sessions"] if not s["error"] and not s["audio_s"]]  # fmt: skip
    return failed + silent


def _options_record(opts: LoadBenchOptions) -> dict:
    """The run record's ``options``: what every phase of the run was given."""
    return {
        "slots": list(opts.slots),
        "kinds": list(opts.kinds),
        "repeats": opts.repeats,
        "warmup": opts.warmup,
        "max_new_tokens": opts.max_new_tokens,
        "codes_per_chunk": opts.codes_per_chunk,
        "units": opts.units,
        "interval_s": opts.interval_s,
        "force_listen": opts.force_listen,
        "seed": opts.seed,
        "batch_invariant": opts.batch_invariant,
        "threads": opts.threads,
        "t2w_threads": opts.t2w_threads,
        "pin": opts.pin,
    }


def run_load_bench(opts: LoadBenchOptions, log=print) -> dict:
    """Every slot count, both modes alternating round by round; returns the run record."""
    from ..modelset.layout import discover
    from ..modelset.random_set import random_set_dir

    model_dir = str(Path(opts.model_dir).resolve()) if opts.model_dir else str(random_set_dir("real"))
    before_mask = checks.usable_cpus()
    if opts.cpus is not None:
        os.sched_setaffinity(0, opts.cpus)  # inherited by every process started below
    cpus = checks.usable_cpus()
    competitor = start_competitor(cpus[0]) if opts.competitor else None
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    t_start = time.perf_counter()
    try:
        phases, warmups, hosts = _run_rounds(opts, model_dir, log)
    finally:
        _stop(competitor)
        if opts.cpus is not None:
            os.sched_setaffinity(0, before_mask)
    summary = load_metrics.summarise(phases, hosts, opts.slots)
    failures = _failures(phases)
    env = manifest([str(f) for f in discover(model_dir).files.values()], opts.full_hash)
    taskset = bench_taskset()
    record = {
        "schema_version": LOAD_SCHEMA_VERSION,
        "benchmark": "omni-load-bench",
        "label": opts.label,
        "started": started,
        "elapsed_s": time.perf_counter() - t_start,
        "model_dir": str(model_dir),
        "options": _options_record(opts),
        "cpus": placement.format_cpulist(cpus),
        "taskset": taskset,
        "competitor": {"cpu": cpus[0], "pid": competitor.pid} if competitor else None,
        "config": hosts[0]["resolved"] if hosts else None,
        "data_valid": not failures,
        "failures": failures,
        "summary": summary,
        "hosts": hosts,
        "phases": phases,
        "warmup": warmups,
        "manifest": env,
    }
    validate_load_run(record)  # a record that does not match the documented schema is a bug
    return record


def write_load_run(record: dict, out_dir: str | Path) -> Path:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{time.strftime('%Y%m%d-%H%M%S')}-{record['label']}.json"
    path.write_text(json.dumps(record, indent=2))
    return path


def load_main(opts: LoadBenchOptions) -> int:
    record = run_load_bench(opts, log=lambda m: print(m, file=sys.stderr, flush=True))
    path = write_load_run(record, opts.out_dir)
    print(load_metrics.markdown_table(record["summary"]))
    state = "valid" if record["data_valid"] else "INVALID -- " + "; ".join(record["failures"][:5])
    print(f"{path}: {state}; total {record['elapsed_s']:.0f} s")
    return 0 if record["data_valid"] else 1
