import os
import shutil
import sys

# The reference encoder's forward_chunk is wrapped in torch.compile; without this every new
# input shape is traced again on the CPU (seconds per call). Must be set before torch loads.
os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")
from pathlib import Path

import pytest

from llama_omni_py import make_models
from llama_omni_py._native import core

# tests/reference (the PyTorch reference implementations) is importable as `reference`.
sys.path.insert(0, str(Path(__file__).parent))


def pytest_collection_modifyitems(config, items):
    """Tests marked ``device`` compare an accelerator with the CPU: they are collected only when
    OMNI_TEST_DEVICE names the device, and deselected (not skipped) otherwise."""
    if os.environ.get("OMNI_TEST_DEVICE", "").strip():
        return
    device = [item for item in items if item.get_closest_marker("device")]
    if device:
        config.hook.pytest_deselected(items=device)
        items[:] = [item for item in items if not item.get_closest_marker("device")]


@pytest.fixture(params=core.internal.cpu_isas(), ids=lambda name: f"isa-{name}")
def cpu_isa(request):
    """Each CPU kernel set this CPU runs (docs/cpu-kernels.md), forced for the test; the set in use
    before (the best, or what OMNI_CPU_ISA chose) comes back afterwards."""
    before = core.internal.cpu_isa()
    core.internal.force_cpu_isa(request.param)
    try:
        yield request.param
    finally:
        core.internal.force_cpu_isa(before)


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory) -> Path:
    """The whole tiny module set, written once per test session (read-only for tests)."""
    d = tmp_path_factory.mktemp("tiny")
    make_models(d, "tiny", seed=0)
    return d


@pytest.fixture(scope="session")
def hub_repo_files(tiny_dir, tmp_path_factory) -> dict[str, bytes]:
    """The files of the test repository the hub stand-ins serve (tests/hub_server.py): the tiny
    set, its LLM also quantized to Q4_K_M by libllama, and a README."""
    import ctypes

    import llama_cpp

    from llama_omni_py.modelset import hub
    from llama_omni_py.modelset import spec as ms

    q4 = tmp_path_factory.mktemp("q4") / "llm.gguf"
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype, params.nthread = llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_K_M, 1
    source = str(tiny_dir / ms.LLM_FILE).encode()
    assert llama_cpp.llama_model_quantize(source, str(q4).encode(), ctypes.byref(params)) == 0
    files = {p.relative_to(tiny_dir).as_posix(): p.read_bytes() for p in tiny_dir.rglob("*.gguf")}
    files[hub.llm_file("Q4_K_M")] = q4.read_bytes()
    files["README.md"] = b"# tiny test set\n"
    return files


@pytest.fixture
def tiny_copy(tiny_dir, tmp_path) -> Path:
    """A private copy of the tiny set that a test may damage."""
    d = tmp_path / "set"
    shutil.copytree(tiny_dir, d)
    return d


@pytest.fixture(autouse=True)
def _engine_free_before_test(request):
    """A module-scoped ``server`` serves one session at a time and frees it only after the
    previous test's close handshake has run on the server side; start each test on a free
    engine so that no test sees the one before it as ``session_busy``."""
    if "server" in request.fixturenames:
        from server_client import http, wait_until

        server = request.getfixturevalue("server")
        wait_until(lambda: http(server.url + "/health")[1].get("session_active") is False)
    yield
