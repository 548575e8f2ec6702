"""``llama-omni bench``: the fixed prompt set through ``OmniSession.stream`` under one or more
configurations, alternating per round so machine noise hits all of them alike; warm-up rounds
are kept apart; each configuration's run is written as one JSON file (docs/benchmark-schema.md),
validated against the package's JSON Schema. Exit status 1 when a run breaks a validity gate."""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from .. import checks
from ..config import ENGINES, HANDOFFS, bench_taskset, t2w_threads_env, tts_queue_env
from ..constants import DEFAULT_QUEUE
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
    t2w_engine: str = "auto"  # Token2Mel's CPU compute: Token2WavConfig.engine

    def __post_init__(self):
        for name in ("t2w_threads", "tts_queue"):
            v = getattr(self, name)
            if v is not None and (not isinstance(v, int) or v < 1):
                raise ConfigError(name, f"must be a positive integer, got {v!r}")
        if self.handoff not in HANDOFFS:
            raise ConfigError("handoff", f"must be one of {', '.join(HANDOFFS)}, got {self.handoff!r}")
        checks.choice("t2w_engine", self.t2w_engine, ENGINES)

    @property
    def label(self) -> str:
        pin = {None: "auto", True: "pin", False: "nopin"}[self.pin]
        t2w = self.t2w_threads or t2w_threads_env() or "default"
        chunked = "" if self.handoff == "window" else "-chunked"
        engine = "" if self.t2w_engine == "auto" else f"-{self.t2w_engine}"
        return f"t2w{t2w}-q{self.tts_queue or tts_queue_env() or DEFAULT_QUEUE}-{pin}{chunked}{engine}"

    def token2wav(self):
        from ..config import Token2WavConfig

        return Token2WavConfig(threads=self.t2w_threads, engine=self.t2w_engine)


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
        from ..config import SessionConfig
        from ..session import OmniSession

        self._make = lambda c: OmniSession(
            model_dir,
            opts.device,
            SessionConfig(
                threads=opts.threads,
                token2wav=c.token2wav(),
                pin=c.pin,
                seed=opts.seed,
                max_new_tokens=opts.max_new_tokens,
                max_audio_per_chunk=opts.codes_per_chunk,
            ),
        )
        self._open: dict = {}

    def get(self, c: RunConfig):
        if c.pin not in self._open:
            s = self._make(c)
            self._open[c.pin] = (s, s.config.tts_queue)  # the default (OMNI_TTS_QUEUE or 16)
        s, default_queue = self._open[c.pin]
        if s.config.token2wav != c.token2wav():
            s.reconfigure(c.token2wav())
        s.config = dataclasses.replace(s.config, tts_queue=c.tts_queue or default_queue, tts_handoff=c.handoff)
        return s

    def close(self) -> None:
        for s, _ in self._open.values():
            s.close()


def _snapshot(c: RunConfig, session) -> tuple[dict, dict]:
    """(config as resolved, the manifest's placement and thread fields) of a session set up for c."""
    from ..placement import plan_for_device, plan_from_environment

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
        "tts_queue": session.config.tts_queue,
        "pin": c.pin,
        "pinned": session.placement is not None,
        "pinning": pinning,
        "threads": session.config.llm_threads,
        "device": session.device,
        "handoff": c.handoff,
        "t2w_engine": session.token2wav.engine,
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
            "llm_tts": session.config.llm_threads,
            "token2wav": session.token2wav.threads,
            "os_cpus": os.cpu_count(),
        },
    }


def run_bench(opts: BenchOptions, log=print) -> list[dict]:
    """Runs every configuration, alternating per round; returns one run record per configuration."""
    from ..demo import demo_model_dir
    from ..modelset.layout import discover

    model_dir = opts.model_dir or str(demo_model_dir("real"))
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


# -- command line (``llama-omni bench`` and benchmarks/run.py) ------------------------------------
def _int_list(text: str) -> list[int | None]:
    return [None if v in ("env", "") else int(v) for v in text.split(",")]


def add_arguments(p: argparse.ArgumentParser) -> None:
    d = BenchOptions()
    p.add_argument(
        "--mode",
        choices=("simplex", "duplex"),
        default="simplex",
        help="simplex: the prompt set through OmniSession.stream; duplex: a full-duplex session fed one unit a second",
    )
    p.add_argument(
        "--model-dir",
        help="module set (default: the real-dimension random set, generated into the user "
        "cache on first use: 6.4 GB, about a minute)",
    )
    p.add_argument("--device", default=d.device)
    p.add_argument(
        "--t2w-threads",
        default="env",
        help="comma list of vocoder thread counts to compare ('env': OMNI_T2W_THREADS or the default)",
    )
    p.add_argument("--tts-queue", default="env", help="comma list of TTS queue sizes ('env': OMNI_TTS_QUEUE or 16)")
    p.add_argument("--pin", default="auto", help="comma list of auto,on,off (session placement)")
    p.add_argument(
        "--handoff",
        default="window",
        help="comma list of window,text_chunk: TTS -> Token2Wav every 25 codes, or a text chunk's codes at once",
    )
    p.add_argument(
        "--t2w-engine",
        default="auto",
        help="comma list of auto,graph,native: Token2Mel's CPU compute (graph: ggml graphs; native: our CPU engine)",
    )
    p.add_argument("--prompts", default=",".join(d.prompts), help=f"comma list from {','.join(prompts.PROMPTS)}")
    p.add_argument(
        "--repeats", type=int, default=None, help=f"measured rounds (simplex: >= 3, default {d.repeats}; duplex: 1)"
    )
    p.add_argument("--warmup", type=int, default=d.warmup, help="warm-up rounds, recorded apart")
    p.add_argument("--max-new-tokens", type=int, default=d.max_new_tokens)
    p.add_argument(
        "--codes-per-chunk",
        type=int,
        default=d.codes_per_chunk,
        help="speech codes per TTS chunk (25 = 1 s of audio; random weights never stop on their own)",
    )
    p.add_argument("--threads", type=int, default=None, help="LLM/TTS threads (default: libllama's)")
    p.add_argument("--seed", type=int, default=None, help=f"sampling seed (simplex {d.seed}, duplex 42)")
    p.add_argument("--out-dir", default=d.out_dir, help="one JSON file per configuration is written here")
    p.add_argument("--full-hash", action="store_true", help="sha256 of whole model files (default: size + first MiB)")
    p.add_argument("--tag", default="", help="prefix of the run labels and file names")
    p.add_argument(
        "--allow-realtime-miss",
        action="store_true",
        help="exit 0 when only the realtime gate (Token2Wav queue wait) fails, e.g. on a small CPU host",
    )
    dx = p.add_argument_group("duplex (--mode duplex)")
    dx.add_argument("--units", type=int, default=36, help="units of 1 s pushed (perf-duplex's case: 36)")
    dx.add_argument("--interval", type=float, default=1.0, help="seconds between pushes (0: as fast as accepted)")
    dx.add_argument("--inputs", help="folder of NNNN.wav (+ NNNN.jpg) units (default: a generated 540x960 case)")
    dx.add_argument("--no-frames", action="store_true", help="audio only (no image with each unit)")
    dx.add_argument("--force-listen-count", type=int, default=4, help="units that listen before the model may speak")
    dx.add_argument("--warmup-units", type=int, default=2, help="units of a warm-up session, recorded apart")


def options_from_args(a: argparse.Namespace) -> BenchOptions:
    pins = {"auto": None, "on": True, "off": False}
    try:
        pin = [pins[v] for v in a.pin.split(",")]
    except KeyError:
        raise ConfigError("pin", f"each value must be auto, on or off, got {a.pin!r}") from None
    try:
        threads, queues = _int_list(a.t2w_threads), _int_list(a.tts_queue)
    except ValueError as e:
        raise ConfigError("t2w_threads/tts_queue", f"comma lists of integers or 'env': {e}") from None
    lists = (threads, queues, pin, a.handoff.split(","), a.t2w_engine.split(","))
    configs = tuple(RunConfig(t, q, p, h, e) for t, q, p, h, e in itertools.product(*lists))
    return BenchOptions(
        a.model_dir,
        a.device,
        configs,
        tuple(a.prompts.split(",")),
        MIN_REPEATS if a.repeats is None else a.repeats,
        a.warmup,
        a.max_new_tokens,
        a.codes_per_chunk,
        a.threads,
        BenchOptions.seed if a.seed is None else a.seed,
        a.out_dir,
        a.full_hash,
        a.allow_realtime_miss,
        a.tag,
    )


def duplex_options_from_args(a: argparse.Namespace):
    from .duplex import DuplexBenchOptions

    simplex_only = {
        "--handoff": a.handoff != "window",
        "--t2w-engine": a.t2w_engine != "auto",
        "--tts-queue": a.tts_queue != "env",
        "--prompts": a.prompts != ",".join(BenchOptions().prompts),
        "--codes-per-chunk": a.codes_per_chunk != BenchOptions().codes_per_chunk,
        "--t2w-threads (a list)": "," in a.t2w_threads,
        "--pin (a list)": "," in a.pin,
    }
    given = [k for k, v in simplex_only.items() if v]
    if given:
        raise ConfigError("mode", f"{', '.join(given)}: simplex options, not taken by --mode duplex")
    pins = {"auto": None, "on": True, "off": False}
    if a.pin not in pins:
        raise ConfigError("pin", f"must be auto, on or off, got {a.pin!r}")
    t2w = _int_list(a.t2w_threads)[0]
    return DuplexBenchOptions(
        model_dir=a.model_dir,
        device=a.device,
        units=a.units,
        interval_s=a.interval,
        inputs=a.inputs,
        frames=not a.no_frames,
        repeats=1 if a.repeats is None else a.repeats,
        warmup_units=a.warmup_units,
        threads=a.threads,
        t2w_threads=t2w,
        pin=pins[a.pin],
        force_listen_count=a.force_listen_count,
        seed=42 if a.seed is None else a.seed,
        out_dir=a.out_dir,
        tag=a.tag,
    )


def duplex_main(a: argparse.Namespace) -> int:
    from . import duplex

    opts = duplex_options_from_args(a)
    record = duplex.run_duplex_bench(opts, log=lambda m: print(m, file=sys.stderr, flush=True))
    path = duplex.write_duplex_run(record, opts.out_dir)
    print(duplex.stage_table(record["runs"][-1]["summary"]))
    ok = record["data_valid"] and (record["realtime_eligible"] or a.allow_realtime_miss)
    print(f"{path}: {'valid' if record['data_valid'] else 'INVALID'}; realtime {record['realtime_eligible']}")
    return 0 if ok else 1


def main_from_args(a: argparse.Namespace) -> int:
    if a.mode == "duplex":
        return duplex_main(a)
    opts = options_from_args(a)
    runs = run_bench(opts, log=lambda m: print(m, file=sys.stderr, flush=True))
    paths = write_runs(runs, opts.out_dir)
    print(summary.markdown_table(runs))
    for r, p in zip(runs, paths):
        print(f"{p}: {'valid' if r['valid'] else 'INVALID -- ' + '; '.join(r['failed_gates'][:5])}")
    print(f"total {runs[0]['elapsed_s']:.0f} s")
    return exit_status(runs, opts.allow_realtime_miss)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="llama-omni bench", description=__doc__.splitlines()[0])
    add_arguments(p)
    return main_from_args(p.parse_args(argv))
