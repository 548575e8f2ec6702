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
from ..modelset.cache_write import write_bytes


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
    try:  # other processes share the cache: the file is replaced whole, the last writer wins
        cache_path.parent.mkdir(parents=True, exist_ok=True)
        write_bytes(cache_path, json.dumps(cache).encode())
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


def mcq_markdown(
    title: str, protocol: dict, target: dict, scores: dict, requests: dict | None = None, reported: dict | None = None
) -> str:
    """The human-readable summary of a multiple-choice run."""
    h = scores["headline"]
    not_sent = (requests or {}).get("not_sent") or {}
    lines = [
        f"# {title}",
        "",
        f"**{_pct(h['accuracy'])} %** ({h['extractor']} extraction, correct / {h['denominator']} items), "
        f"protocol `{protocol['name']}`, target {target.get('kind')}.",
        "",
    ]
    if not_sent:
        named = ", ".join(f"{k} ({json.dumps(v['protocol'])})" for k, v in not_sent.items())
        lines += [f"**Not sent**: the protocol's {named} -- see Requests.", ""]
    lines += [
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
    if requests:
        lines += _requests_markdown(requests)
    if reported and reported.get("counts"):
        lines += [f"## Prompt counts, as reported by {reported['by']}", ""]
        lines += ["| count | items | total | min | max |", "|---|---|---|---|---|"]
        for name, v in reported["counts"].items():
            lines.append(f"| {name} | {v['items']} | {v['total']} | {v['min']} | {v['max']} |")
        lines.append("")
    lines += ["## Protocol", "", "```json", json.dumps(protocol, indent=2), "```", ""]
    return "\n".join(lines)


def _requests_markdown(requests: dict) -> list[str]:
    """What every request carried, section by section, and the protocol's settings none carried."""
    lines = ["## Requests", "", f"Sent to {requests.get('sent_to')}.", "", "| setting | sent |", "|---|---|"]
    for section in ("sampling", "media", "layout"):
        for key, value in (requests.get(section) or {}).items():
            lines.append(f"| {section}.{key} | {value if isinstance(value, str) else json.dumps(value)} |")
    if "body" in requests:
        lines += ["", "Each request's fields besides its messages:", "", "```json", json.dumps(requests["body"]), "```"]
    not_sent = requests.get("not_sent") or {}
    if not_sent:
        lines += ["", "Not sent: the protocol's settings no field of these requests carries.", ""]
        lines += ["| setting | protocol's | why |", "|---|---|---|"]
        for key, v in not_sent.items():
            lines.append(f"| {key} | {json.dumps(v['protocol'])} | {v['why']} |")
    return lines + [""]
