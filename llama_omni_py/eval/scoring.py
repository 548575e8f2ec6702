"""Multiple-choice scores from a run's records, every harness's way (docs/evaluation.md#scores).

For each letter extraction (:mod:`.extract`) three accuracies: over **all** items (the evaluation
kit's and llama.cpp-omni's pipeline line, ``Accuracy: c/N``), over **answered** items (a letter
was found: llama.cpp-omni's official scorers) and over **successful** requests (a reply came back;
unparsed replies count as wrong: vLLM-Omni's). Missing media, failed requests, empty replies and
unparsed replies are counted, never dropped.
"""

from __future__ import annotations

from . import extract as X

EXTRACTORS = ("evalkit", "llama.cpp-omni", "daily-omni-scorer", "videomme-scorer", "vllm-omni")


def letters(reply: str, choices: list, benchmark: str) -> dict:
    """The letter each harness's scored code path reads in ``reply`` ("" when it finds none): the
    official scorers read the letter llama.cpp-omni's pipelines wrote, never the reply itself."""
    return {
        "evalkit": X.evalkit_letter(reply, choices) or "",
        "llama.cpp-omni": X.llama_cpp_omni_letter(reply, strip_tts_eos=benchmark != "videomme"),
        "daily-omni-scorer": X.daily_omni_scorer_letter(reply),
        "videomme-scorer": X.videomme_scorer_letter(reply),
        "vllm-omni": X.vllm_omni_letter(reply, benchmark) or "",
    }


def _ratio(c: int, n: int) -> float | None:
    return round(100.0 * c / n, 2) if n else None


def accuracy(records: list[dict], extractor: str) -> dict:
    """correct, the three denominators and the three accuracies (percent) of one extraction."""
    total = len(records)
    ok = [r for r in records if r.get("ok")]
    answered = [r for r in ok if r["letters"].get(extractor)]
    correct = sum(1 for r in answered if r["letters"][extractor] == r["answer"])
    return {
        "correct": correct,
        "all": total,
        "answered": len(answered),
        "successful": len(ok),
        "accuracy_all": _ratio(correct, total),
        "accuracy_answered": _ratio(correct, len(answered)),
        "accuracy_successful": _ratio(correct, len(ok)),
    }


def counts(records: list[dict]) -> dict:
    return {
        "items": len(records),
        "missing_media": sum(1 for r in records if r.get("missing")),
        "failed_requests": sum(1 for r in records if not r.get("ok") and not r.get("missing")),
        "empty_replies": sum(1 for r in records if r.get("ok") and not r.get("raw", "").strip()),
        "unparsed_by_evalkit_rules": sum(1 for r in records if r.get("ok") and not r["letters"].get("evalkit")),
        # the kit's sentence-embedding and GPT fallbacks judge every reply its rules did not read
        # correctly, unread or wrong
        "judged_by_evalkit_fallbacks": sum(
            1 for r in records if r.get("ok") and r["letters"].get("evalkit") != r.get("answer")
        ),
    }


def groups(records: list[dict], extractor: str, keys: tuple) -> dict:
    """{key: {value: accuracy(...)}} per grouping field."""
    out: dict = {}
    for key in keys:
        by: dict[str, list] = {}
        for r in records:
            by.setdefault(str(r["groups"].get(key, "unknown") or "unknown"), []).append(r)
        out[key] = {value: accuracy(rs, extractor) for value, rs in sorted(by.items())}
    return out


def score(records: list[dict], own_extractor: str, own_denominator: str, group_keys: tuple) -> dict:
    """The headline (the protocol's own extraction and denominator), every variant, the counts and
    the per-group tables."""
    variants = {x: accuracy(records, x) for x in EXTRACTORS}
    own = variants[own_extractor]
    return {
        "headline": {
            "extractor": own_extractor,
            "denominator": own_denominator,
            "accuracy": own[f"accuracy_{own_denominator}"],
        },
        "variants": variants,
        "counts": counts(records),
        "groups": groups(records, own_extractor, group_keys),
    }
