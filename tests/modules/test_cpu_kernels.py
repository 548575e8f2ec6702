"""The CPU kernel sets (docs/cpu-kernels.md): the standalone kernel tests built and run for this
CPU and, cross-compiled, for aarch64 under qemu-user; run-time selection and OMNI_CPU_ISA; the
build's guard against kernel code shared between sets."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

import llama_omni_py as omni
from llama_omni_py._native import apply_cpu_isa, core, cpu_kernels
from llama_omni_py.env import cpu_isa_override

ROOT = Path(__file__).resolve().parents[2]
CROSS_CXX = "aarch64-linux-gnu-g++"
QEMU = "qemu-aarch64"


def _build_kernel_tests(build: Path, *cmake_args: str) -> Path:
    """Configures and builds native/tests (the kernel sets + their unit tests) into ``build``."""
    gen = ["-G", "Ninja"] if shutil.which("ninja") else []
    subprocess.run(
        ["cmake", "-S", str(ROOT / "native" / "tests"), "-B", str(build), *gen, *cmake_args],
        check=True,
        capture_output=True,
        text=True,
    )
    subprocess.run(["cmake", "--build", str(build), "-j", "2"], check=True, capture_output=True, text=True)
    return build / "kernel_tests"


def _passed_sets(output: str) -> set[str]:
    return {line.split()[1].rstrip(":") for line in output.splitlines() if line.startswith("set ") and "PASS" in line}


def test_every_set_this_cpu_runs_passes_its_unit_tests(tmp_path_factory):
    exe = _build_kernel_tests(tmp_path_factory.mktemp("kernels-native"))
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "ALL PASSED" in run.stdout
    # The test program sees the same CPU and sets as the extension: each set was exercised.
    assert _passed_sets(run.stdout) == set(core.internal.cpu_isas())


@pytest.mark.skipif(
    not (shutil.which(CROSS_CXX) and shutil.which(QEMU)),
    reason=f"needs {CROSS_CXX} and {QEMU} (Debian: g++-aarch64-linux-gnu qemu-user; .ci/run installs them)",
)
def test_aarch64_sets_pass_under_qemu(tmp_path_factory):
    """The NEON set (what Kunpeng, Graviton and Apple CPUs run) and the portable one, cross-compiled
    and run under user-mode emulation: a wrong NEON kernel fails here, on an x86 machine."""
    exe = _build_kernel_tests(
        tmp_path_factory.mktemp("kernels-aarch64"),
        "-DCMAKE_SYSTEM_NAME=Linux",
        "-DCMAKE_SYSTEM_PROCESSOR=aarch64",
        f"-DCMAKE_CXX_COMPILER={CROSS_CXX}",
        "-DOMNI_STATIC=ON",
    )
    run = subprocess.run([QEMU, str(exe)], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    assert _passed_sets(run.stdout) == {"generic", "neon"}


def test_selection_and_errors():
    internal = core.internal
    sets = internal.cpu_isas()
    # The best set by default, or the one OMNI_CPU_ISA chose for this run of the suite.
    default = cpu_isa_override() or sets[-1]
    assert sets[0] == "generic" and internal.cpu_isa() == default
    with pytest.raises(omni.InvalidArgumentError, match="must be 'auto'"):
        internal.force_cpu_isa("sse9")
    foreign = "neon" if os.uname().machine == "x86_64" else "avx2"
    with pytest.raises(omni.DeviceError, match=f"cannot run the '{foreign}'"):
        internal.force_cpu_isa(foreign)
    assert internal.cpu_isa() == default  # a refused choice changes nothing
    info = cpu_kernels()
    assert info["active"] == default and info["available"] == list(sets)


def test_omni_cpu_isa_environment_override():
    internal = core.internal
    try:
        assert apply_cpu_isa({"OMNI_CPU_ISA": "generic"}) == "generic" == internal.cpu_isa()
        assert apply_cpu_isa({"OMNI_CPU_ISA": "auto"}) == internal.cpu_isas()[-1]  # auto: the best
        assert apply_cpu_isa({"OMNI_CPU_ISA": "generic"}) == "generic"
        with pytest.raises(omni.ConfigError, match="cannot run"):
            apply_cpu_isa({"OMNI_CPU_ISA": "neon" if os.uname().machine == "x86_64" else "avx2"})
        with pytest.raises(omni.ConfigError, match="OMNI_CPU_ISA") as e:
            apply_cpu_isa({"OMNI_CPU_ISA": "sse9"})
        assert "this CPU runs generic" in str(e.value)
    finally:
        apply_cpu_isa()  # back to what this run of the suite chose
    assert internal.cpu_isa() == (cpu_isa_override() or internal.cpu_isas()[-1])


def test_build_refuses_shared_symbols_in_kernel_sets(tmp_path):
    """cmake/check_kernel_symbols.cmake fails on an object that defines a weak symbol (what an
    inline function compiled with a set's flags becomes) and passes a clean one."""
    cxx = shutil.which("g++") or shutil.which("c++")
    nm = shutil.which("nm")
    assert cxx and nm
    (tmp_path / "weak.cpp").write_text("inline int twice(int x) { return 2 * x; }\nint (*keep)(int) = twice;\n")
    (tmp_path / "clean.cpp").write_text("namespace { int twice(int x) { return 2 * x; } }\nint (*keep)(int) = twice;\n")
    results = {}
    for name in ("weak", "clean"):
        obj = tmp_path / f"{name}.o"
        subprocess.run([cxx, "-c", "-O2", str(tmp_path / f"{name}.cpp"), "-o", str(obj)], check=True)
        run = subprocess.run(
            ["cmake", f"-DNM={nm}", f"-DOBJECTS={obj}", "-P", str(ROOT / "cmake" / "check_kernel_symbols.cmake")],
            capture_output=True,
            text=True,
        )
        results[name] = run
    assert results["weak"].returncode != 0 and "twice" in results["weak"].stderr
    assert results["clean"].returncode == 0, results["clean"].stderr
