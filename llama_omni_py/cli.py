"""``llama-omni``: info | make-models | download | speak | serve | worker | bench | eval.

Every user error (a bad argument, path, model file or device) prints one line
``llama-omni: error: ...`` and exits with status 2; output paths are checked before any work.
``--model`` takes a directory or a repository id; an id is fetched before the command runs
(modelset/hub_cli.py).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from importlib import metadata
from pathlib import Path

from . import __version__
from .errors import InvalidArgumentError, OmniError
from .fidelity import FIDELITIES

AUDIO_FORMATS = {".wav": "WAV", ".flac": "FLAC", ".ogg": "OGG"}  # what SpeakResult.save writes


class _Progress:
    """The loading bar on stderr; remembers whether its line is still open."""

    open = False

    def __call__(self, step: int, steps: int, what: str) -> None:
        filled = "#" * (20 * (step - 1) // steps)
        print(f"\rloading [{filled:<20}] {step}/{steps} {what:<12}", end="", file=sys.stderr, flush=True)
        _Progress.open = True

    @staticmethod
    def finish(text: str = "") -> None:
        if _Progress.open:
            print(text, file=sys.stderr, flush=True)
            _Progress.open = False


def check_output_path(path: str, formats: dict[str, str] = AUDIO_FORMATS) -> Path:
    """An output file we can write, in a format we write: checked before any work."""
    p = Path(path)
    if p.is_dir():
        raise InvalidArgumentError(f"output {path!r} is a directory; give a file name such as reply.wav")
    if p.suffix.lower() not in formats:
        raise InvalidArgumentError(
            f"output {path!r}: unsupported format {p.suffix or '(none)'!r}; use one of {', '.join(formats)}"
        )
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise InvalidArgumentError(f"output {path!r}: the directory {str(parent)!r} does not exist")
    if not os.access(parent, os.W_OK):
        raise InvalidArgumentError(f"output {path!r}: the directory {str(parent)!r} is not writable")
    return p


def _pkg_version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def collect_info(model_dir: str | None = None, device: str = "cpu") -> dict:
    from ._native import core, cpu_kernels
    from .device import backends, placement

    topo = placement.read_topology()
    devs = []
    for d in backends.devices():
        node = placement.pci_numa_node(d.pci_bus_id)
        devs.append(
            {
                "id": d.id,
                "description": d.description,
                "memory_total": d.memory_total,
                "pci_bus_id": d.pci_bus_id or None,
                "numa_node": node,
            }
        )
    info = {
        "llama_omni_py": __version__,
        "llama_cpp_python": _pkg_version("llama-cpp-python"),
        "ggml": core.ggml_version(),
        "compiled_backends": backends.compiled_backends(),
        "devices": devs,
        "cpu": {
            "model": topo.cpu_model,
            "logical": topo.logical_cpus,
            "physical_cores": topo.physical_cores,
            "allowed": placement.format_cpulist(list(topo.allowed_cpus)),
        },
        "numa_nodes": [{"id": n.id, "cpus": placement.format_cpulist(list(n.cpus))} for n in topo.nodes],
        "cpu_kernels": cpu_kernels(),
        "llama_system_info": core.llama_system_info().strip(),
    }
    if model_dir:
        from .modelset import layout as models

        ms = models.discover(model_dir)
        reports = models.validate(ms, ms.modules_present() or None, device)
        info["model_set"] = {
            "root": str(ms.root),
            "files": [
                {
                    "key": r.key,
                    "path": str(r.path),
                    "tensors": r.tensors,
                    "MiB": round(r.bytes / 2**20, 1),
                    **({"weight_types": list(r.weight_types)} if r.weight_types else {}),
                }
                for r in reports
            ],
            "missing": ms.missing(),
        }
    return info


def _print_info(info: dict) -> None:
    print(f"llama-omni-py {info['llama_omni_py']}  (llama-cpp-python {info['llama_cpp_python']}, ggml {info['ggml']})")
    print(f"backends compiled in: {', '.join(info['compiled_backends'])}")
    print("devices:")
    for d in info["devices"]:
        extra = f", {d['memory_total'] / 2**30:.1f} GiB" if d["memory_total"] else ""
        node = f", NUMA node {d['numa_node']}" if d["numa_node"] is not None else ""
        print(f"  {d['id']:<10} {d['description']}{extra}{node}")
    c = info["cpu"]
    print(
        f"cpu: {c['model']}; {c['logical']} logical CPUs, {c['physical_cores']} cores; "
        f"this process may use {c['allowed']}"
    )
    for n in info["numa_nodes"]:
        print(f"  NUMA node {n['id']}: CPUs {n['cpus']}")
    k = info["cpu_kernels"]
    print(
        f"cpu kernels: {k['active']} (this CPU runs {', '.join(k['available'])}; "
        f"BF16 {'yes' if k['bf16'] else 'no'}; BLAS {k['blas']})"
    )
    print(f"llama.cpp: {info['llama_system_info']}")
    if "model_set" in info:
        m = info["model_set"]
        print(f"model set {m['root']}:")
        for f in m["files"]:
            wt = f" weights {'/'.join(f['weight_types'])}" if "weight_types" in f else ""
            print(f"  ok  {f['key']:<24} {f['tensors']:>4} tensors {f['MiB']:>9.1f} MiB{wt}")
        for p in m["missing"]:
            print(f"  --  missing {p}")


def cmd_cann_audit(args) -> int:
    from .modelset.random_set import random_set_dir
    from .modules.cann_audit import run_audit

    result = run_audit(args.model_dir or random_set_dir(), args.cann_table)
    if args.json:
        print(json.dumps(result.as_dict(), indent=2))
    else:
        print(f"CANN op-support audit against {result.table}\n")
        print(result.markdown())
    return 1 if result.unsupported else 0


def cmd_info(args) -> int:
    if args.cann_audit:
        return cmd_cann_audit(args)
    info = collect_info(args.model_dir, args.device)
    if args.plan:
        from .device.backends import resolve_device
        from .device.placement import plan_from_environment

        info["placement"] = plan_from_environment(resolve_device(args.device)).as_dict()
    if args.json:
        print(json.dumps(info, indent=2))
    else:
        _print_info(info)
        if "placement" in info:
            print("placement plan: " + info["placement"]["text"])
    return 0


def add_info_parser(sub) -> None:
    from .modelset.hub_cli import add_model_arguments

    i = sub.add_parser("info", help="versions, backends, devices, CPU/NUMA topology; validates a model set")
    add_model_arguments(i, "the set to check; default: none")
    i.add_argument("--device", default="cpu", help="device the model set is checked for (dtype rules), e.g. cann:0")
    i.add_argument("--json", action="store_true", help="machine-readable output")
    i.add_argument("--plan", action="store_true", help="show the CPU placement a session on --device would use")
    i.add_argument(
        "--cann-audit",
        action="store_true",
        help="match every graph node of the model set (default: the demo set) against ggml's CANN "
        "op-support table; exit 1 if any node is unsupported",
    )
    i.add_argument("--cann-table", help="a ggml docs/ops/CANN.csv to audit against instead of the packaged table")
    i.set_defaults(func=cmd_info)


def cmd_make_models(args) -> int:
    from .modelset.generate import make_models

    only = [m.strip() for m in args.only.split(",") if m.strip()] if args.only else None
    if Path(args.dir).exists() and not Path(args.dir).is_dir():
        raise InvalidArgumentError(
            f"{args.dir!r} exists and is not a directory; give a directory to write the set into"
        )
    t0 = time.perf_counter()
    written = make_models(
        args.dir, args.size, only, args.seed, args.cfm_steps, llm_layers=args.llm_layers, workers=args.workers
    )
    total = sum(g.bytes for g in written)
    for g in written:
        print(f"{g.path}  {g.bytes / 2**20:8.1f} MiB")
    print(
        f"wrote {len(written)} files, {total / 2**20:.1f} MiB in {time.perf_counter() - t0:.1f} s "
        f"(size={args.size}, seed={args.seed}; random weights)"
    )
    return 0


def add_make_models_parser(sub) -> None:
    m = sub.add_parser("make-models", help="write a module set with random weights")
    m.add_argument("dir", help="output directory")
    m.add_argument("--size", choices=("tiny", "real"), default="tiny")
    m.add_argument("--only", help="comma-separated subset of llm,apm,vpm,tts,projector,token2wav")
    m.add_argument("--seed", type=int, default=0)
    m.add_argument(
        "--cfm-steps",
        type=int,
        default=5,
        help="CFM steps the Token2Wav prompt cache is built for (Token2Wav steps must match)",
    )
    m.add_argument(
        "--llm-layers",
        type=int,
        default=None,
        help="LLM layers (default 2 for both sizes; 36 with --size real is the whole Qwen3-8B, about 16 GB)",
    )
    m.add_argument("--workers", type=int, default=1, help="threads writing tensors (same bytes for any count)")
    m.set_defaults(func=cmd_make_models)


def cmd_speak(args) -> int:
    from .config import EngineConfig
    from .modelset.random_set import reply_for
    from .session import OmniSession
    from .video import VideoConfig
    from .vision import VisionConfig

    if args.text is None and not (args.audio or args.image or args.video):
        raise InvalidArgumentError("give text, --audio, --image or --video")
    output = check_output_path(args.output)
    for name in ("audio", "image", "video", "video_audio"):
        src = getattr(args, name)
        if src is not None and not Path(src).is_file():
            raise InvalidArgumentError(f"--{name.replace('_', '-')} {src!r}: no such file")
    if args.video_audio and not args.video:
        raise InvalidArgumentError("--video-audio is the audio track of --video: give --video too")
    engine = EngineConfig(
        threads=args.threads,
        fidelity=args.fidelity,
        vision=VisionConfig(rules=args.image_rules, max_slice_nums=args.max_slice_nums),
        video=VideoConfig(max_frames=args.max_frames, frame_rule=args.frame_rule, stack_frames=args.stack_frames),
    )
    limits = {"max_new_tokens": args.max_new_tokens} if args.max_new_tokens else {}
    reply = reply_for(args.model_dir, seed=args.seed, **limits)
    t0 = time.perf_counter()
    progress = _Progress()
    with OmniSession(args.model_dir, args.device, engine, progress=progress, reply=reply) as session:
        progress.finish(
            f"\rloading [{'#' * 20}] done in {time.perf_counter() - t0:.1f} s on {session.device}; generating ..."
        )
        result = session.speak(
            args.text, audio=args.audio, image=args.image, video=args.video, video_audio=args.video_audio
        )
    result.save(output)
    t = result.timings
    ttfa = "-" if t.time_to_first_audio_s is None else f"{t.time_to_first_audio_s:.2f} s"
    rtf = "-" if t.wall_rtf is None else f"{t.wall_rtf:.2f}"
    print(
        f"{output}: {t.audio_s:.2f} s of audio in {t.wall_s:.2f} s (wall RTF {rtf}, first audio {ttfa}; "
        f"llm {t.llm_ms:.0f} ms, tts {t.tts_ms:.0f} ms, token2wav {t.token2wav_ms:.0f} ms)"
    )
    if t.vision_slices:
        print(f"vision: {t.vision_slices} encoder inputs (overviews and slices), {t.vpm_ms:.0f} ms")
    if result.text:
        print(f"text: {result.text}")
    return 0


def add_speak_parser(sub) -> None:
    from .modelset.hub_cli import add_model_arguments

    sp = sub.add_parser("speak", help="answer text/audio/image/video with speech, written to a WAV file")
    sp.add_argument("text", nargs="?", help="the question (optional with --audio/--image/--video)")
    sp.add_argument("-o", "--output", default="reply.wav", help="24 kHz WAV to write")
    sp.add_argument("--audio", help="spoken question (any format ffmpeg reads)")
    sp.add_argument("--image", help="an image to ask about")
    sp.add_argument("--video", help="a video, watched as frames with the audio of each (docs/media-and-encoders.md)")
    sp.add_argument("--video-audio", help="a separate audio track for --video (instead of its own)")
    sp.add_argument("--max-frames", type=int, default=64, help="frames of the video at most (1-1024; 1: one frame)")
    sp.add_argument(
        "--frame-rule",
        choices=["minicpmo-utils", "evalkit"],
        default="minicpmo-utils",
        help="which frames and audio segments: the model's own utility or the evaluation kit's",
    )
    sp.add_argument("--stack-frames", type=int, default=1, help="sub-frames per second tiled into one image (1: off)")
    sp.add_argument(
        "--max-slice-nums",
        type=int,
        default=None,
        help="image slices besides the overview, 0-9 (default: 9 with the reference rules, 0 with llama.cpp-omni's)",
    )
    sp.add_argument(
        "--image-rules",
        choices=["reference", "llama.cpp-omni"],
        default=None,
        help="image preprocessing: MiniCPM-o's processor or llama.cpp-omni's (default: --fidelity's)",
    )
    add_model_arguments(sp)
    sp.add_argument("--device", default="auto", help="auto, cpu, cuda:0, cann:0, ...")
    sp.add_argument("--seed", type=int, default=0, help="-1: random")
    sp.add_argument("--threads", type=int, default=None, help="LLM/TTS CPU threads (default: libllama's)")
    sp.add_argument("--max-new-tokens", type=int, default=0, help="LLM tokens (0: 256, 60 with the demo set)")
    sp.add_argument(
        "--fidelity",
        choices=FIDELITIES,
        default="llama.cpp-omni",
        help="whose rules where llama.cpp-omni and the PyTorch reference differ (docs/fidelity.md)",
    )
    sp.set_defaults(func=cmd_speak)


def cmd_worker(args) -> int:
    from .server import serve
    from .server.worker_options import WorkerOptions

    if args.numa_node is not None:  # the whole process on its device's node (threads inherit it)
        from .device.placement import pin_process_to_node

        pin_process_to_node(args.numa_node)
    if args.parent_pid is not None:  # a gateway's worker ends with its gateway
        from .server.lifeline import die_with_parent

        die_with_parent(args.parent_pid)
    from .env import worker_secret

    options = WorkerOptions.from_args(args)
    config = options.server_config(args.host, args.port, args.device, args.numa_node, worker_secret())
    # a gateway's worker whose engine fails to load exits, so that the gateway starts it again
    return serve(config, announce=True, exit_on_failed_load=args.exit_on_load_failure or args.parent_pid is not None)


def add_worker_parser(sub) -> None:
    from .server.worker_options import WorkerOptions  # light: no native code

    wk = sub.add_parser("worker", help="one worker: WebSocket /backend (MiniCPM-o backend protocol), /health")
    wk.add_argument("--host", default="127.0.0.1")
    wk.add_argument("--port", type=int, default=8766, help="0: any free port (printed on stdout as JSON)")
    wk.add_argument("--device", default="auto", help="auto, cpu, cuda:0, cann:0, ...")
    wk.add_argument("--numa-node", type=int, default=None, help="pin the process and its threads to this node")
    wk.add_argument(
        "--parent-pid",
        type=int,
        default=None,
        help="end when this process (a gateway) ends; implies --exit-on-load-failure",
    )
    wk.add_argument(
        "--exit-on-load-failure",
        action="store_true",
        help="exit with status 3 when the models fail to load, for a supervisor to restart it "
        "(default: keep answering /health with 503 and the error)",
    )
    WorkerOptions.add_arguments(wk)
    wk.set_defaults(func=cmd_worker)


def cmd_serve(args) -> int:
    import dataclasses
    import math
    import secrets

    from .env import api_keys_from, worker_secret
    from .server.gateway import GatewayConfig, run_gateway
    from .server.gateway.workers import LocalWorkers, StaticWorkers, devices_for
    from .server.worker_options import WorkerOptions

    keys = api_keys_from(args.api_key or (), args.api_key_file)
    # Workers this gateway starts get a fresh secret (unless one is set); --connect workers need
    # the one they were started with.
    secret = worker_secret() or (None if args.connect else secrets.token_urlsafe(32))
    local_media = os.path.abspath(args.allowed_local_media_path) if args.allowed_local_media_path else None
    cfg = GatewayConfig(
        host=args.host,
        port=args.port,
        max_queue_size=args.max_queue,
        idle_release_s=min(args.idle_release, args.idle_timeout),
        idle_timeout_s=args.idle_timeout,
        max_message_bytes=int(args.max_message_mb * 2**20),
        max_body_bytes=int(args.max_message_mb * 2**20),
        model_name=args.model_name,
        api_keys=keys,
        allowed_local_media_path=local_media,
        max_local_media_bytes=int(args.max_local_media_mb * 2**20),
        max_audio_seconds=args.max_audio_seconds,
        image_ids=args.fidelity == "reference",  # the workers' image layout (VisionConfig.use_image_id)
    )
    options = WorkerOptions.from_args(args)
    if cfg.allowed_local_media_path:  # a turn may carry the local files as base64: the workers must take it
        needed = args.max_message_mb + args.max_local_media_mb * 4 / 3 + 1
        options = dataclasses.replace(options, max_message_mb=max(options.max_message_mb, math.ceil(needed)))
    if args.connect:
        sources = [StaticWorkers(args.connect.split(","), secret)]
    elif args.ray is not None:
        from .server.gateway.ray_workers import RayWorkers

        sources = [
            RayWorkers(
                args.workers or 1,
                options,
                address=args.ray or None,
                accelerator=args.ray_accelerator,
                cpus_per_worker=args.ray_cpus,
                secret=secret,
            )
        ]
    else:
        sources = [LocalWorkers(devices_for(args.workers, args.device), options.to_argv(), pin=args.pin, secret=secret)]
    run_gateway(cfg, sources)
    return 0


def add_serve_parser(sub) -> None:
    from .server.worker_options import WorkerOptions  # light: no native code

    sv = sub.add_parser(
        "serve",
        help="gateway + workers: the demo chat API, OpenAI API (/v1), queue, /health, /metrics, page at /",
    )
    sv.add_argument("--host", default="127.0.0.1")
    sv.add_argument("--port", type=int, default=8765)
    sv.add_argument("--device", default="auto", help="auto (one worker per accelerator, else cpu), cpu, cuda:0, ...")
    sv.add_argument("--workers", type=int, default=None, help="workers (default: one per accelerator, or 1)")
    sv.add_argument("--connect", help="use workers already running elsewhere: host:port,host:port")
    sv.add_argument(
        "--ray",
        nargs="?",
        const="",
        default=None,
        help="workers as Ray actors, one per GPU/NPU, across the cluster at ADDRESS (default: auto/local)",
    )
    sv.add_argument("--ray-accelerator", choices=("gpu", "npu", "cpu"), default="gpu", help="Ray resource per worker")
    sv.add_argument("--ray-cpus", type=float, default=1.0, help="CPUs Ray reserves per worker")
    sv.add_argument("--no-pin", dest="pin", action="store_false", help="do not pin workers to their NUMA node")
    sv.add_argument("--max-queue", type=int, default=1000, help="requests waiting for a worker before refusals")
    sv.add_argument(
        "--idle-release",
        type=float,
        default=30.0,
        help="an idle whole-life session gives its worker back while others wait",
    )
    sv.add_argument("--model-name", default="MiniCPM-o-4.5", help="the model id of the OpenAI API")
    sv.add_argument(
        "--api-key",
        action="append",
        help="require this key (Bearer / X-API-Key / ?api_key=) on every route but /health and the pages; "
        "repeatable (also OMNI_API_KEY; a key on the command line shows in ps: prefer --api-key-file)",
    )
    sv.add_argument("--api-key-file", help="a file of API keys, one per line")
    sv.add_argument(
        "--allowed-local-media-path",
        metavar="DIR",
        help="the OpenAI API reads file:// media only under DIR (links and '..' resolved); default: never",
    )
    sv.add_argument(
        "--max-local-media-mb",
        type=float,
        default=2048.0,
        help="file:// media one request may name in all (the workers' --max-message-mb is raised to carry it)",
    )
    WorkerOptions.add_arguments(sv)
    sv.set_defaults(func=cmd_serve)


def add_bench_parser(sub) -> None:
    from .bench import arguments as bench_arguments  # light: imports nothing native until it runs

    b = sub.add_parser(
        "bench",
        help="RTF, time to first audio, stage and queue times over a fixed prompt set; "
        "one JSON per configuration (exit 1 when a validity gate fails)",
    )
    bench_arguments.add_arguments(b)
    b.set_defaults(func=bench_arguments.main_from_args)


def build_parser() -> argparse.ArgumentParser:
    from .eval.cli import add_parser as add_eval_parser  # light: nothing native until a command runs
    from .modelset.hub_cli import add_download_parser

    p = argparse.ArgumentParser(prog="llama-omni", description="MiniCPM-o 4.5 omni inference on llama.cpp/ggml")
    p.add_argument("--version", action="version", version=f"llama-omni-py {__version__}")
    p.add_argument("-v", "--verbose", action="store_true", help="log progress")
    sub = p.add_subparsers(dest="command", required=True)
    add_info_parser(sub)
    add_make_models_parser(sub)
    add_download_parser(sub)
    add_speak_parser(sub)
    add_serve_parser(sub)
    add_worker_parser(sub)
    add_bench_parser(sub)
    add_eval_parser(sub)
    return p


# the extras the commands beyond speak need, by the module a missing one leaves out
EXTRA_OF_MODULE = {
    "starlette": "server",
    "uvicorn": "server",
    "websockets": "server",
    "prometheus_client": "server",
    "jsonschema": "bench",
    "matplotlib": "bench",
    "ray": "ray",
}


def missing_extra(exc: ImportError) -> str | None:
    """The one-line error for a command whose extra is not installed, or None."""
    top = (exc.name or "").split(".")[0]
    extra = EXTRA_OF_MODULE.get(top)
    if extra is None:
        return None
    return f"this command needs the {extra} extra ({top} is not installed): pip install 'llama-omni-py[{extra}]'"


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    try:
        from .modelset.hub_cli import resolve_model_args

        resolve_model_args(args)  # a repository id in --model: fetched and validated first
        return args.func(args)
    except (OmniError, ValueError) as exc:  # ConfigError and InvalidArgumentError are ValueErrors
        _Progress.finish()
        first, _, rest = str(exc).strip().partition("\n")
        detail = " (run with -v for details)" if rest and not args.verbose else ""
        print(f"llama-omni: error: {first or type(exc).__name__}{detail}", file=sys.stderr)
        if rest and args.verbose:
            print(rest, file=sys.stderr)
        return 2
    except ImportError as exc:
        message = missing_extra(exc)
        if message is None:
            raise
        _Progress.finish()
        print(f"llama-omni: error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        _Progress.finish()
        print("llama-omni: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
