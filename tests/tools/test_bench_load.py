"""``llama-omni bench --mode load``: a short run on the tiny set (slots 1 and 2, every session
kind, two rounds) checked for its record's fields and invariants -- the pooled rates are the sums
they claim, both modes ran the same sessions, the rounds alternate -- never for its timings; the
metrics' arithmetic on hand-made phases; bad options and a process that cannot load."""

import json
import os
import statistics

import pytest

from llama_omni_py import cli
from llama_omni_py.bench import load_metrics as lm
from llama_omni_py.bench.load_host import process_memory
from llama_omni_py.bench.schema import validate_load_run
from llama_omni_py.errors import ConfigError

SLOTS = (1, 2)
KINDS = ("text", "audio", "duplex")
REPEATS = 2


def _bench(tiny_dir, out, *extra):
    return cli.main(
        ["bench", "--mode", "load", "--model-dir", str(tiny_dir), "--device", "cpu", "--out-dir", str(out),
         "--max-new-tokens", "8", "--units", "2", "--pin", "off", "--threads", "1", "--t2w-threads", "1", *extra]
    )  # fmt: skip


@pytest.fixture(scope="module")
def load_run(tiny_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("load")
    # batch_invariant: each slot's reply is then bit for bit a lone session's, so both modes must
    # give the same replies
    rc = _bench(tiny_dir, out, "--slots", "1,2", "--repeats", str(REPEATS), "--batch-invariant", "--seed", "3")
    (path,) = out.glob("*.json")
    return rc, json.loads(path.read_text())


def test_record_is_schema_valid_and_complete(load_run):
    rc, run = load_run
    assert rc == 0 and run["data_valid"] and not run["failures"]
    validate_load_run(run)
    assert run["benchmark"] == "omni-load-bench" and run["label"] == "load-1-2" and run["competitor"] is None
    assert run["options"]["slots"] == [1, 2] and run["options"]["kinds"] == list(KINDS)
    assert len(run["phases"]) == len(SLOTS) * REPEATS * 2 * len(KINDS)
    assert len(run["warmup"]) == len(run["phases"])  # one short phase per kind after each load
    assert {(p["slots"], p["mode"], p["kind"], p["round"]) for p in run["phases"]} == {
        (n, m, k, r) for n in SLOTS for m in ("engine", "workers") for k in KINDS for r in range(REPEATS)
    }
    assert run["manifest"]["model_files"] and run["config"]["device"] == "cpu"


def test_each_mode_runs_the_same_sessions_on_its_processes(load_run):
    _, run = load_run
    for p in run["phases"]:
        n = p["slots"]
        assert len(p["sessions"]) == n
        assert len(p["processes"]) == (n if p["mode"] == "workers" else 1)
        assert sorted((s["slot"], s["seed"]) for s in p["sessions"]) == [(i, 3 + i) for i in range(n)]
        assert all(s["kind"] == p["kind"] and s["error"] is None for s in p["sessions"])
    hosts = run["hosts"]
    for n in SLOTS:
        for r in range(REPEATS):
            assert sum(h["slots"] == n and h["round"] == r and h["mode"] == "workers" for h in hosts) == n
            assert sum(h["slots"] == n and h["round"] == r and h["mode"] == "engine" for h in hosts) == 1
    assert len({h["pid"] for h in hosts}) == len(hosts)  # each mode's processes started for its round


def test_same_replies_in_both_modes_under_batch_invariant(load_run):
    _, run = load_run
    replies = {}
    for p in run["phases"]:
        for s in p["sessions"]:
            replies.setdefault((p["slots"], p["round"], p["kind"], s["slot"]), {})[p["mode"]] = (
                s["prompt"],
                s["reply_sha1"],
                s["n_tokens"],
                s["n_tts_tokens"],
                s["audio_s"],
            )
    assert len(replies) == sum(n for n in SLOTS) * REPEATS * len(KINDS)
    for key, by_mode in replies.items():
        assert by_mode["engine"] == by_mode["workers"], key


def test_rounds_alternate_the_modes(load_run):
    _, run = load_run
    for n in SLOTS:
        for r in range(REPEATS):
            order = [p["mode"] for p in run["phases"] if p["slots"] == n and p["round"] == r]
            first = "engine" if r % 2 == 0 else "workers"
            assert order == [first] * len(KINDS) + [m for m in ("engine", "workers") if m != first] * len(KINDS)


def test_phase_aggregates_are_the_sums_over_their_sessions(load_run):
    _, run = load_run
    for p in run["phases"]:
        ss, a = p["sessions"], p["aggregate"]
        assert p["wall_s"] == pytest.approx(max(s["end_s"] for s in ss) - min(s["start_s"] for s in ss))
        assert all(s["wall_s"] <= p["wall_s"] + 1e-9 for s in ss)
        assert a["audio_s"] == pytest.approx(sum(s["audio_s"] for s in ss)) and a["audio_s"] > 0
        assert a["audio_per_wall_s"] == pytest.approx(a["audio_s"] / p["wall_s"])
        assert a["llm_tokens_per_s"] == pytest.approx(sum(s["n_tokens"] for s in ss) / p["wall_s"])
        assert a["tts_codes_per_s"] == pytest.approx(sum(s["n_tts_tokens"] for s in ss) / p["wall_s"])
        for s in ss:
            assert s["audio_s"] > 0 and s["n_tts_tokens"] > 0
            assert s["wall_rtf"] == pytest.approx(s["wall_s"] / s["audio_s"])
            assert s["time_to_first_audio_s"] is None or 0 < s["time_to_first_audio_s"] <= s["wall_s"]
            if p["kind"] == "duplex":
                assert s["audio_s"] <= 2 + 1e-6  # at most one second per unit
        for proc in p["processes"]:
            assert 0 < proc["anon"] <= proc["rss"] <= proc["hwm"] and 0 < proc["pss"] <= proc["rss"]


def test_group_summaries_pool_their_phases(load_run):
    _, run = load_run
    groups = run["summary"]["groups"]
    assert sorted(groups) == ["1", "2"]
    for n in SLOTS:
        g = groups[str(n)]
        for mode in ("engine", "workers"):
            phases = [p for p in run["phases"] if p["slots"] == n and p["mode"] == mode]
            s = g[mode]
            wall = sum(p["wall_s"] for p in phases)
            audio = sum(x["audio_s"] for p in phases for x in p["sessions"])
            assert s["phases"] == len(phases) and s["sessions"] == n * len(phases)
            assert s["audio_per_wall_s"] == pytest.approx(audio / wall)
            rtfs = [x["wall_rtf"] for p in phases for x in p["sessions"]]
            assert s["session_wall_rtf"]["p50"] == pytest.approx(statistics.median(rtfs))
            assert s["session_wall_rtf"]["max"] == pytest.approx(max(rtfs))
            assert set(s["per_kind"]) == set(KINDS)
            assert sum(k["audio_s"] for k in s["per_kind"].values()) == pytest.approx(audio)
            assert s["memory"]["rss"] == max(sum(q["rss"] for q in p["processes"]) for p in phases)
            assert s["processes"] == (n if mode == "workers" else 1)
            batches = sum(p["scheduler"]["llm_batches"] for p in phases)
            assert batches > 0
            # lone workers and batch_invariant engines evaluate every step alone
            assert s["scheduler"]["llm_mean_batch"] == pytest.approx(1.0)
        r, e, w = g["ratios"], g["engine"], g["workers"]
        assert r["audio_per_wall_s"] == pytest.approx(e["audio_per_wall_s"] / w["audio_per_wall_s"])
        assert r["rss"] == pytest.approx(e["memory"]["rss"] / w["memory"]["rss"])
        assert r["tts_codes_per_s"] == pytest.approx(e["tts_codes_per_s"] / w["tts_codes_per_s"])
        sc = run["summary"]["scaling"][str(n)]
        one = groups["1"]["engine"]
        assert sc["llm_tokens_per_s"] == pytest.approx(g["engine"]["llm_tokens_per_s"] / one["llm_tokens_per_s"])


def test_module_bytes_count_the_workers_weights_once_each(load_run):
    _, run = load_run
    g = run["summary"]["groups"]["2"]
    engine, workers = g["engine"]["module_bytes"], g["workers"]["module_bytes"]
    assert engine is not None and workers is not None, run["hosts"][0]["memory_note"]
    assert len(workers["reports"]) == 2 and workers["weights"] == 2 * engine["weights"] > 0
    assert engine["per_slot"] == workers["per_slot"] > 0
    assert g["ratios"]["weights"] == pytest.approx(0.5)
    goals = run["summary"]["goals"]
    assert goals["slots"] == 2 and goals["weights_vs_workers"]["met"] is True
    for name in ("aggregate_audio_vs_workers", "llm_tokens_per_s_vs_one_slot", "tts_codes_per_s_vs_one_slot"):
        v = goals[name]
        assert v["met"] == (v["value"] >= v["target"])
    mem = run["summary"]["memory_goal"]
    assert mem["real_llm_kv_per_slot"] == 576 * 2**20
    assert mem["real_per_slot"] == engine["per_slot"] - engine["reports"][0]["llm_kv_per_slot"] + 576 * 2**20


def test_competitor_run_prints_its_table(capsys, tiny_dir, tmp_path):
    rc = _bench(tiny_dir, tmp_path, "--slots", "1", "--kinds", "text", "--repeats", "1", "--warmup", "0",
                "--competitor", "--tag", "busy")  # fmt: skip
    out = capsys.readouterr().out
    assert rc == 0 and "| 1 | engine |" in out and "| 1 | workers |" in out and "valid" in out
    (path,) = tmp_path.glob("*.json")
    run = json.loads(path.read_text())
    validate_load_run(run)
    assert run["label"] == "busy-load-1-competitor" and run["competitor"]["cpu"] in os.sched_getaffinity(0)
    assert not os.path.exists(f"/proc/{run['competitor']['pid']}")  # stopped with the run
    assert run["warmup"] == [] and run["summary"]["goals"] is None  # goals compare many slots with one


@pytest.mark.parametrize(
    "args, field",
    [
        (["--slots", "0,2"], "slots"),
        (["--slots", "2,2"], "slots"),
        (["--slots", "two"], "slots"),
        (["--kinds", "text,video"], "kinds"),
        (["--units", "0"], "units"),
        (["--cpus", "100000"], "cpus"),
        (["--handoff", "text_chunk"], "mode"),
        (["--no-frames"], "mode"),
    ],
)
def test_bad_options_are_refused_by_name(args, field):
    import argparse

    from llama_omni_py.bench import arguments

    p = argparse.ArgumentParser()
    arguments.add_arguments(p)
    with pytest.raises(ConfigError) as e:
        arguments.load_options_from_args(p.parse_args(["--mode", "load", *args]))
    assert e.value.field == field


def test_a_process_that_cannot_load_stops_the_run_with_its_error(tmp_path, capsys):
    rc = cli.main(["bench", "--mode", "load", "--model-dir", str(tmp_path / "missing"), "--device", "cpu",
                   "--slots", "1", "--kinds", "text", "--repeats", "1", "--out-dir", str(tmp_path)])  # fmt: skip
    assert rc == 2 and "could not load" in capsys.readouterr().err
    assert not list(tmp_path.glob("*.json"))


# -- the arithmetic on hand-made phases ---------------------------------------------------------
def _phase(mode, slots, kind, audio, wall, tokens=10, codes=50, rss=100, batches=(10, 10)):
    sessions = [
        {"slot": i, "seed": i, "kind": kind, "prompt": kind, "error": None, "start_s": 0.0, "end_s": wall,
         "wall_s": wall, "wall_rtf": wall / audio, "time_to_first_audio_s": 0.1 * (i + 1), "audio_s": audio,
         "n_tokens": tokens, "n_tts_tokens": codes}
        for i in range(slots)
    ]  # fmt: skip
    procs = [{"rss": rss, "pss": rss // 2, "anon": rss // 4, "hwm": rss}] * (slots if mode == "workers" else 1)
    return {"mode": mode, "slots": slots, "kind": kind, "wall_s": wall, "sessions": sessions, "processes": procs,
            "scheduler": {"llm_batches": batches[0], "llm_batched_steps": batches[1]}}  # fmt: skip


def _hosts(slots, mode, weights=1000):
    mem = {"llm_weights": weights, "tts_weights": 10, "token2wav_weights": 5, "llm_kv_per_slot": 40,
           "tts_kv_per_slot": 3, "token2wav_state_per_slot": 2}  # fmt: skip
    return [{"mode": mode, "slots": slots, "memory": mem}] * (slots if mode == "workers" else 1)


def test_summary_goals_and_memory_arithmetic():
    phases = [
        _phase("engine", 1, "text", 2.0, 2.0, rss=1000),
        _phase("workers", 1, "text", 2.0, 2.0, rss=1000),
        _phase("engine", 4, "text", 2.0, 2.5, tokens=10, codes=50, rss=1300, batches=(10, 35)),
        _phase("workers", 4, "text", 2.0, 3.0, rss=1000),
    ]
    hosts = [h for n in (1, 4) for m in ("engine", "workers") for h in _hosts(n, m)]
    s = lm.summarise(phases, hosts, (1, 4))
    e4, w4 = s["groups"]["4"]["engine"], s["groups"]["4"]["workers"]
    assert e4["audio_per_wall_s"] == pytest.approx(8 / 2.5) and w4["audio_per_wall_s"] == pytest.approx(8 / 3)
    assert s["groups"]["4"]["ratios"]["audio_per_wall_s"] == pytest.approx(3.0 / 2.5)
    assert e4["scheduler"]["llm_mean_batch"] == pytest.approx(3.5)
    assert w4["memory"]["rss"] == 4000 and e4["memory"]["rss"] == 1300
    assert w4["module_bytes"]["weights"] == 4 * 1015 and e4["module_bytes"]["weights"] == 1015
    assert e4["time_to_first_audio_s"]["p50"] == pytest.approx(0.25) and e4["time_to_first_audio_s"]["max"] == 0.4
    g = s["goals"]
    assert g["slots"] == 4 and g["weights_vs_workers"]["met"] is True  # exactly 1/4
    assert g["aggregate_audio_vs_workers"]["met"] is True
    # tokens/s: 40 / 2.5 at 4 slots against 10 / 2 at one: 3.2x (>= 3); codes/s the same: 3.2x (>= 2.5)
    assert g["llm_tokens_per_s_vs_one_slot"]["value"] == pytest.approx(3.2) and g["llm_tokens_per_s_vs_one_slot"]["met"]
    assert g["tts_codes_per_s_vs_one_slot"]["met"]
    mem = s["memory_goal"]
    assert mem["measured_extra_slot_rss"] == pytest.approx(100)  # (1300 - 1000) / 3
    kv = 2 * 36 * 4096 * 8 * 128 * 2
    assert mem["real_llm_kv_per_slot"] == kv and mem["real_per_slot"] == 45 - 40 + kv
    assert mem["real_weights"] == 1015 - 1000 + lm.REAL_LLM_WEIGHT_BYTES
    slow = lm.summarise(phases[:3] + [_phase("workers", 4, "text", 2.0, 2.0)], hosts, (1, 4))
    assert slow["goals"]["aggregate_audio_vs_workers"]["met"] is False  # 3.2 vs 4 s of audio per s
    assert "MISSED" in lm.markdown_table(slow) and "| 4 | engine |" in lm.markdown_table(slow)


def test_process_memory_reads_this_process():
    m = process_memory()
    assert 0 < m["anon"] <= m["rss"] <= m["hwm"] and 0 < m["pss"] <= m["rss"]
    assert lm.llm_kv_bytes(36, 4096, 8, 128) == 576 * 2**20
