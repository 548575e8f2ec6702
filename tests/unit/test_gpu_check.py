"""scripts/gpu_check.py, the Python side of scripts/gpu-check.sh: the generator run without the
native core, the carried-wheel filter and the summary."""

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from llama_omni_py.bench.duplex_metrics import summarise
from llama_omni_py.modelset import spec as ms

ROOT = Path(__file__).resolve().parents[2]
HELPER = ROOT / "scripts" / "gpu_check.py"


def _run(*args, cwd=None):
    out = subprocess.run([sys.executable, str(HELPER), *args], capture_output=True, text=True, timeout=300, cwd=cwd)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def test_generator_runs_from_the_checkout_alone(tiny_dir, tmp_path):
    # the helper imports the checkout's llama_omni_py, whose face loads nothing native
    out = _run("models", str(tmp_path / "m"), "--size", "tiny", "--workers", "2")
    assert "wrote 10 files" in out
    for f in ms.FILES:
        a, b = (tmp_path / "m" / f.relpath).read_bytes(), (tiny_dir / f.relpath).read_bytes()
        assert hashlib.sha256(a).digest() == hashlib.sha256(b).digest(), f.key


def test_missing_wheels_lists_only_absent_distributions(tmp_path):
    for name in ("numpy-1.0-py3-none-any.whl", "surely_not_installed_pkg-1.0-py3-none-any.whl"):
        (tmp_path / name).write_bytes(b"")
    lines = _run("missing-wheels", str(tmp_path)).split()
    assert lines == [str(tmp_path / "surely_not_installed_pkg-1.0-py3-none-any.whl")]
    lines = _run("missing-wheels", str(tmp_path), "--always", "NumPy").split()  # names compare normalised
    assert len(lines) == 2 and lines[0].endswith("numpy-1.0-py3-none-any.whl")


def test_summary_reads_what_the_steps_wrote(tmp_path):
    steps = tmp_path / "steps.tsv"
    steps.write_text("llama\tok\t250\t\nparity\tfailed\t40\texit 1\nbench\tskipped\t0\tout of time\n")
    (tmp_path / "parity.json").write_text(
        json.dumps(
            {
                "device": "cuda:0",
                "comparisons": [
                    {"what": "apm", "rel_l2": 1e-3, "ok": True},
                    {"what": "vpm", "rel_l2": 0.5, "ok": False},
                ],
            }
        )
    )
    (tmp_path / "token2wav.json").write_text(
        json.dumps({"results": [{"device": "cuda:0", "threads": 8, "token2mel_ms_median": 20.0,
                                 "vocoder_ms_median": 80.0, "rtf": 0.1}]})
    )  # fmt: skip
    frames = [
        {"index": i, "is_listen": i < 2, "end_of_turn": False, "text_chars": 4, "audio_samples": 24000,
         "t_push_s": float(i), "push_late_ms": 0.0, "t_result_s": i + 0.3,
         "stage_ms": dict.fromkeys(("apm", "vpm", "prefill", "decode", "tts", "token2wav"), 50.0)}
        for i in range(6)
    ]  # fmt: skip
    (tmp_path / "duplex.json").write_text(
        json.dumps({"config": {"device": "cuda:0"}, "runs": [{"summary": summarise(frames, 1.0), "frames": frames}],
                    "manifest": {}})
    )  # fmt: skip
    group = lambda audio, rtf, batch: {  # noqa: E731 -- one mode's part of a load run's group
        "audio_per_wall_s": audio,
        "session_wall_rtf": {"max": rtf},
        "scheduler": {"llm_mean_batch": batch},
    }
    (tmp_path / "load.json").write_text(
        json.dumps({"summary": {"groups": {"4": {"engine": group(3.5, 0.8, 3.9), "workers": group(2.0, 1.4, 1.0)}}}})
    )
    info = tmp_path / "info.json"
    info.write_text(json.dumps({"devices": [{"id": "cuda:0", "description": "NVIDIA H200"}]}))
    out = _run("summary", str(tmp_path), str(steps), "--info", str(info))
    assert summary_slots(tmp_path) == {
        "4": {
            "engine_audio_per_wall_s": 3.5,
            "workers_audio_per_wall_s": 2.0,
            "engine_session_rtf_max": 0.8,
            "engine_mean_llm_batch": 3.9,
        }
    }
    assert "slots 4: engine 3.500 s audio per s (workers 2.000), slowest session wall RTF 0.800" in out
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert [s["status"] for s in summary["steps"]] == ["ok", "failed", "skipped"]
    assert summary["parity"] == {"passed": 1, "failed": ["vpm"], "worst_rel_l2": 0.5}
    assert summary["token2wav"][0]["rtf"] == 0.1 and summary["bench"] == []
    assert summary["devices"] == ["cuda:0: NVIDIA H200"] and summary["duplex"]["summary"]["core"]["frames"] == 3
    assert summary["duplex"]["summary"]["core"]["rtf"] == pytest.approx(0.3)  # 6 x 50 ms per second of audio
    assert "manifest" not in summary["duplex"]
    assert "RTF 0.100" in out and "| parity | failed | 40 | exit 1 |" in out and "duplex (cuda:0)" in out


def summary_slots(out_dir):
    return json.loads((out_dir / "summary.json").read_text())["slots"]
