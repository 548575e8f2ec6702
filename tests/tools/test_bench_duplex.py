"""``llama-omni bench --mode duplex``: the metrics on hand-made unit records (each rule shown
failing), and a short real-time run on the demo set that writes a schema-valid JSON file."""

import json
from pathlib import Path

import jsonschema
import pytest

from llama_omni_py import cli
from llama_omni_py.bench import duplex_metrics as dm
from llama_omni_py.bench.schema import validate_duplex_run

SECOND = 24000


def unit(i, listen=False, eot=False, samples=SECOND, cost=200.0, push=None, result=None, text=3, late=0.0):
    push = float(i) if push is None else push
    return {
        "index": i,
        "is_listen": listen,
        "end_of_turn": eot,
        "text_chars": 0 if listen else text,
        "n_tokens": 0,
        "n_tts_tokens": 0 if listen else 25,
        "audio_samples": samples,
        "t_push_s": push,
        "push_late_ms": late,
        "t_result_s": push + 0.5 if result is None else result,
        "wall_ms": 500.0,
        "kv_cache_length": 100 + i,
        "stage_ms": {"apm": cost / 6, "vpm": cost / 6, "prefill": cost / 6, "decode": cost / 6, "tts": cost / 6,
                     "token2wav": cost / 6},
    }  # fmt: skip


def test_turns_heads_and_tails():
    frames = [unit(0, listen=True), unit(1), unit(2), unit(3, eot=True), unit(4), unit(5), unit(6, listen=True)]
    turns = dm.speaking_turns(frames)
    assert [[f["index"] for f in t] for t in turns] == [[1, 2, 3], [4, 5]]
    # heads (1, 4) and the flush tail (3) are not core
    assert [f["index"] for f in dm.core_frames(frames)] == [2, 5]


def test_core_rtf_pools_compute_over_core_audio():
    frames = [unit(0), unit(1, cost=600.0), unit(2, cost=900.0), unit(3, eot=True, cost=5000.0)]
    s = dm.summarise(frames, 1.0)
    assert s["core"]["frames"] == 2 and s["core"]["rtf"] == pytest.approx(1.5 / 2.0)
    assert s["data_valid"]
    short = dm.summarise([unit(0), unit(1, samples=SECOND - 1), unit(2)], 1.0)
    assert short["core"]["not_one_second"] == [1] and not short["data_valid"]


def test_e2e_rtf_is_first_push_to_last_wav_over_audio():
    frames = [unit(0, listen=True), unit(1), unit(2), unit(3, result=4.2)]
    e2e = dm.e2e_speak_wav_rtf(frames)
    assert e2e["rtf"] == pytest.approx((4.2 - 1.0) / 3.0)
    assert dm.summarise(frames, 1.0)["speak_to_wav_ms"]["median"] == pytest.approx(500.0)


def test_stutters_gaps_and_held_pushes_break_realtime():
    ok = [unit(i) for i in range(4)]
    assert dm.summarise(ok, 1.0)["realtime_eligible"]
    slow = dm.summarise([unit(0), unit(1, cost=1500.0), unit(2)], 1.0)
    assert slow["stutter_units"] == [1] and not slow["realtime_eligible"]
    late = [unit(0), unit(1, result=3.0), unit(2, result=3.1)]  # unit 0's second ran out at 1.5 s
    play = dm.summarise(late, 1.0)["playback"]
    assert play["gaps"] == 1 and play["gap_s"] == pytest.approx(1.5)
    assert play["buffer_needed_s"] == pytest.approx(1.5)  # unit 1 came 2.5 s after unit 0's 1 s
    # jitter within the playout buffer is no gap; beyond it, the gap is the excess
    jitter = [unit(0), unit(1, result=1.5 + dm.PLAYOUT_DELAY_S - 0.05), unit(2)]
    assert dm.playback(jitter)["gaps"] == 0 and dm.summarise(jitter, 1.0)["realtime_eligible"]
    assert dm.playback(jitter)["buffer_needed_s"] == pytest.approx(dm.PLAYOUT_DELAY_S - 0.05)
    # a 0.1 s buffer: unit 0 plays 0.6-1.6 s, unit 1 (at 1.75 s) buffers again and starts at 1.85 s
    assert dm.playback(jitter, delay_s=0.1)["gap_s"] == pytest.approx(0.25)
    held = dm.summarise([unit(0), unit(1, late=250.0)], 1.0)
    assert held["push_late_ms"]["held_up"] == [1] and not held["realtime_eligible"]


def test_duplex_bench_on_the_demo_set(tiny_dir, tmp_path, capsys):
    out = tmp_path / "out"
    argv = ["bench", "--mode", "duplex", "--model-dir", str(tiny_dir), "--device", "cpu", "--units", "6"]
    rc = cli.main(argv + ["--interval", "0.5", "--warmup-units", "1", "--out-dir", str(out), "--allow-realtime-miss"])
    assert rc == 0, capsys.readouterr()
    (path,) = out.glob("*.json")
    run = json.loads(path.read_text())
    validate_duplex_run(run)
    frames = run["runs"][0]["frames"]
    assert [f["index"] for f in frames] == list(range(6)) and len(run["warmup"]) == 1
    assert all(f["is_listen"] for f in frames[:4])  # --force-listen-count 4 (perf-duplex's case)
    assert all(f["stage_ms"]["vpm"] > 0 and f["stage_ms"]["apm"] > 0 for f in frames)  # frames went in
    pushes = [f["t_push_s"] for f in frames]
    assert all(b - a >= 0.45 for a, b in zip(pushes, pushes[1:]))  # one unit every 0.5 s
    assert all(f["t_result_s"] > f["t_push_s"] for f in frames)
    assert run["data_valid"] and len(list(Path(run["options"]["inputs"]).glob("*.jpg"))) == 6
    assert "| token2wav |" in capsys.readouterr().out
    run["runs"][0]["summary"]["core"].pop("rtf")
    with pytest.raises(jsonschema.ValidationError):
        validate_duplex_run(run)


def test_turn_based_options_are_refused_in_duplex_mode(tmp_path):
    assert cli.main(["bench", "--mode", "duplex", "--handoff", "text_chunk", "--model-dir", str(tmp_path)]) == 2
