"""A run's ``summary.json`` and ``summary.md``: what ran (benchmark, protocol with every setting,
target, model files with their sha256, the engine's version), and every score variant."""

from __future__ import annotations

import hashlib
import json
import platform
import time
from dataclasses import asdict, is_dataclass
from pathlib import Path

from ..env import cache_dir


def file_hashes(paths) -> dict:
    """sha256 of each file, cached by (path, size, mtime): a 16 GB LLM is read once."""
    cache_path = cache_dir() / "file-hashes.json"
    try:
        cache = json.loads(cache_path.read_text())
    except (OSError, ValueError):
        cache = {}
    out = {}
    for p in map(Path, paths):
        st = p.stat()
        key = f"{p.resolve()}|{st.st_size}|{st.st_mtime_ns}"
        if key not in cache:
            h = hashlib.sha256()
            with p.open("rb") as f:
                for block in iter(lambda: f.read(1 << 22), b""):
                    h.update(block)
            cache[key] = h.hexdigest()
        out[p.name] = {"sha256": cache[key], "bytes": st.st_size}
    try:
        cache_path.parent.mkdir(parents=True, exist_ok=True)
        cache_path.write_text(json.dumps(cache))
    except OSError:
        pass
    return out


def model_files(model_dir) -> dict:
    """The hashes of a module set's files (every .gguf under it)."""
    if model_dir is None:
        return {}
    return file_hashes(sorted(Path(model_dir).glob("**/*.gguf")))


def engine() -> dict:
    from .. import __version__

    return {"llama_omni_py": __version__, "python": platform.python_version(), "machine": platform.machine()}


def _plain(x):
    return asdict(x) if is_dataclass(x) else x


def write(folder: Path, summary: dict, markdown: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    summary = {"written": time.strftime("%Y-%m-%d %H:%M:%S"), **{k: _plain(v) for k, v in summary.items()}}
    (folder / "summary.json").write_text(json.dumps(summary, indent=2, ensure_ascii=False, default=str))
    (folder / "summary.md").write_text(markdown, encoding="utf-8")


def _pct(v) -> str:
    return "-" if v is None else f"{v:.2f}"


def mcq_markdown(title: str, protocol: dict, target: dict, scores: dict) -> str:
    """The human-readable summary of a multiple-choice run."""
    h = scores["headline"]
    lines = [
        f"# {title}",
        "",
        f"**{_pct(h['accuracy'])} %** ({h['extractor']} extraction, correct / {h['denominator']} items), "
        f"protocol `{protocol['name']}`, target {target.get('kind')}.",
        "",
        "| extraction | correct | all | answered | successful | % of all | % of answered | % of successful |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, v in scores["variants"].items():
        lines.append(
            f"| {name} | {v['correct']} | {v['all']} | {v['answered']} | {v['successful']} | "
            f"{_pct(v['accuracy_all'])} | {_pct(v['accuracy_answered'])} | {_pct(v['accuracy_successful'])} |"
        )
    c = scores["counts"]
    lines += ["", "Counts: " + ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in c.items()), ""]
    for key, table in scores["groups"].items():
        lines += [f"## By {key}", "", "| value | correct / all | % |", "|---|---|---|"]
        for value, v in table.items():
            lines.append(f"| {value} | {v['correct']} / {v['all']} | {_pct(v['accuracy_all'])} |")
        lines.append("")
    lines += ["## Protocol", "", "```json", json.dumps(protocol, indent=2), "```", ""]
    return "\n".join(lines)
