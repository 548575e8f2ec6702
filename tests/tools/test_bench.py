"""The benchmark suite: schema-valid JSON runs, validity gates, pinned CPU lists, report plots.
Nothing here asserts on speed (timings on the tiny set are noise)."""

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import jsonschema
import numpy as np
import pytest
from sysfs import fake_sysfs

from llama_omni_py import cli
from llama_omni_py.bench import arguments, metrics, pinning, prompts
from llama_omni_py.bench.runner import exit_status
from llama_omni_py.bench.schema import validate_run
from llama_omni_py.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
# The tiny LLM ends replies at random (and where depends on the CPU's float rounding), so the
# assertions on a reply's chunks hold for any length; seed 1 with 60 tokens is long on AVX2.
TINY = ["--device", "cpu", "--prompts", "story", "--max-new-tokens", "60", "--seed", "1"]


@pytest.fixture(scope="module")
def bench_runs(tiny_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    # the realtime gate depends on this shared machine's load: let it miss, check the data gates
    rc = cli.main(
        [
            "bench",
            "--model-dir",
            str(tiny_dir),
            *TINY,
            "--t2w-threads",
            "1,2",
            "--pin",
            "off",
            "--warmup",
            "1",
            "--out-dir",
            str(out),
            "--allow-realtime-miss",
        ]
    )
    files = sorted(out.glob("*.json"))
    return rc, [json.loads(f.read_text()) for f in files], files


def test_bench_writes_one_schema_valid_json_per_configuration(bench_runs):
    rc, runs, files = bench_runs
    assert rc == 0 and len(files) == 2
    assert sorted(r["config"]["t2w_threads"] for r in runs) == [1, 2]  # Token2Wav rebuilt per configuration
    for r in runs:
        validate_run(r)
        assert r["data_valid"] and len(r["requests"]) == 3 and len(r["warmup"]) == 1
        assert all(q["round"] >= 1 for q in r["requests"]) and r["warmup"][0]["round"] == 0
        assert r["options"]["alternated_with"] and r["summary"]["wall_rtf"] == pytest.approx(
            statistics.median(q["wall_rtf"] for q in r["requests"])
        )
        q = r["requests"][0]
        samples = [c["samples"] for c in q["chunks"]]
        # the first chunk is the first window's 20160 samples (unless it is also the last), every
        # chunk between first and last one steady window of 24000
        assert set(samples[1:-1]) <= {24000} and (samples[0] == 20160 or len(samples) == 1)
        assert all(c["samples"] > 0 for c in q["chunks"])
        assert q["chunks"][-1]["is_final"] and q["audio_s"] == pytest.approx(
            sum(c["samples"] for c in q["chunks"]) / 24000
        )
        assert q["compute_rtf"] > 0 and 0 < q["time_to_first_audio_s"] <= q["wall_s"]
        m = r["manifest"]
        assert m["git"]["commit"] and isinstance(m["git"]["dirty"], bool)
        assert m["packages"]["llama-cpp-python"] == "0.3.36" and m["compiled_backends"][0] == "cpu"
        assert "cpu" in [d["id"] for d in m["devices"]] and r["config"]["device"] == "cpu"
        assert m["numa_plan"]["node"] == 0 and m["thread_counts"]["token2wav"] == r["config"]["t2w_threads"]
        assert len(m["model_files"]) == 10 and all(f["hashed"] == "head" for f in m["model_files"].values())


def test_schema_rejects_a_malformed_run(bench_runs):
    run = json.loads(json.dumps(bench_runs[1][0]))
    del run["requests"][0]["gates"]["t2w_queue_wait"]
    with pytest.raises(jsonschema.ValidationError, match="t2w_queue_wait"):
        validate_run(run)
    run = json.loads(json.dumps(bench_runs[1][0]))
    run["options"]["repeats"] = 2
    with pytest.raises(jsonschema.ValidationError):
        validate_run(run)


def test_gate_violation_marks_the_run_invalid_and_exits_nonzero(tiny_dir, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("OMNI_T2W_THREADS", "2")  # the sweep's knob: resolved, recorded, in the label
    # 50 codes per text chunk handed on at once: two Token2Wav windows, so every steady chunk has
    # 48000 samples
    rc = cli.main(
        [
            "bench",
            "--model-dir",
            str(tiny_dir),
            *TINY,
            "--pin",
            "off",
            "--warmup",
            "0",
            "--codes-per-chunk",
            "50",
            "--handoff",
            "text_chunk",
            "--token2mel",
            "graph",
            "--out-dir",
            str(tmp_path),
            "--allow-realtime-miss",
        ]
    )
    assert rc == 1
    (f,) = tmp_path.glob("*.json")
    run = json.loads(f.read_text())
    validate_run(run)
    assert not run["valid"] and not run["data_valid"]
    assert any(g.endswith(": steady_chunk_samples") for g in run["failed_gates"])
    assert run["label"].startswith("t2w2-") and run["manifest"]["env"]["OMNI_T2W_THREADS"] == "2"
    assert run["config"]["t2w_threads"] == min(2, len(os.sched_getaffinity(0)))
    assert run["config"]["token2mel"] == "graph" and run["label"].endswith("-chunked-graph")
    assert "INVALID" in capsys.readouterr().out


def _events(n_chunks: int, t2w_queue_s: float):
    """Synthetic stage events: chunk i is put into the Token2Wav queue at 10 i and taken
    t2w_queue_s later."""
    ev = []
    for i in range(n_chunks):
        t = 10.0 * i
        ev += [
            ("llm", t, t + 1),
            ("llm.blocked", t + 1, t + 1),
            ("tts.wait", t, t + 1),
            ("tts", t + 1, t + 2),
            ("tts.blocked", t + 2, t + 2),
            ("token2wav.wait", t, t + 2 + t2w_queue_s),
            ("token2wav", t + 2 + t2w_queue_s, t + 3 + t2w_queue_s),
        ]
    return ev


def _chunks(samples):
    return [metrics.Chunk(s, float(i), i == len(samples) - 1) for i, s in enumerate(samples)]


def test_forced_queue_wait_and_dropped_chunk_fail_their_gates():
    timings = {"audio_s": 3.0, "wall_s": 4.0, "llm_ms": 1, "tts_ms": 1, "token2wav_ms": 1}
    samples = [20160, 24000, 24000, 30720]
    ok = metrics.request_record("story", _chunks(samples), _events(4, 0.5), timings, {})
    assert ok["data_valid"] and ok["realtime_eligible"]
    assert ok["chunks"][1]["t2w_queue_ms"] == pytest.approx(500)
    slow = metrics.request_record("story", _chunks(samples), _events(4, 1.2), timings, {})
    assert slow["data_valid"] and not slow["realtime_eligible"]
    assert "1200 ms" in slow["gates"]["t2w_queue_wait"]["detail"]
    dropped = metrics.request_record("story", _chunks(samples[:3]), _events(4, 0.0), timings, {})
    assert not dropped["gates"]["no_dropped_input"]["ok"] and not dropped["data_valid"]
    media = metrics.request_record("audio", _chunks(samples), _events(4, 0.0), timings, {"audio": False})
    assert not media["gates"]["no_dropped_input"]["ok"]
    short = metrics.request_record("story", _chunks([20160, 30720]), _events(2, 0.0), timings, {})
    assert not short["gates"]["steady_chunk_samples"]["ok"]  # no steady chunk: nothing to score
    run = {"valid": False, "data_valid": True}
    assert exit_status([run]) == 1 and exit_status([run], allow_realtime_miss=True) == 0


def test_page_prompt_is_sliced_and_recorded(tiny_dir, bench_runs):
    import llama_omni_py as omni
    from llama_omni_py.bench.runner import measure

    cfg = omni.EngineConfig(threads=1, token2wav=omni.Token2WavConfig(threads=1))
    with omni.OmniSession(tiny_dir, "cpu", cfg, reply=omni.ReplyConfig(max_new_tokens=12)) as s:
        rec = measure(s, prompts.PROMPTS["page"], seed=0)
        plain = measure(s, prompts.PROMPTS["image"], seed=0)
    assert rec["vision"] == {"slices": 7, "tokens": 7 * 64} and plain["vision"] == {"slices": 1, "tokens": 64}
    assert rec["stage_ms"]["vpm_ms"] > 0
    run = json.loads(json.dumps(bench_runs[1][0]))
    run["requests"][0] = {**rec, "round": 1}
    validate_run(run)  # the record fits the schema


def test_prompt_inputs_are_deterministic():
    a, b = prompts.chirp(), prompts.chirp()
    assert a.dtype == np.float32 and a.size == 32000 and np.array_equal(a, b) and np.abs(a).max() <= 0.3
    img = prompts.PROMPTS["image"].inputs()["image"]
    assert img.shape == (448, 448, 3) and img.dtype == np.uint8 and len(np.unique(img[..., 2])) == 2
    page = prompts.PROMPTS["page"].inputs()["image"]
    assert page.shape == (1008, 1344, 3) and np.array_equal(page, prompts.PROMPTS["page"].inputs()["image"])
    with pytest.raises(ConfigError, match="prompts"):
        prompts.select(["story", "nope"])


def test_pinned_cpus_follow_the_device_node(tmp_path):
    nodes = {n: f"{32 * n}-{32 * n + 31}" for n in range(8)}
    topo = pinning.placement.read_topology(fake_sysfs(tmp_path, nodes), allowed=list(range(256)))
    node, cpus = pinning.device_node_cpus(topo, 6, "npu 0", env={})
    assert node == 6 and cpus == tuple(range(192, 224))
    assert pinning.decide(node, cpus, range(256)).cpus == tuple(range(192, 224))
    assert pinning.decide(node, cpus, range(200, 208)).cpus == tuple(range(200, 208))  # a mask inside: kept
    with pytest.raises(ConfigError, match="outside NUMA node 6"):
        pinning.decide(node, cpus, range(0, 16))  # a range copied from another host
    assert pinning.decide(node, cpus, range(0, 16), force=True).cpus == tuple(range(16))
    assert pinning.decide(node, cpus, range(180, 200), force=True).cpus == tuple(range(192, 200))
    assert pinning.device_node_cpus(topo, 6, env={"OMNI_NUMA_NODE": "2"})[0] == 2
    # no device node: the node with the most CPUs this process may use
    masked = pinning.placement.read_topology(tmp_path / "node", allowed=list(range(64, 80)))
    assert pinning.device_node_cpus(masked, None, env={}) == (2, tuple(range(64, 96)))


def test_pinned_cpus_skip_offline_cpus(tmp_path):
    topo = pinning.placement.read_topology(
        fake_sysfs(tmp_path, {0: "0-7", 1: "8-15"}, online="0-5,8-15"), allowed=list(range(16))
    )
    assert pinning.device_node_cpus(topo, 0, env={}) == (0, (0, 1, 2, 3, 4, 5))


def _script(tmp_path, mask, *args):
    sys_node = fake_sysfs(tmp_path, {0: "0-7", 1: "8-15", 2: "16-23", 3: "24-31"})
    pci = tmp_path / "pci" / "0000:c1:00.0"
    pci.mkdir(parents=True)
    (pci / "numa_node").write_text("2\n")
    env = dict(
        os.environ,
        PYTHON=sys.executable,
        OMNI_BENCH_SYS_NODE=str(sys_node),
        OMNI_BENCH_SYS_PCI=str(pci.parent),
        OMNI_BENCH_PCI_BUS_ID="0000:c1:00.0",
        OMNI_BENCH_MASK=mask,
    )
    env.pop("OMNI_NUMA_NODE", None)
    return subprocess.run(
        ["bash", str(ROOT / "scripts" / "bench-pinned.sh"), "--dry-run", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def test_pinned_script_runs_taskset_on_the_device_node(tmp_path):
    r = _script(tmp_path, "0-31", "--sweep", "--threads", "4 8", "--queues", "1 16", "--", "--repeats", "3")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 8  # 2 thread counts x 2 queue sizes x {pinned, unpinned}
    pinned = [line for line in lines if "taskset" in line]
    assert len(pinned) == 4 and all("taskset -c 16-23 " in line and "--tag pinned" in line for line in pinned)
    assert {line.split()[0] for line in lines} == {"OMNI_T2W_THREADS=4", "OMNI_T2W_THREADS=8"}
    assert sum("OMNI_TTS_QUEUE=1 " in line for line in lines) == 4
    assert all(line.endswith("--repeats 3") for line in lines)


def test_pinned_script_refuses_a_mask_outside_the_node(tmp_path):
    r = _script(tmp_path, "0-15")
    assert r.returncode == pinning.REFUSED and not r.stdout
    assert "outside NUMA node 2" in r.stderr and "--force" in r.stderr
    forced = _script(tmp_path / "f", "0-15", "--force")
    assert forced.returncode == 0 and "taskset -c 0-15 " in forced.stdout


def test_report_renders_table_and_plots(bench_runs, tmp_path):
    from PIL import Image

    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import report
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    runs = report.load_runs(bench_runs[2])
    md = report.write_report(runs, tmp_path).read_text()
    assert md.count("| t2w1-") == 2 and md.count("| t2w2-") == 2  # summary row + per-prompt row each
    for name in ("rtf_vs_threads", "stage_breakdown", "first_audio_cdf"):
        with Image.open(tmp_path / f"{name}.png") as im:
            assert im.size[0] >= 600 and im.size[1] >= 400
            px = np.asarray(im.convert("L"))
            assert px.std() > 5  # something was drawn, not a blank canvas


def test_checkout_wrapper_is_the_same_command():
    r = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "run.py"), "--help"], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0 and "--t2w-threads" in r.stdout and "--allow-realtime-miss" in r.stdout
    assert cli.main(["bench", "--repeats", "2", "--model-dir", "unused"]) == 2  # fewer than 3 rounds: refused


def test_engine_list_alternates_token2mel_engines():
    parser = argparse.ArgumentParser()
    arguments.add_arguments(parser)
    opts = arguments.options_from_args(parser.parse_args(["--token2mel", "graph,native", "--t2w-threads", "1"]))
    assert [c.token2mel for c in opts.configs] == ["graph", "native"]
    assert [c.label.rsplit("-", 1)[-1] for c in opts.configs] == ["graph", "native"]
    with pytest.raises(ConfigError) as e:
        arguments.options_from_args(parser.parse_args(["--token2mel", "fast"]))
    assert e.value.field == "token2mel"
