"""The command line's side of models by repository id: ``--model`` (alias ``--model-dir``),
``--llm-quant`` and ``--hub`` on every command that loads a set, the one step that fetches a
repository id before a command runs, and ``llama-omni download``."""

from __future__ import annotations

import argparse
import time

from ..env import HUBS
from ..errors import InvalidArgumentError

MODEL_HELP = (
    "a MiniCPM-o-4_5-gguf directory or its LLM file, or a repository id such as "
    "openbmb/MiniCPM-o-4_5-gguf (REPO:QUANT also picks the LLM quantization)"
)
QUANT_HELP = (
    "LLM quantization fetched with a repository id, e.g. F16, Q8_0, Q4_K_M "
    "(default: F16 on CANN, else the first published of Q4_K_M, Q8_0, F16)"
)


RANDOM_SET_DEFAULT = "default: the random set, random weights"


def add_model_arguments(parser: argparse.ArgumentParser, default: str = RANDOM_SET_DEFAULT) -> None:
    parser.add_argument("--model", "--model-dir", dest="model_dir", metavar="MODEL", help=f"{MODEL_HELP} ({default})")
    add_hub_arguments(parser)


def add_hub_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--llm-quant", help=QUANT_HELP)
    parser.add_argument(
        "--hub", choices=HUBS, help="where a repository id comes from (default: OMNI_HUB, else huggingface)"
    )


def resolved_model(model: str | None, llm_quant: str | None, hub: str | None, device: str) -> str | None:
    """``model`` as a local path: a repository id is fetched (or found in the cache) and validated
    for ``device`` (``auto`` resolved first: it decides the default quantization)."""
    from .hub import download, parse_ref

    if parse_ref(model) is None:
        if llm_quant or hub:
            raise InvalidArgumentError("--llm-quant and --hub go with a repository id in --model (owner/name)")
        return model
    from ..device.backends import resolve_device

    return str(download(model, llm_quant, resolve_device(device), hub))


def resolve_model_args(args: argparse.Namespace) -> None:
    """Fetches the repository id of a command's ``--model`` before the command runs, so every
    command gets a local set (downloads show their own progress bars). ``serve --ray`` and
    ``--connect`` keep the id: their workers run elsewhere and fetch it on their own hosts."""
    if not hasattr(args, "model_dir") or not hasattr(args, "llm_quant"):
        return
    if getattr(args, "ray", None) is not None or getattr(args, "connect", None):
        return
    args.model_dir = resolved_model(args.model_dir, args.llm_quant, args.hub, getattr(args, "device", "auto"))
    args.llm_quant = args.hub = None


def add_download_parser(sub) -> None:
    d = sub.add_parser(
        "download",
        help="fetch a module set by repository id (one LLM quantization) into the hub's cache, validated; "
        "loads nothing",
    )
    d.add_argument("repo", help="a repository id, e.g. openbmb/MiniCPM-o-4_5-gguf (REPO:QUANT picks the quantization)")
    add_hub_arguments(d)
    d.add_argument("--dir", help="put the files in this directory instead of the hub's cache")
    d.add_argument("--revision", help="a branch, tag or commit of the repository (default: main)")
    d.add_argument(
        "--device",
        default="auto",
        help="the device the set is meant for (it need not be on this host, e.g. cann:0 on a login node); "
        "it decides the default quantization",
    )
    d.set_defaults(func=cmd_download)


def cmd_download(args: argparse.Namespace) -> int:
    from ..device.backends import resolve_device
    from .hub import download
    from .layout import discover

    device = resolve_device("auto") if args.device == "auto" else args.device.strip().lower()
    t0 = time.perf_counter()
    llm = download(args.repo, args.llm_quant, device, args.hub, args.dir, args.revision)
    files = discover(llm).files.values()
    total = sum(p.stat().st_size for p in files)
    for p in files:
        print(f"{p}  {p.stat().st_size / 2**20:8.1f} MiB")
    print(f"{len(files)} files, {total / 2**20:.1f} MiB, validated, in {time.perf_counter() - t0:.1f} s")
    print(f"use it with: --model {llm}")
    return 0
