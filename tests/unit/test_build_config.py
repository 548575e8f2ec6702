"""CMake configuration: the default (llama-cpp-python wheel) and OMNI_LLAMA_CPP_DIR in both forms."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _site_prefix() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("llama_cpp")
    assert spec is not None, "llama-cpp-python is a dependency and must be installed"
    return Path(list(spec.submodule_search_locations)[0]).parent


def _configure(build: Path, *defines: str, env_extra=None) -> subprocess.CompletedProcess:
    import pybind11

    cmd = [
        "cmake",
        "-S",
        str(ROOT),
        "-B",
        str(build),
        f"-DPython_EXECUTABLE={sys.executable}",
        f"-Dpybind11_DIR={pybind11.get_cmake_dir()}",
        *defines,
    ]
    env = {k: v for k, v in os.environ.items() if k not in ("OMNI_LLAMA_CPP_DIR", "OMNI_LLAMA_CPP_BUILD_DIR")}
    env.update(env_extra or {})
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)


@pytest.fixture(autouse=True)
def _need_cmake():
    assert shutil.which("cmake"), "cmake is needed to build the package"


def test_default_uses_the_wheel(tmp_path):
    r = _configure(tmp_path / "b")
    assert r.returncode == 0, r.stderr
    assert "llama.cpp from llama-cpp-python at" in r.stdout


def test_install_prefix_through_the_environment(tmp_path):
    prefix = _site_prefix()
    r = _configure(tmp_path / "b", env_extra={"OMNI_LLAMA_CPP_DIR": str(prefix)})
    assert r.returncode == 0, r.stderr
    assert f"install prefix {prefix}" in r.stdout


def test_source_tree_layout(tmp_path):
    # A llama.cpp checkout built with BUILD_SHARED_LIBS: headers in include/ and ggml/include/,
    # libraries under build/bin. Assembled here from the wheel's files.
    prefix = _site_prefix()
    src = tmp_path / "llama.cpp"
    (src / "ggml" / "include").mkdir(parents=True)
    (src / "include").mkdir()
    (src / "build" / "bin").mkdir(parents=True)
    for h in (prefix / "include").glob("*.h"):
        dest = src / ("include" if h.name.startswith("llama") else "ggml/include") / h.name
        dest.symlink_to(h)
    for lib in ("libllama.so", "libggml.so", "libggml-base.so"):
        (src / "build" / "bin" / lib).symlink_to(prefix / "llama_cpp" / "lib" / lib)
    r = _configure(tmp_path / "b", f"-DOMNI_LLAMA_CPP_DIR={src}")
    assert r.returncode == 0, r.stderr
    assert f"source tree {src}, build {src}/build" in r.stdout


def test_bad_directory_fails_with_a_clear_message(tmp_path):
    r = _configure(tmp_path / "b", f"-DOMNI_LLAMA_CPP_DIR={tmp_path}")
    assert r.returncode != 0
    assert "neither a llama.cpp install prefix" in r.stderr
