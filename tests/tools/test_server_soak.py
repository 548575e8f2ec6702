"""The server soak, briefly: it samples the worker's RSS and thread count, names its threads, and
reports the thread count's range and the RSS slope (the real run is 20 minutes: docs/performance.md)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_a_short_soak_reports_threads_and_rss(tiny_dir, tmp_path):
    out = tmp_path / "soak.json"
    script = ROOT / "benchmarks" / "server_soak.py"
    args = ["--minutes", "0.3", "--clients", "2", "--sample-s", "2", "--warmup-min", "0", "--out", str(out)]
    r = subprocess.run(
        [sys.executable, str(script), *args, "--model-dir", str(tiny_dir)], capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, r.stdout + r.stderr
    result = json.loads(out.read_text())["result"]
    assert result["requests"] > 0 and not result["lost"] and result["server_alive"]
    worker = result["threads"]["worker"]
    assert 0 < worker["min"] <= min(worker["first"], worker["final"]) <= worker["max"]
    assert result["threads"]["gateway"]["min"] > 0
    assert len(result["samples"][0]) == len(result["sample_columns"]) == 5
    assert isinstance(result["rss_slope_mb_per_hour"]["worker"], float)
    names = result["worker_thread_names"]
    assert set(names) == {"first", "peak", "last"} and names["peak"]["threads"] == worker["max"]
    assert any(n.startswith("omni-block") for n in names["first"]["names"])  # the pool loaded the engine
    assert "threads gateway" in r.stdout and "worker threads, peak" in r.stdout
