"""What runs without the native build: the package face, the gateway, the random-set generator and
the core-free tests (this whole folder and the gateway and evaluation tests listed in CORE_FREE),
each in a fresh Python where ``llama_omni_py._core`` cannot be imported (and neither can it in any
process those start: the blocker comes in through sitecustomize)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SUPPORT = ROOT / "tests" / "support"
# The tests that need neither the build nor an engine: unit/ (core-free by design) and the tests of
# the gateway (on stand-in workers) and of the evaluation's pure pieces, which live with their
# subjects' folders. A new core-free test outside unit/ is added here.
CORE_FREE = (
    "tests/unit",
    "tests/gateway/test_gateway_failures.py",
    "tests/gateway/test_gateway_limits.py",
    "tests/gateway/test_gateway_slots.py",
    "tests/gateway/test_pool.py",
    "tests/eval/test_eval_extract.py",
    "tests/eval/test_seedtts_metrics.py",
)
THIS = "tests/unit/test_without_the_core.py::test_the_core_free_tests_pass_without_the_core"


def _no_core_env(tmp_path: Path) -> dict[str, str]:
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(f"import sys\nsys.path.insert(0, {str(SUPPORT)!r})\nimport no_core\n")
    path = os.pathsep.join([str(site), str(ROOT), os.environ.get("PYTHONPATH", "")])
    return dict(os.environ, PYTHONPATH=path)


def _python(code: str, tmp_path: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=_no_core_env(tmp_path),
        cwd=tmp_path,
        timeout=timeout,
    )


def test_the_core_is_really_blocked(tmp_path):
    r = _python("import llama_omni_py as omni; omni.OmniSession", tmp_path)
    # OmniError, worded for an installed package or for the uncompiled source tree, caused by the blocker
    assert r.returncode != 0 and "llama_omni_py.errors.OmniError" in r.stderr and "not built here" in r.stderr


def test_the_face_and_the_gateway_import_without_the_core(tmp_path):
    code = (
        "import sys\n"
        "import llama_omni_py as omni\n"
        "import llama_omni_py.server.gateway as gw\n"
        "assert omni.ReplyConfig(max_new_tokens=8).max_new_tokens == 8 and omni.EngineConfig().n_ctx > 0\n"
        "app = gw.build_app(gw.Gateway(gw.GatewayConfig(), []))\n"
        "assert 'llama_omni_py._core' not in sys.modules and 'llama_omni_py._native' not in sys.modules\n"
        "print('ok', type(app).__name__)\n"
    )
    r = _python(code, tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["ok", "Starlette"]


def test_the_random_set_generator_runs_without_the_core(tmp_path):
    code = (
        "import sys\n"
        "from llama_omni_py import make_models\n"
        "written = make_models('set', 'tiny', seed=0)\n"
        "assert 'llama_omni_py._native' not in sys.modules\n"
        "print(len(written))\n"
    )
    r = _python(code, tmp_path, timeout=300)
    assert r.returncode == 0, r.stderr
    assert int(r.stdout) >= 8 and (tmp_path / "set" / "token2wav-gguf").is_dir()


def test_the_core_free_tests_pass_without_the_core(tmp_path):
    assert all((ROOT / p).exists() for p in CORE_FREE), [p for p in CORE_FREE if not (ROOT / p).exists()]
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *CORE_FREE, "--deselect", THIS],
        capture_output=True,
        text=True,
        env=_no_core_env(tmp_path),
        cwd=ROOT,
        timeout=900,
    )
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    # all passed: no skip, failure or error among them; the one deselected is this test
    summary = r.stdout.strip().splitlines()[-1]
    assert re.fullmatch(r"\d+ passed, 1 deselected(, \d+ warnings?)? in .*", summary), summary
