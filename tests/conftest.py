import os
import shutil
import sys

# The reference encoder's forward_chunk is wrapped in torch.compile; without this every new
# input shape is traced again on the CPU (seconds per call). Must be set before torch loads.
os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")
from pathlib import Path

import pytest

from llama_omni_py import make_models

# tests/reference (the PyTorch reference implementations) is importable as `reference`.
sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory) -> Path:
    """The whole tiny module set, written once per test session (read-only for tests)."""
    d = tmp_path_factory.mktemp("tiny")
    make_models(d, "tiny", seed=0)
    return d


@pytest.fixture
def tiny_copy(tiny_dir, tmp_path) -> Path:
    """A private copy of the tiny set that a test may damage."""
    d = tmp_path / "set"
    shutil.copytree(tiny_dir, d)
    return d
