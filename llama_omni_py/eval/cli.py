"""``llama-omni eval``: Daily-Omni, Video-MME, Seed-TTS and the RTF metric, each by a named
protocol, against our engine (``--model-dir``) or an OpenAI-compatible server (``--endpoint``).

    llama-omni eval daily-omni --data DIR [--protocol evalkit] [--limit N] [--out DIR]
    llama-omni eval videomme --data DIR [--durations short,medium,long] [--max-frames 96]
    llama-omni eval seed-tts --meta zh/meta.lst [--asr KIND:PATH] [--sv PATH --sv-wavlm PATH] [--proxy-sv PATH]
    llama-omni eval rtf --video F
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ..errors import InvalidArgumentError


def require(*modules: str) -> None:
    """A missing eval dependency is one line naming the package and the extra."""
    from .deps import require as need

    for m in modules:
        need(m, purpose="llama-omni eval")


def _target_options(p: argparse.ArgumentParser) -> None:
    from ..modelset.hub_cli import add_model_arguments

    g = p.add_argument_group("target (one of)")
    add_model_arguments(g, "our engine in process; default: the demo set, random weights")
    g.add_argument("--device", default="auto", help="with --model-dir: auto, cpu, cuda:0, cann:0, ...")
    g.add_argument("--threads", type=int, default=None, help="with --model-dir: CPU threads")
    g.add_argument("--n-ctx", type=int, default=None, help="with --model-dir: the LLM context (default 8192)")
    g.add_argument("--endpoint", help="an OpenAI-compatible server's base URL (ours, or vLLM-Omni's)")
    g.add_argument("--endpoint-model", help="with --endpoint: the model id (default: the first of /v1/models)")
    g.add_argument("--api-key", help="with --endpoint: the bearer key")
    g.add_argument("--concurrency", type=int, default=1, help="with --endpoint: requests in flight")
    g.add_argument("--pack", choices=("video", "interleave"), default="video", help="with --endpoint: how media go")
    g.add_argument("--extra-body", help="with --endpoint: JSON merged into each request (e.g. chat_template_kwargs)")


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--limit", type=int, default=None, help="the first N items (after sampling)")
    p.add_argument("--sample-ratio", type=float, default=None, help="stratified share of the videos, (0, 1]")
    p.add_argument("--seed", type=int, default=0, help="the decoding seed of every request")
    p.add_argument("--out", help="run folder (records.jsonl, summary.json, summary.md); a rerun resumes it")


def add_parser(sub) -> None:
    from ..modelset.hub_cli import add_model_arguments
    from .protocols import PROTOCOLS

    e = sub.add_parser("eval", help="benchmarks: Daily-Omni, Video-MME, Seed-TTS, RTF (docs/evaluation.md)")
    es = e.add_subparsers(dest="benchmark", required=True)
    d = es.add_parser("daily-omni", help="Daily-Omni multiple choice (qa.json + Videos/)")
    v = es.add_parser("videomme", help="Video-MME multiple choice (its parquet + videos)")
    for p in (d, v):
        p.add_argument("--data", required=True, help="the dataset folder")
        p.add_argument("--protocol", choices=PROTOCOLS, default="evalkit", help="whose rules (docs/evaluation.md)")
        p.add_argument("--max-frames", type=int, default=None, help="frames per video (default: the protocol's)")
        _common(p)
        _target_options(p)
    v.add_argument("--durations", default="short,medium,long", help="comma-separated Video-MME durations")
    d.set_defaults(func=cmd_mcq)
    v.set_defaults(func=cmd_mcq)

    t = es.add_parser("seed-tts", help="Seed-TTS zero-shot synthesis, WER and speaker similarity")
    t.add_argument("--meta", required=True, help="a seed-tts-eval meta list (zh/meta.lst, en/meta.lst)")
    t.add_argument("--variant", choices=("zero-shot", "llama.cpp-omni"), default="zero-shot")
    t.add_argument("--language", choices=("zh", "en"), default=None, help="default: from the meta path")
    t.add_argument("--asr", help="KIND:PATH, e.g. paraformer:/models/paraformer-zh or whisper:/models/whisper-large-v3")
    t.add_argument("--sv", help="the official speaker model wavlm_large_finetune.pth")
    t.add_argument("--sv-wavlm", help="with --sv: the WavLM-large weights (s3prl's wavlm_large.pt or a folder)")
    t.add_argument("--proxy-sv", help="a wavlm-base-plus folder for the proxy SIM (labelled a proxy)")
    t.add_argument("--no-synthesis", action="store_true", help="score the wavs already in --out")
    _common(t)
    add_model_arguments(t)
    t.add_argument("--device", default="auto")
    t.add_argument("--threads", type=int, default=None)
    t.add_argument("--endpoint", help="an OpenAI-compatible server with audio out, instead of --model")
    t.add_argument("--endpoint-model", help="with --endpoint: the model id (default: the first of /v1/models)")
    t.add_argument("--api-key", help="with --endpoint: the bearer key")
    t.set_defaults(func=cmd_seed_tts)

    r = es.add_parser("rtf", help="the competition RTF: a 1 s-unit duplex run over a video")
    r.add_argument("--video", required=True, help="a video with sound (<= 120 s)")
    r.add_argument("--seconds", type=int, default=None, help="units to run (default: the whole video)")
    r.add_argument("--interval", type=float, default=1.0, help="seconds between pushed units")
    r.add_argument("--out", help="run folder")
    add_model_arguments(r)
    r.add_argument("--device", default="auto")
    r.add_argument("--threads", type=int, default=None)
    r.set_defaults(func=cmd_rtf)


def _out(args, default: str) -> Path:
    return Path(args.out) if args.out else Path("eval-runs") / default


def _target(args):
    from .targets import EndpointTarget, LocalTarget

    if args.endpoint and args.model_dir:
        raise InvalidArgumentError("give --model or --endpoint, not both")
    if args.concurrency < 1:
        raise InvalidArgumentError(f"--concurrency must be at least 1, got {args.concurrency}")
    if args.endpoint:
        extra = {}
        if args.extra_body:
            try:
                extra = json.loads(args.extra_body)
            except ValueError as e:
                raise InvalidArgumentError(f"--extra-body is not JSON: {e}") from None
            if not isinstance(extra, dict):
                raise InvalidArgumentError("--extra-body must be a JSON object")
        return EndpointTarget(args.endpoint, args.endpoint_model, args.api_key, args.pack, extra)
    if args.concurrency > 1:
        raise InvalidArgumentError("--concurrency is for --endpoint; the local engine answers one at a time")
    return LocalTarget(args.model_dir, args.device, args.threads, args.n_ctx)


def cmd_mcq(args) -> int:
    from . import datasets as D
    from .mcq import run
    from .protocols import protocol

    if args.benchmark == "videomme":
        require("pandas", "pyarrow")
        durations = tuple(x.strip() for x in args.durations.split(",") if x.strip())
        bad = set(durations) - {"short", "medium", "long"}
        if bad or not durations:
            raise InvalidArgumentError(f"--durations takes short, medium, long; got {args.durations!r}")
        items = D.videomme(args.data, durations)
        keys = ("duration", "domain", "sub_category")
    else:
        items = D.daily_omni(args.data)
        keys = ("video_duration", "video_category")
    if args.sample_ratio is not None:
        if args.limit:
            raise InvalidArgumentError("give --limit or --sample-ratio, not both")
        items = D.stratified(items, args.sample_ratio, keys)
    items = D.limited(items, args.limit)
    if not items:
        raise InvalidArgumentError(f"{args.data}: no items to run")
    p = protocol(args.protocol, args.benchmark, args.max_frames)
    target = _target(args)
    settings = {
        "benchmark": args.benchmark,
        "protocol": args.protocol,
        "data": str(Path(args.data).resolve()),
        "limit": args.limit,
        "sample_ratio": args.sample_ratio,
        "seed": args.seed,
        "target": target.describe(),
    }
    out = _out(args, f"{args.benchmark}-{args.protocol}")
    try:
        result = run(items, p, target, out, settings=settings, concurrency=args.concurrency, seed=args.seed)
    finally:
        target.close()
    h = result["headline"]
    c = result["counts"]
    print(
        f"{args.benchmark} ({args.protocol}): {h['accuracy']} % ({h['extractor']} extraction, of {h['denominator']} "
        f"items); {c['items']} items, {c['missing_media']} missing media, {c['failed_requests']} failed, "
        f"{c['empty_replies']} empty -> {out / 'summary.md'}"
    )
    return 0


def cmd_seed_tts(args) -> int:
    from .seedtts_run import run_seed_tts

    return run_seed_tts(args, _out(args, f"seed-tts-{args.variant}"))


def cmd_rtf(args) -> int:
    from .rtf import run_rtf

    return run_rtf(args, _out(args, "rtf"))
