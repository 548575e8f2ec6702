"""``llama-omni bench``'s command line (also benchmarks/run.py): the options of the three modes
(turn_based: runner.py, duplex: duplex.py, load: load.py) and the dispatch to them."""

from __future__ import annotations

import argparse
import itertools
import sys

from ..errors import ConfigError
from ..modelset.hub_cli import add_model_arguments, resolve_model_args
from . import prompts, summary
from .runner import MIN_REPEATS, BenchOptions, RunConfig, exit_status, run_bench, write_runs


def _int_list(text: str) -> list[int | None]:
    return [None if v in ("env", "") else int(v) for v in text.split(",")]


def add_arguments(p: argparse.ArgumentParser) -> None:
    d = BenchOptions()
    _add_target_arguments(p, d)
    _add_compared_arguments(p, d)
    _add_round_arguments(p, d)
    _add_output_arguments(p, d)
    _add_duplex_arguments(p)
    _add_load_arguments(p)


def _add_target_arguments(p: argparse.ArgumentParser, d: BenchOptions) -> None:
    """The mode, and the model set and device it runs on."""
    p.add_argument(
        "--mode",
        choices=("turn_based", "duplex", "load"),
        default="turn_based",
        help="turn_based: the prompt set through OmniSession.stream; duplex: a full-duplex session fed one unit a "
        "second; load: N sessions at once, an engine of N slots against N single-slot workers",
    )
    add_model_arguments(
        p, "default: the real-dimension random set, generated into the user cache on first use: 6.4 GB, about a minute"
    )
    p.add_argument("--device", default=d.device)


def _add_compared_arguments(p: argparse.ArgumentParser, d: BenchOptions) -> None:
    """The comma lists turn_based compares (each combination is one configuration), and the prompts."""
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
        "--token2mel",
        dest="token2mel",
        default="auto",
        help="comma list of auto,graph,native: which Token2Mel computes on the CPU (graph: ggml graphs; native: our "
        "CPU code)",
    )
    p.add_argument("--prompts", default=",".join(d.prompts), help=f"comma list from {','.join(prompts.PROMPTS)}")


def _add_round_arguments(p: argparse.ArgumentParser, d: BenchOptions) -> None:
    """How many rounds, and what each generates."""
    p.add_argument(
        "--repeats",
        type=int,
        default=None,
        help=f"measured rounds (turn_based: >= 3, default {d.repeats}; duplex: 1; load: 2)",
    )
    p.add_argument(
        "--warmup",
        type=int,
        default=d.warmup,
        help="warm-up rounds, recorded apart (load: 0 or more: a short phase per kind after each load)",
    )
    p.add_argument("--max-new-tokens", type=int, default=d.max_new_tokens)
    p.add_argument(
        "--codes-per-chunk",
        type=int,
        default=d.codes_per_chunk,
        help="speech codes per TTS chunk (25 = 1 s of audio; random weights never stop on their own)",
    )
    p.add_argument("--threads", type=int, default=None, help="LLM/TTS threads (default: libllama's)")
    p.add_argument(
        "--seed",
        type=int,
        default=None,
        help=f"sampling seed (turn_based {d.seed}, duplex 42, load 0: session i: seed+i)",
    )


def _add_output_arguments(p: argparse.ArgumentParser, d: BenchOptions) -> None:
    """Where the records go, what they hold, and which failed gates still exit 0."""
    p.add_argument("--out-dir", default=d.out_dir, help="one JSON file per configuration is written here")
    p.add_argument("--full-hash", action="store_true", help="sha256 of whole model files (default: size + first MiB)")
    p.add_argument("--tag", default="", help="prefix of the run labels and file names")
    p.add_argument(
        "--allow-realtime-miss",
        action="store_true",
        help="exit 0 when only the realtime gate (Token2Wav queue wait) fails, e.g. on a small CPU host",
    )


def _add_duplex_arguments(p: argparse.ArgumentParser) -> None:
    dx = p.add_argument_group("duplex (--mode duplex; --units, --interval, --force-listen-count also --mode load)")
    dx.add_argument("--units", type=int, default=None, help="1 s units pushed (duplex 36, as perf-duplex; load 4)")
    dx.add_argument(
        "--interval", type=float, default=None, help="seconds between pushes (0: as fast as accepted; duplex 1, load 0)"
    )
    dx.add_argument("--inputs", help="folder of NNNN.wav (+ NNNN.jpg) units (default: a generated 540x960 case)")
    dx.add_argument("--no-frames", action="store_true", help="audio only (no image with each unit)")
    dx.add_argument("--force-listen-count", type=int, default=None, help="units that listen first (duplex 4, load 0)")
    dx.add_argument("--warmup-units", type=int, default=2, help="units of a warm-up session, recorded apart")


def _add_load_arguments(p: argparse.ArgumentParser) -> None:
    ld = p.add_argument_group("load (--mode load)")
    ld.add_argument("--slots", default="1,2,4", help="comma list of session counts: an engine of N slots vs N workers")
    ld.add_argument("--kinds", default="text,audio,duplex", help="comma list of session kinds: text,audio,duplex")
    ld.add_argument("--competitor", action="store_true", help="a busy process spins on one of the CPUs throughout")
    ld.add_argument("--cpus", help="CPU list every process of the run is pinned to (default: this process's mask)")
    ld.add_argument("--batch-invariant", action="store_true", help="EngineConfig(batch_invariant=True) everywhere")


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
    lists = (threads, queues, pin, a.handoff.split(","), a.token2mel.split(","))
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


def _refuse_turn_based_options(a: argparse.Namespace, codes_per_chunk: bool) -> None:
    """ConfigError naming the turn-based-only options given to another mode."""
    turn_based_only = {
        "--handoff": a.handoff != "window",
        "--token2mel": a.token2mel != "auto",
        "--tts-queue": a.tts_queue != "env",
        "--prompts": a.prompts != ",".join(BenchOptions().prompts),
        "--codes-per-chunk": codes_per_chunk and a.codes_per_chunk != BenchOptions().codes_per_chunk,
        "--t2w-threads (a list)": "," in a.t2w_threads,
        "--pin (a list)": "," in a.pin,
    }
    given = [k for k, v in turn_based_only.items() if v]
    if given:
        raise ConfigError("mode", f"{', '.join(given)}: turn-based options, not taken by --mode {a.mode}")


def _one_pin_and_t2w(a: argparse.Namespace) -> tuple[bool | None, int | None]:
    pins = {"auto": None, "on": True, "off": False}
    if a.pin not in pins:
        raise ConfigError("pin", f"must be auto, on or off, got {a.pin!r}")
    return pins[a.pin], _int_list(a.t2w_threads)[0]


def _int_tuple(field: str, text: str) -> tuple[int, ...]:
    try:
        return tuple(int(v) for v in text.split(","))
    except ValueError:
        raise ConfigError(field, f"must be a comma list of integers, got {text!r}") from None


def load_options_from_args(a: argparse.Namespace):
    from ..device.placement import parse_cpulist
    from .load import LoadBenchOptions

    _refuse_turn_based_options(a, codes_per_chunk=False)
    duplex_only = {"--inputs": a.inputs is not None, "--no-frames": a.no_frames, "--warmup-units": a.warmup_units != 2}
    given = [k for k, v in duplex_only.items() if v]
    if given:
        raise ConfigError("mode", f"{', '.join(given)}: duplex options, not taken by --mode load")
    pin, t2w = _one_pin_and_t2w(a)
    try:
        cpus = tuple(parse_cpulist(a.cpus)) if a.cpus else None
    except ValueError as e:
        raise ConfigError("cpus", f"must be a CPU list such as 0-3,8: {e}") from None
    return LoadBenchOptions(
        model_dir=a.model_dir,
        device=a.device,
        slots=_int_tuple("slots", a.slots),
        kinds=tuple(a.kinds.split(",")),
        repeats=2 if a.repeats is None else a.repeats,
        warmup=a.warmup > 0,
        max_new_tokens=a.max_new_tokens,
        codes_per_chunk=a.codes_per_chunk,
        units=4 if a.units is None else a.units,
        interval_s=0.0 if a.interval is None else a.interval,
        force_listen=0 if a.force_listen_count is None else a.force_listen_count,
        threads=a.threads,
        t2w_threads=t2w,
        pin=pin,
        batch_invariant=a.batch_invariant,
        seed=0 if a.seed is None else a.seed,
        competitor=a.competitor,
        cpus=cpus,
        out_dir=a.out_dir,
        tag=a.tag,
        full_hash=a.full_hash,
    )


def duplex_options_from_args(a: argparse.Namespace):
    from .duplex import DuplexBenchOptions

    _refuse_turn_based_options(a, codes_per_chunk=True)
    pin, t2w = _one_pin_and_t2w(a)
    return DuplexBenchOptions(
        model_dir=a.model_dir,
        device=a.device,
        units=36 if a.units is None else a.units,
        interval_s=1.0 if a.interval is None else a.interval,
        inputs=a.inputs,
        frames=not a.no_frames,
        repeats=1 if a.repeats is None else a.repeats,
        warmup_units=a.warmup_units,
        threads=a.threads,
        t2w_threads=t2w,
        pin=pin,
        force_listen_count=4 if a.force_listen_count is None else a.force_listen_count,
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
    if a.mode == "load":
        from .load import load_main

        return load_main(load_options_from_args(a))
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
    args = p.parse_args(argv)
    resolve_model_args(args)  # a repository id in --model: fetched first
    return main_from_args(args)
