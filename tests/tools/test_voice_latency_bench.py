"""benchmarks/voice_latency.py on the tiny set, two spoken questions through each interface: the
JSON it writes has every turn timed, in order (end of speech, then the VAD decision, then the
first audio), and the stage breakdown. Nothing here asserts on speed."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
INTERFACES = ("half_duplex", "realtime", "python")
STAGES = ("encode_ms", "prefill_ms", "first_text_ms", "first_codes_ms", "first_audio_ms")


def test_voice_latency_benchmark_writes_every_turn(tiny_dir, tmp_path):
    out = tmp_path / "voice.json"
    cmd = [sys.executable, str(ROOT / "benchmarks" / "voice_latency.py"), "--model-dir", str(tiny_dir)]
    cmd += ["--questions", "2", "--silence-ms", "500", "--out", str(out)]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["benchmark"] == "voice_latency" and result["args"]["questions"] == 2
    assert set(result["summary"]) == set(INTERFACES) and "| realtime | 2 |" in run.stdout
    for name in INTERFACES:
        s, turns = result["summary"][name], result["turns"][name]
        assert s["turns"] == len(turns) == 2
        for t in turns:
            # the detector waits for 500 ms of silence after the speech: it cannot decide sooner
            assert 250 < t["vad_delay_ms"] < 3000, (name, t)
            assert t["first_audio_ms"] > t["vad_delay_ms"], (name, t)
            assert t["after_vad_ms"]["first_audio"] > 0
            assert t["audio_1s_ms"] is None or t["audio_1s_ms"] >= t["first_audio_ms"]
        assert s["first_audio_p50_ms"] <= s["first_audio_p95_ms"]
    for name in ("half_duplex", "python"):  # the reply's own stage timings
        stages = result["summary"][name]["stages_p50_ms"]
        assert set(STAGES) <= set(stages) and all(stages[k] > 0 for k in STAGES), (name, stages)
    assert "encoded" in result["summary"]["realtime"]["after_vad_p50_ms"]
