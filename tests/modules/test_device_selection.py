"""The device parity tests are deselected (not skipped) unless OMNI_TEST_DEVICE names a device."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent


def _collect(env_value):
    env = {k: v for k, v in os.environ.items() if k != "OMNI_TEST_DEVICE"}
    if env_value is not None:
        env["OMNI_TEST_DEVICE"] = env_value
    # run from tests/modules/, so the uncompiled checkout is not first on sys.path
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "test_device_parity.py"],
        cwd=TESTS,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode in (0, 5), out.stdout + out.stderr  # 5: nothing collected
    return out.stdout


@pytest.mark.parametrize("value", [None, " "])
def test_deselected_without_a_device(value):
    out = _collect(value)
    assert "deselected" in out and "test_device_parity.py::" not in out


def test_collected_when_a_device_is_named():
    out = _collect("cpu")
    assert "test_device_parity.py::test_llm_logits" in out and "deselected" not in out
