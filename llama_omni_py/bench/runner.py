"""``llama-omni bench``: the fixed prompt set through ``OmniSession.stream`` under one or more
configurations, alternating per round so machine noise hits all of them alike; warm-up rounds
are kept apart; each configuration's run is written as one JSON file (docs/benchmark-schema.md),
validated against the package's JSON Schema. Exit status 1 when a run breaks a validity gate
(the command line: arguments.py)."""

from __future__ import annotations

import dataclasses
import itertools
import os
import time
from dataclasses import dataclass
from pathlib import Path

from .. import checks
from ..config import HANDOFFS, TOKEN2MEL_IMPLEMENTATIONS
from ..constants import DEFAULT_QUEUE
from ..env import bench_taskset, t2w_threads_env, tts_queue_env
from ..errors import ConfigError
from . import metrics, prompts, summary
from .manifest import manifest
from .schema import SCHEMA_VERSION, validate_run

MIN_REPEATS = 3


@dataclass(frozen=True)
class RunConfig:
    """One configuration under test; None keeps the session's default (and its env override)."""

    t2w_threads: int | None = None
    tts_queue: int | None = None
    pin: bool | None = None
    handoff: str = "window"  # TTS -> Token2Wav every 25 codes, or "text_chunk" (a text chunk's codes at once)
    token2mel: str = "auto"  # which Token2Mel computes on the CPU: Token2WavConfig.token2mel

    def __post_init__(self):
        for name in ("t2w_threads", "tts_queue"):
            v = getattr(self, name)
            if v is not None and (not isinstance(v, int) or v < 1):
                raise ConfigError(name, f"must be a positive integer, got {v!r}")
        if self.handoff not in HANDOFFS:
            raise ConfigError("handoff", f"must be one of {', '.join(HANDOFFS)}, got {self.handoff!r}")
        checks.choice("token2mel", self.token2mel, TOKEN2MEL_IMPLEMENTATIONS)

    @property
    def label(self) -> str:
        pin = {None: "auto", True: "pin", False: "nopin"}[self.pin]
        t2w = self.t2w_threads or t2w_threads_env() or "default"
        chunked = "" if self.handoff == "window" else "-chunked"
        mel = "" if self.token2mel == "auto" else f"-{self.token2mel}"
        return f"t2w{t2w}-q{self.tts_queue or tts_queue_env() or DEFAULT_QUEUE}-{pin}{chunked}{mel}"

    def token2wav(self):
        from ..config import Token2WavConfig

        return Token2WavConfig(threads=self.t2w_threads, token2mel=self.token2mel)


@dataclass(frozen=True)
class BenchOptions:
    model_dir: str | None = None  # None: the real-dimension random set in the user cache
    device: str = "auto"
    configs: tuple[RunConfig, ...] = (RunConfig(),)
    prompts: tuple[str, ...] = prompts.DEFAULT_PROMPTS
    repeats: int = MIN_REPEATS
    warmup: int = 1
    max_new_tokens: int = 30
    codes_per_chunk: int = 25  # random weights never end a chunk: cut it at 1 s of audio
    threads: int | None = None
    seed: int = 0
    out_dir: str = "bench-results"
    full_hash: bool = False
    allow_realtime_miss: bool = False
    tag: str = ""  # label prefix (bench-pinned.sh: pinned / unpinned)

    def __post_init__(self):
        if not isinstance(self.repeats, int) or self.repeats < MIN_REPEATS:
            raise ConfigError("repeats", f"must be at least {MIN_REPEATS} (medians of 3 or more), got {self.repeats!r}")
        if not isinstance(self.warmup, int) or self.warmup < 0:
            raise ConfigError("warmup", f"must be a non-negative integer, got {self.warmup!r}")
        for name in ("max_new_tokens", "codes_per_chunk"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ConfigError(name, f"must be a positive integer, got {getattr(self, name)!r}")
        if not self.configs:
            raise ConfigError("configs", "needs at least one configuration")
        if len({c.label for c in self.configs}) != len(self.configs):
            raise ConfigError("configs", "configurations repeat")
        prompts.select(self.prompts)


def measure(session, prompt: prompts.BenchPrompt, seed: int) -> dict:
    """One request: stream it, then read the session's stage events and timings."""
    chunks, timings = [], None
    start = time.perf_counter()
    for ch in session.stream(**prompt.inputs(), seed=seed):
        if ch.text_delta and not ch.is_final:  # text ahead of its audio: not a Token2Wav window
            continue
        chunks.append(metrics.Chunk(int(ch.audio.size), time.perf_counter() - start, bool(ch.is_final)))
        timings = ch.timings or timings
    t = timings.as_dict() if timings is not None else {}
    media = (
        {"audio": t.get("apm_ms", 0) > 0}
        if prompt.kind == "audio"
        else {"image": t.get("vpm_ms", 0) > 0}
        if prompt.kind == "image"
        else {}
    )
    return metrics.request_record(prompt.name, chunks, timings.events if timings else (), t, media)


class _Sessions:
    """One OmniSession per pin setting, so the LLM/TTS load once; the Token2Wav stage is rebuilt
    when the vocoder thread count changes and the TTS queue size is set per request."""

    def __init__(self, opts: BenchOptions, model_dir: str):
        from ..config import EngineConfig, ReplyConfig
        from ..session import OmniSession

        limits = {"max_new_tokens": opts.max_new_tokens, "max_audio_per_chunk": opts.codes_per_chunk}
        reply = ReplyConfig(seed=opts.seed, **limits)
        self._make = lambda c: OmniSession(
            model_dir,
            opts.device,
            EngineConfig(threads=opts.threads, token2wav=c.token2wav(), pin=c.pin),
            reply=reply,
        )
        self._open: dict = {}

    def get(self, c: RunConfig):
        if c.pin not in self._open:
            s = self._make(c)
            self._open[c.pin] = (s, s.reply.tts_queue)  # the default (OMNI_TTS_QUEUE or 16)
        s, default_queue = self._open[c.pin]
        if s.engine_config.token2wav != c.token2wav():
            s.reconfigure(c.token2wav())
        s.reply = dataclasses.replace(s.reply, tts_queue=c.tts_queue or default_queue, tts_handoff=c.handoff)
        return s

    def close(self) -> None:
        for s, _ in self._open.values():
            s.close()


def _snapshot(c: RunConfig, session) -> tuple[dict, dict]:
    """(config as resolved, the manifest's placement and thread fields) of a session set up for c."""
    from ..device.placement import plan_for_device, plan_from_environment

    taskset = bench_taskset()
    pinning = (
        " + ".join(
            p for p in (f"taskset {taskset}" if taskset else "", "plan" if session.placement is not None else "") if p
        )
        or "none"
    )
    config = {
        "label": c.label,
        "t2w_threads": session.token2wav.threads,
        "tts_queue": session.reply.tts_queue,
        "pin": c.pin,
        "pinned": session.placement is not None,
        "pinning": pinning,
        "threads": session.engine_config.llm_threads,
        "device": session.device,
        "handoff": c.handoff,
        "token2mel": session.token2wav.token2mel,
    }
    # the plan the session applied, else the default one it would use (recorded as not applied)
    note = []
    try:
        plan = session.placement or plan_from_environment(session.device)
    except ConfigError as e:  # e.g. OMNI_T2W_THREADS does not fit the node: record the node anyway
        plan, note = plan_for_device(session.device, 1), [f"not applicable: {e}"]
    plan_dict = dict(plan.as_dict(), applied=session.placement is not None)
    plan_dict["notes"] += note
    return config, {
        "numa_plan": plan_dict,
        "thread_counts": {
            "llm_tts": session.engine_config.llm_threads,
            "token2wav": session.token2wav.threads,
            "os_cpus": os.cpu_count(),
        },
    }


def run_bench(opts: BenchOptions, log=print) -> list[dict]:
    """Runs every configuration, alternating per round; returns one run record per configuration."""
    from ..modelset.layout import discover
    from ..modelset.random_set import random_set_dir

    model_dir = opts.model_dir or str(random_set_dir("real"))
    chosen = prompts.select(opts.prompts)
    sessions = _Sessions(opts, model_dir)
    records = {c.label: {"warmup": [], "requests": []} for c in opts.configs}
    snapshots: dict[str, tuple[dict, dict]] = {}
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    t0 = time.perf_counter()
    try:
        for rnd in range(opts.warmup + opts.repeats):
            warm = rnd < opts.warmup
            for c, p in itertools.product(opts.configs, chosen):
                session = sessions.get(c)
                snapshots.setdefault(c.label, _snapshot(c, session))
                rec = measure(session, p, opts.seed)
                rec["round"] = rnd
                records[c.label]["warmup" if warm else "requests"].append(rec)
                failed = [g for g, v in rec["gates"].items() if not v["ok"]]
                log(
                    f"{'warm-up' if warm else f'round {rnd - opts.warmup + 1}/{opts.repeats}'} {c.label:<22} "
                    f"{p.name:<8} wall RTF {summary.fmt(rec['wall_rtf'])}, "
                    f"compute RTF {summary.fmt(rec['compute_rtf'])}, "
                    f"first audio {summary.fmt(rec['time_to_first_audio_s'])} s"
                    + (f"  [failed: {', '.join(failed)}]" if failed else "")
                )
        env = manifest([str(f) for f in discover(model_dir).files.values()], opts.full_hash)
        elapsed = time.perf_counter() - t0
        runs = [
            _run_record(c, records[c.label], opts, model_dir, started, elapsed, *snapshots[c.label], env)
            for c in opts.configs
        ]
    finally:
        sessions.close()
    return runs


def _run_record(
    c: RunConfig,
    rec: dict,
    opts: BenchOptions,
    model_dir: str,
    started: str,
    elapsed: float,
    config: dict,
    placement_fields: dict,
    env: dict,
) -> dict:
    reqs = rec["requests"]
    failed = [f"{r['prompt']}#{r['round']}: {g}" for r in reqs for g, v in r["gates"].items() if not v["ok"]]
    return {
        "schema_version": SCHEMA_VERSION,
        "benchmark": "omni-bench",
        "label": f"{opts.tag}-{c.label}" if opts.tag else c.label,
        "started": started,
        "model_dir": str(model_dir),
        "elapsed_s": elapsed,
        "config": config,
        "options": {
            "prompts": list(opts.prompts),
            "repeats": opts.repeats,
            "warmup": opts.warmup,
            "max_new_tokens": opts.max_new_tokens,
            "codes_per_chunk": opts.codes_per_chunk,
            "seed": opts.seed,
            "alternated_with": [o.label for o in opts.configs if o != c],
        },
        "valid": not failed,
        "data_valid": all(r["data_valid"] for r in reqs),
        "realtime_eligible": all(r["realtime_eligible"] for r in reqs),
        "failed_gates": failed,
        "summary": summary.summarise(reqs),
        "requests": reqs,
        "warmup": rec["warmup"],
        "manifest": dict(env, **placement_fields),
    }


def write_runs(runs: list[dict], out_dir: str | Path) -> list[Path]:
    import json

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    paths = []
    for r in runs:
        validate_run(r)  # a result that does not match the documented schema is a bug, not a number
        path = out / f"{stamp}-{r['label']}.json"
        path.write_text(json.dumps(r, indent=2))
        paths.append(path)
    return paths


def exit_status(runs: list[dict], allow_realtime_miss: bool = False) -> int:
    bad = [r for r in runs if not (r["data_valid"] if allow_realtime_miss else r["valid"])]
    return 1 if bad else 0
