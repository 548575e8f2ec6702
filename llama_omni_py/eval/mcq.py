"""Daily-Omni and Video-MME runs: each item asked through a target by a protocol, its record
written as it finishes, then every score variant (docs/evaluation.md)."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ..errors import InvalidArgumentError
from . import summary as S
from .datasets import DAILY_OMNI_GROUPS, VIDEOMME_GROUPS, McqItem
from .protocols import McqProtocol
from .records import Progress, RecordStore
from .scoring import letters, score
from .targets import McqRequest

TITLES = {"daily-omni": "Daily-Omni", "videomme": "Video-MME"}


def check_resume(out: Path, settings: dict) -> None:
    """A folder that holds a run with other settings is not resumed into (its records would mix)."""
    path = out / "run.json"
    if path.exists():
        before = json.loads(path.read_text())
        diff = sorted(k for k in set(before) | set(settings) if before.get(k) != settings.get(k))
        if diff:
            raise InvalidArgumentError(
                f"{out} holds a run with other settings ({', '.join(diff)}): resume with the same ones, "
                "or use another --out"
            )
    out.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(settings, indent=2, sort_keys=True))


def _record(item: McqItem, protocol: McqProtocol, target, seed: int) -> dict:
    rec = {
        "id": item.id,
        "video_id": item.video_id,
        "answer": item.answer,
        "choices": list(item.choices),
        "groups": item.groups,
        "missing": item.missing,
    }
    if item.missing:  # nothing is sent
        rec.update(ok=False, raw="", error=f"missing media: {item.missing}", timings={}, sent=None)
    else:
        prompt = protocol.prompt(item.question, list(item.choices))
        a = target.ask(McqRequest(item.video, item.audio, prompt, protocol, seed))
        rec.update(ok=a.ok, raw=a.text, error=a.error, timings=a.timings, sent=a.sent)
    rec["letters"] = letters(rec["raw"], list(item.choices), protocol.benchmark)
    rec["prediction"] = rec["letters"][protocol.extractor]
    return rec


def run(
    items: list[McqItem],
    protocol: McqProtocol,
    target,
    out: str | Path,
    *,
    settings: dict,
    concurrency: int = 1,
    seed: int = 0,
) -> dict:
    """Asks every item not yet in ``out``'s records, then scores all of them and writes the
    summaries; returns the summary."""
    out = Path(out)
    requests = target.request_settings(protocol, seed)
    settings = {**settings, "requests": requests}
    check_resume(out, settings)
    store = RecordStore(out)
    todo = [it for it in items if not store.done(it.id)]
    progress = Progress(len(items), len(items) - len(todo), TITLES[protocol.benchmark])

    def one(item: McqItem) -> None:
        store.add(_record(item, protocol, target, seed))
        progress.step()

    try:
        if concurrency > 1:
            with ThreadPoolExecutor(concurrency) as pool:
                list(pool.map(one, todo))
        else:
            for item in todo:
                one(item)
    finally:
        progress.close()
    records = [store.records[it.id] for it in items if store.done(it.id)]
    keys = DAILY_OMNI_GROUPS if protocol.benchmark == "daily-omni" else VIDEOMME_GROUPS
    scores = score(records, protocol.extractor, protocol.denominator, keys)
    described = target.describe()
    named = protocol_named(protocol)
    result = {
        "benchmark": protocol.benchmark,
        "protocol": named,
        "target": described,
        "settings": settings,
        "requests": requests,
        "reported": reported(records, getattr(target, "COUNTS", {}), getattr(target, "COUNTED_BY", "")),
        "model_files": S.model_files(described.get("model_dir")),
        "engine": S.engine(),
        **scores,
    }
    title = f"{TITLES[protocol.benchmark]}: {protocol.name} protocol"
    S.write(out, result, S.mcq_markdown(title, named, described, scores, requests, result["reported"]))
    return result


def protocol_named(p: McqProtocol) -> dict:
    """The protocol as every target honours it: its name, the prompt text it writes and whose
    letter and denominator make its headline. How the requests decode and lay the media out is
    the run's ``requests`` section, read off what the target sends."""
    return {
        "name": p.name,
        "benchmark": p.benchmark,
        "prompt_text": "the protocol's, to the letter (each record holds the prompt as sent)",
        "extractor": p.extractor,
        "denominator": p.denominator,
    }


def reported(records: list[dict], counts: dict, by: str) -> dict:
    """The media and prompt counts the target reported per item (``counts``: name -> dotted path
    in a record's timings), summed over the items that reported them."""
    out = {}
    for name, path in counts.items():
        values = []
        for r in records:
            v = r.get("timings") or {}
            for key in path.split("."):
                v = v.get(key) if isinstance(v, dict) else None
            if r.get("ok") and isinstance(v, (int, float)) and not isinstance(v, bool):
                values.append(v)
        if values:
            out[name] = {"items": len(values), "total": sum(values), "min": min(values), "max": max(values)}
    return {"by": by, "counts": out}
