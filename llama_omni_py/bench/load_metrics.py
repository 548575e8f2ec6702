"""The numbers of a load run (``llama-omni bench --mode load``, docs/benchmark-schema.md "Load"):
one phase is N sessions of one kind started together, in an engine of N slots or in N single-slot
worker processes; a (slots, mode) group pools its measured phases.

Aggregates are pooled, not averaged: audio per wall second = Σ sessions' audio / Σ phases' wall,
where a phase's wall runs from its first session's start to its last session's last audio.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

MODES = ("engine", "workers")
KINDS = ("text", "audio", "duplex")
# The goals at the largest slot count (docs/performance.md, "Many sessions per engine: the whole pipeline under load").
GOAL_AUDIO_VS_WORKERS = 1.0
GOAL_LLM_SCALING = 3.0
GOAL_TTS_SCALING = 2.5
# The real-size LLM (Qwen3-8B: 36 layers, 8 KV heads of 128) at n_ctx 4096 with an F16 KV cache,
# and its F16 weights (docs/model-files.md).
REAL_LLM = {"n_layer": 36, "n_head_kv": 8, "head_dim": 128, "n_ctx": 4096, "kv_bytes_per_value": 2}
REAL_LLM_WEIGHT_BYTES = 16_400_000_000


def llm_kv_bytes(n_layer: int, n_ctx: int, n_head_kv: int, head_dim: int, kv_bytes_per_value: int = 2) -> int:
    """One sequence's KV cache: K and V for every layer and position."""
    return 2 * n_layer * n_ctx * n_head_kv * head_dim * kv_bytes_per_value


def stats(values: Sequence[float | None]) -> dict:
    """p50, p95 (nearest rank) and max of the values that are not None."""
    v = sorted(x for x in values if x is not None)
    if not v:
        return {"p50": None, "p95": None, "max": None}
    p95 = v[min(len(v) - 1, max(0, round(0.95 * len(v) + 0.5) - 1))]
    return {"p50": statistics.median(v), "p95": p95, "max": v[-1]}


def _ratio(a, b) -> float | None:
    return a / b if a is not None and b else None


def phase_aggregate(sessions: list[dict], wall_s: float) -> dict:
    """A phase's totals and rates over its wall time."""
    audio = sum(s.get("audio_s") or 0.0 for s in sessions)
    tokens = sum(s.get("n_tokens") or 0 for s in sessions)
    codes = sum(s.get("n_tts_tokens") or 0 for s in sessions)
    return {
        "audio_s": audio,
        "llm_tokens": tokens,
        "tts_codes": codes,
        "audio_per_wall_s": _ratio(audio, wall_s),
        "llm_tokens_per_s": _ratio(tokens, wall_s),
        "tts_codes_per_s": _ratio(codes, wall_s),
    }


def session_timing(rec: dict, t0: float) -> dict:
    """A host's session record with times relative to the phase start and its wall RTF."""
    out = dict(rec)
    start, end = out.pop("start"), out.pop("end")
    out["start_s"], out["end_s"] = start - t0, end - t0
    out["wall_s"] = end - start
    out["wall_rtf"] = _ratio(out["wall_s"], out.get("audio_s"))
    return out


def _pooled(phases: list[dict]) -> dict:
    wall = sum(p["wall_s"] for p in phases)
    sessions = [s for p in phases for s in p["sessions"]]
    agg = phase_aggregate(sessions, wall)
    return {
        "phases": len(phases),
        "sessions": len(sessions),
        "wall_s": wall,
        **agg,
        "session_wall_rtf": stats([s.get("wall_rtf") for s in sessions]),
        "time_to_first_audio_s": stats([s.get("time_to_first_audio_s") for s in sessions]),
    }


def group_summary(phases: list[dict], hosts: list[dict]) -> dict:
    """One (slots, mode): pooled rates, session spreads, memory and the LLM's batching."""
    out = _pooled(phases)
    out["per_kind"] = {
        k: _pooled([p for p in phases if p["kind"] == k]) for k in dict.fromkeys(p["kind"] for p in phases)
    }
    # memory: the mode's processes summed, the largest sum seen after a phase
    out["memory"] = {
        key: max((sum(proc[key] for proc in p["processes"]) for p in phases), default=None)
        for key in ("rss", "pss", "anon", "hwm")
    }
    out["processes"] = max((len(p["processes"]) for p in phases), default=0)
    out["module_bytes"] = module_bytes([h.get("memory") for h in hosts[: out["processes"]]])
    batches = sum(p["scheduler"]["llm_batches"] for p in phases)
    steps = sum(p["scheduler"]["llm_batched_steps"] for p in phases)
    out["scheduler"] = {
        "llm_batches": batches,
        "llm_batched_steps": steps,
        "llm_mean_batch": steps / batches if batches else None,
    }
    return out


def module_bytes(memories: list[dict | None]) -> dict | None:
    """The engine.memory() reports of a mode's processes: weights summed over processes (each
    worker loads its own), per-slot state over every slot."""
    if not memories or any(m is None for m in memories):
        return None
    weights = sum(v for m in memories for k, v in m.items() if k.endswith("_weights"))
    per_slot = sum(v for k, v in memories[0].items() if k.endswith("_per_slot"))
    return {"weights": weights, "per_slot": per_slot, "reports": memories}


def ratios(engine: dict, workers: dict) -> dict:
    """engine / workers for the same slot count."""
    we, ww = engine["module_bytes"], workers["module_bytes"]
    return {
        "audio_per_wall_s": _ratio(engine["audio_per_wall_s"], workers["audio_per_wall_s"]),
        "llm_tokens_per_s": _ratio(engine["llm_tokens_per_s"], workers["llm_tokens_per_s"]),
        "tts_codes_per_s": _ratio(engine["tts_codes_per_s"], workers["tts_codes_per_s"]),
        "rss": _ratio(engine["memory"]["rss"], workers["memory"]["rss"]),
        "pss": _ratio(engine["memory"]["pss"], workers["memory"]["pss"]),
        "weights": _ratio(we and we["weights"], ww and ww["weights"]),
    }


def _goal(value, target: float, at_least: bool = True) -> dict:
    met = None if value is None else (value >= target if at_least else value <= target)
    return {"value": value, "target": target, "met": met}


def memory_goal(one: dict, many: dict, slots: int) -> dict | None:
    """What a slot beyond the first costs, measured (engine RSS/PSS at ``slots`` minus at 1, per
    extra slot) and for the real-size set (the LLM KV stream by formula for the 36-layer model in
    place of the measured set's, the other modules' per-slot state as reported), against the
    real-size weights."""
    if slots < 2 or not one["module_bytes"] or not many["module_bytes"]:
        return None
    report = many["module_bytes"]["reports"][0]
    extra = {k: (many["memory"][k] - one["memory"][k]) / (slots - 1) for k in ("rss", "pss")}
    real_kv = llm_kv_bytes(**REAL_LLM)
    real_per_slot = many["module_bytes"]["per_slot"] - report["llm_kv_per_slot"] + real_kv
    real_weights = many["module_bytes"]["weights"] - report["llm_weights"] + REAL_LLM_WEIGHT_BYTES
    return {
        "measured_extra_slot_rss": extra["rss"],
        "measured_extra_slot_pss": extra["pss"],
        "reported_per_slot": many["module_bytes"]["per_slot"],
        "real_llm": dict(REAL_LLM),
        "real_llm_kv_per_slot": real_kv,
        "real_per_slot": real_per_slot,
        "real_weights": real_weights,
        "real_per_slot_vs_weights": real_per_slot / real_weights,
    }


def summarise(phases: list[dict], hosts: list[dict], slots: Sequence[int]) -> dict:
    """Per slot count: each mode's group summary and the engine/workers ratios; the scaling of
    the engine against one slot; the goals at the largest slot count."""
    groups: dict[str, dict] = {}
    for n in slots:
        per_mode = {
            m: group_summary(
                [p for p in phases if p["slots"] == n and p["mode"] == m],
                [h for h in hosts if h["slots"] == n and h["mode"] == m],
            )
            for m in MODES
        }
        per_mode["ratios"] = ratios(per_mode["engine"], per_mode["workers"])
        groups[str(n)] = per_mode
    top = str(max(slots))
    one = groups.get("1")
    scaling = {
        n: {
            k: _ratio(g["engine"][k], one["engine"][k]) if one else None
            for k in ("audio_per_wall_s", "llm_tokens_per_s", "tts_codes_per_s")
        }
        for n, g in groups.items()
    }
    if int(top) < 2:  # the goals compare many slots with one
        return {"groups": groups, "scaling": scaling, "goals": None, "memory_goal": None}
    w = groups[top]["ratios"]["weights"]
    goals = {
        "slots": int(top),
        "aggregate_audio_vs_workers": _goal(groups[top]["ratios"]["audio_per_wall_s"], GOAL_AUDIO_VS_WORKERS),
        "weights_vs_workers": _goal(w, 1 / int(top), at_least=False),
        "llm_tokens_per_s_vs_one_slot": _goal(scaling[top]["llm_tokens_per_s"], GOAL_LLM_SCALING),
        "tts_codes_per_s_vs_one_slot": _goal(scaling[top]["tts_codes_per_s"], GOAL_TTS_SCALING),
    }
    if w is not None:  # float division: 1/4 of the weights is met at exactly 0.25
        goals["weights_vs_workers"]["met"] = w <= 1 / int(top) + 1e-9
    mem = memory_goal(one["engine"], groups[top]["engine"], int(top)) if one else None
    return {"groups": groups, "scaling": scaling, "goals": goals, "memory_goal": mem}


# -- text -----------------------------------------------------------------------------------------
def _f(v, digits: int = 2) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def _gib(v) -> str:
    return "-" if v is None else f"{v / 2**30:.2f}"


def markdown_table(summary: dict) -> str:
    """One row per (slots, mode), then the engine/workers ratios and the goals."""
    rows = [
        "| slots | mode | audio s / wall s | session wall RTF p50 / max | first audio p50 / p95 s "
        "| LLM tok/s | TTS codes/s | RSS GiB | PSS GiB | weights GiB | mean LLM batch |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for n, g in summary["groups"].items():
        for m in MODES:
            s = g[m]
            w = s["module_bytes"]["weights"] if s["module_bytes"] else None
            rows.append(
                f"| {n} | {m} | {_f(s['audio_per_wall_s'], 3)} "
                f"| {_f(s['session_wall_rtf']['p50'])} / {_f(s['session_wall_rtf']['max'])} "
                f"| {_f(s['time_to_first_audio_s']['p50'])} / {_f(s['time_to_first_audio_s']['p95'])} "
                f"| {_f(s['llm_tokens_per_s'], 1)} | {_f(s['tts_codes_per_s'], 1)} "
                f"| {_gib(s['memory']['rss'])} | {_gib(s['memory']['pss'])} | {_gib(w)} "
                f"| {_f(s['scheduler']['llm_mean_batch'])} |"
            )
    rows += [
        "",
        "| slots | engine / workers: audio per s | LLM tok/s | TTS codes/s | RSS | PSS | weights "
        "| engine vs 1 slot: LLM tok/s | TTS codes/s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for n, g in summary["groups"].items():
        r, sc = g["ratios"], summary["scaling"][n]
        rows.append(
            f"| {n} | {_f(r['audio_per_wall_s'])} | {_f(r['llm_tokens_per_s'])} | {_f(r['tts_codes_per_s'])} "
            f"| {_f(r['rss'])} | {_f(r['pss'])} | {_f(r['weights'])} "
            f"| {_f(sc['llm_tokens_per_s'])} | {_f(sc['tts_codes_per_s'])} |"
        )
    goals = summary["goals"] or {}
    rows.append("")
    top = summary["groups"][max(summary["groups"], key=int)]["engine"]["module_bytes"]
    if top:
        parts = ", ".join(f"{k} {v / 2**20:.1f}" for k, v in top["reports"][0].items())
        rows.append(f"- engine.memory() at {max(summary['groups'], key=int)} slots, MiB: {parts}")
    for name, g in goals.items():
        if name != "slots":
            verdict = {True: "met", False: "MISSED", None: "unknown"}[g["met"]]
            rows.append(f"- at {goals['slots']} slots, {name}: {_f(g['value'])} (goal {_f(g['target'])}): {verdict}")
    mem = summary["memory_goal"]
    if mem:
        rows.append(
            f"- a slot beyond the first: measured RSS {mem['measured_extra_slot_rss'] / 2**20:.0f} MiB, "
            f"PSS {mem['measured_extra_slot_pss'] / 2**20:.0f} MiB; real-size per-slot state "
            f"{mem['real_per_slot'] / 2**20:.0f} MiB (LLM KV {mem['real_llm_kv_per_slot'] / 2**20:.0f} MiB) "
            f"= {100 * mem['real_per_slot_vs_weights']:.1f} % of the real-size weights "
            f"({mem['real_weights'] / 1e9:.1f} GB)"
        )
    return "\n".join(rows)
