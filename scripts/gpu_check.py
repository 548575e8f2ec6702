"""Helpers of scripts/gpu-check.sh (the one-command check on a machine with an NVIDIA GPU).

    python scripts/gpu_check.py missing-wheels DIR [--always NAME ...]
                                                    carried wheels whose distribution is not installed
    python scripts/gpu_check.py models DIR [--llm-layers N] [--workers W] [--size real]
    python scripts/gpu_check.py summary OUT STEPS.tsv [--info INFO.json]
                                                    summary.json + a Markdown table of the results

``models`` runs the generator from this checkout without its native core (the generator is
plain Python and numpy, and the package imports nothing native until it is used), so the 16 GB
set can be written while the native code compiles.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def missing_wheels(wheel_dir: str, always: tuple[str, ...] = ()) -> list[str]:
    """Wheels in ``wheel_dir`` whose distribution is not installed, and those named in ``always``
    (scipy-openblas32 must sit beside the package: the extension's run path is relative)."""
    out = []
    for whl in sorted(Path(wheel_dir).glob("*.whl")):
        name = re.split(r"-\d", whl.name, maxsplit=1)[0]
        try:
            metadata.version(name)
            if _normal(name) in {_normal(a) for a in always}:
                out.append(str(whl))
        except metadata.PackageNotFoundError:
            out.append(str(whl))
    return out


def _source(module: str):
    """A module of this checkout's llama_omni_py (the generator, the duplex metrics). The package
    face loads nothing native, so this works before the core is built."""
    import importlib

    if str(ROOT) not in sys.path[:1]:
        sys.path.insert(0, str(ROOT))
    return importlib.import_module(f"llama_omni_py.{module}")


def models(args) -> int:
    modelgen = _source("modelset.generate")
    t0 = time.perf_counter()
    written = modelgen.make_models(args.dir, args.size, llm_layers=args.llm_layers, workers=args.workers)
    for g in written:
        print(f"{g.path}  {g.bytes / 2**30:6.2f} GiB  {g.seconds:6.1f} s", flush=True)
    total = sum(g.bytes for g in written)
    print(
        f"wrote {len(written)} files, {total / 2**30:.2f} GiB in {time.perf_counter() - t0:.1f} s "
        f"(size={args.size}, llm_layers={args.llm_layers}, workers={args.workers})"
    )
    return 0


def _load(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _fmt(v, digits=3):
    return "-" if v is None else f"{v:.{digits}f}" if isinstance(v, float) else str(v)


def _stage_medians(requests: list[dict]) -> dict:
    names = sorted({k for r in requests for k in r.get("stage_ms", {})})
    return {k: statistics.median(r["stage_ms"][k] for r in requests if k in r["stage_ms"]) for k in names}


def _slots_summary(load: dict | None) -> dict | None:
    """Per slot count of the load run: the engine's and the workers' audio per second, the slowest
    engine session's wall RTF (real time when below 1) and the mean LLM batch."""
    if not load:
        return None
    out = {}
    for n, g in load.get("summary", {}).get("groups", {}).items():
        e, w = g.get("engine", {}), g.get("workers", {})
        out[n] = {
            "engine_audio_per_wall_s": e.get("audio_per_wall_s"),
            "workers_audio_per_wall_s": w.get("audio_per_wall_s"),
            "engine_session_rtf_max": (e.get("session_wall_rtf") or {}).get("max"),
            "engine_mean_llm_batch": (e.get("scheduler") or {}).get("llm_mean_batch"),
        }
    return out


def summary(args) -> int:
    out = Path(args.out)
    steps = []
    for line in Path(args.steps).read_text().splitlines():
        name, status, seconds, *note = line.split("\t")
        steps.append({"step": name, "status": status, "seconds": float(seconds), "note": " ".join(note)})
    info = (_load(Path(args.info)) if args.info else None) or {}
    parity = _load(out / "parity.json") or {}
    llm_tts = _load(out / "llm_tts.json") or {}
    t2w = _load(out / "token2wav.json") or {}
    duplex = _load(out / "duplex.json")
    load = _load(out / "load.json")
    bench = [b for b in (_load(p) for p in sorted((out / "bench").glob("*.json"))) if b]
    result = {
        "steps": steps,
        "devices": [d["id"] + ": " + d["description"] for d in info.get("devices", [])],
        "parity": {
            "passed": sum(1 for c in parity.get("comparisons", []) if c.get("ok")),
            "failed": [c["what"] for c in parity.get("comparisons", []) if not c.get("ok")],
            "worst_rel_l2": max((c["rel_l2"] for c in parity.get("comparisons", [])), default=None),
        },
        "llm": llm_tts.get("llm"),
        "tts": llm_tts.get("tts"),
        "token2wav": [
            {k: r.get(k) for k in ("device", "threads", "token2mel_ms_median", "vocoder_ms_median", "rtf")}
            for r in t2w.get("results", [])
        ],
        "duplex": {"config": duplex["config"], "summary": duplex["runs"][-1]["summary"]} if duplex else None,
        "slots": _slots_summary(load),
        "bench": [
            {
                "label": b["label"],
                "valid": b["valid"],
                "failed_gates": b["failed_gates"][:5],
                "summary": {k: v for k, v in b["summary"].items() if k != "per_prompt"},
                "per_prompt": b["summary"].get("per_prompt", {}),
                "stage_ms_median": _stage_medians(b["requests"]),
            }
            for b in bench
        ],
    }
    (out / "summary.json").write_text(json.dumps(result, indent=2))

    lines = ["| step | status | seconds | note |", "|---|---|---:|---|"]
    lines += [f"| {s['step']} | {s['status']} | {s['seconds']:.0f} | {s['note']} |" for s in steps]
    lines.append("")
    lines.append("devices: " + "; ".join(result["devices"]))
    p = result["parity"]
    if parity:
        lines.append(
            f"parity ({parity.get('device')} vs cpu): {p['passed']} comparisons within tolerance, "
            f"{len(p['failed'])} outside {p['failed'] or ''}; worst relative L2 {_fmt(p['worst_rel_l2'], 6)}"
        )
    if result["llm"]:
        m = result["llm"]
        lines.append(
            f"LLM {m['n_layer']} layers: prefill {m['prefill_tokens']} tokens {_fmt(m['prefill_ms'], 1)} ms "
            f"(first {_fmt(m.get('prefill_ms_cold'), 1)} ms), decode {_fmt(m['decode_tokens_per_s'], 1)} tokens/s"
        )
    if result["tts"]:
        lines.append(f"TTS: {_fmt(result['tts']['step_ms_median'], 2)} ms per audio token")
    for r in result["token2wav"]:
        lines.append(
            f"Token2Wav ({r['device']}, vocoder {r['threads']} threads): Token2Mel {_fmt(r['token2mel_ms_median'], 1)}"
            f" ms + vocoder {_fmt(r['vocoder_ms_median'], 1)} ms per 1 s of audio = RTF {_fmt(r['rtf'])}"
        )
    if duplex:
        headline = _source("bench.duplex_metrics").headline
        lines.append(f"duplex ({duplex['config']['device']}): " + headline(result["duplex"]["summary"]))
    for n, g in (result["slots"] or {}).items():
        lines.append(
            f"slots {n}: engine {_fmt(g['engine_audio_per_wall_s'])} s audio per s (workers "
            f"{_fmt(g['workers_audio_per_wall_s'])}), slowest session wall RTF {_fmt(g['engine_session_rtf_max'])}, "
            f"mean LLM batch {_fmt(g['engine_mean_llm_batch'], 2)}"
        )
    for b in result["bench"]:
        s = b["summary"]
        stages = ", ".join(f"{k} {v:.0f}" for k, v in b["stage_ms_median"].items())
        lines.append(
            f"speak bench {b['label']} ({'valid' if b['valid'] else 'invalid: ' + '; '.join(b['failed_gates'])}): "
            f"wall RTF {_fmt(s.get('wall_rtf'))}, compute RTF {_fmt(s.get('compute_rtf'))} "
            f"(pooled {_fmt(s.get('compute_rtf_pooled'))}), first audio {_fmt(s.get('time_to_first_audio_s'))} s, "
            f"{_fmt(s.get('audio_s'), 2)} s of audio per reply; stage medians per reply (ms): {stages}"
        )
    print("\n".join(lines))
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("missing-wheels")
    w.add_argument("dir")
    w.add_argument("--always", nargs="*", default=[], help="distributions to install even when present")
    m = sub.add_parser("models")
    m.add_argument("dir")
    m.add_argument("--size", default="real", choices=("tiny", "real"))
    m.add_argument("--llm-layers", type=int, default=None)
    m.add_argument("--workers", type=int, default=1)
    s = sub.add_parser("summary")
    s.add_argument("out")
    s.add_argument("steps")
    s.add_argument("--info", help="`llama-omni info --json` output")
    args = ap.parse_args(argv)
    if args.cmd == "missing-wheels":
        print("\n".join(missing_wheels(args.dir, tuple(args.always))))
        return 0
    return models(args) if args.cmd == "models" else summary(args)


if __name__ == "__main__":
    sys.exit(main())
