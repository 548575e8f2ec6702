"""The OpenMP wait policy the core sets before ggml's libgomp loads (see _native.py), and only then:
importing the package alone leaves the environment as it is."""

import os
import subprocess
import sys

import pytest

SHOW = "import os, {}; print(os.environ.get('OMP_WAIT_POLICY'), os.environ.get('GOMP_SPINCOUNT'))"


def _run(env_extra: dict, tmp_path, module: str = "llama_omni_py._native") -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    env.update(env_extra)
    r = subprocess.run(
        [sys.executable, "-c", SHOW.format(module)], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120
    )
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


@pytest.mark.parametrize(
    "user,seen",
    [({}, "PASSIVE None"), ({"OMP_WAIT_POLICY": "active"}, "active None"), ({"GOMP_SPINCOUNT": "1000"}, "None 1000")],
)
def test_passive_wait_unless_the_user_chose(tmp_path, user, seen):
    assert _run(user, tmp_path) == seen


def test_the_package_face_leaves_the_environment_alone(tmp_path):
    assert _run({}, tmp_path, "llama_omni_py") == "None None"


def test_libgomp_in_this_process_was_configured_before_it_loaded():
    # The suite's conftest loaded the core before anything loaded libgomp: the setting took effect.
    from llama_omni_py import _native

    maps = open("/proc/self/maps").read()
    assert "libgomp" in maps
    assert _native.OPENMP_APPLIED or "OMP_WAIT_POLICY" in os.environ or "GOMP_SPINCOUNT" in os.environ
