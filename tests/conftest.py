"""Shared by every test folder. Nothing here needs the compiled core: the unit/ folder runs
without it (tests/unit/test_without_the_core.py proves it); folders whose tests need it load it
through the package as they use it, and modules/conftest.py has the fixtures that drive it."""

import contextlib
import os
import shutil
import sys

# The reference encoder's forward_chunk is wrapped in torch.compile; without this every new
# input shape is traced again on the CPU (seconds per call). Must be set before torch loads.
os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")
from pathlib import Path

import pytest

from llama_omni_py.errors import OmniError
from llama_omni_py.modelset.generate import make_models

# tests/support (the helpers: server_client, speech, ..., and the PyTorch references as
# `reference`) is importable by module name.
sys.path.insert(0, str(Path(__file__).parent / "support"))

# Where the build is here, the core loads first, before anything else brings in libgomp (torch,
# llama_cpp): its OpenMP wait policy must be set before libgomp loads (_native.py).
with contextlib.suppress(OmniError):
    import llama_omni_py._native  # noqa: F401


def pytest_collection_modifyitems(config, items):
    """Tests marked ``device`` compare an accelerator with the CPU: they are collected only when
    OMNI_TEST_DEVICE names the device, and deselected (not skipped) otherwise."""
    if os.environ.get("OMNI_TEST_DEVICE", "").strip():
        return
    device = [item for item in items if item.get_closest_marker("device")]
    if device:
        config.hook.pytest_deselected(items=device)
        items[:] = [item for item in items if not item.get_closest_marker("device")]


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory) -> Path:
    """The whole tiny module set, written once per test session (read-only for tests)."""
    d = tmp_path_factory.mktemp("tiny")
    make_models(d, "tiny", seed=0)
    return d


@pytest.fixture(scope="session")
def hub_repo_files(tiny_dir, tmp_path_factory) -> dict[str, bytes]:
    """The files of the test repository the hub stand-ins serve (support/hub_server.py): the tiny
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
