import numpy as np
import pytest

import llama_omni_py as omni
from llama_omni_py._native import core
from llama_omni_py.device import backends


def test_cpu_is_always_listed():
    ids = omni.backends()
    assert ids[0] == "cpu"
    assert "cpu" in omni.compiled_backends()


def test_cpu_and_auto_resolve():
    assert omni.resolve_device("cpu") == "cpu"
    assert omni.resolve_device(" CPU ") == "cpu"
    auto = omni.resolve_device("auto")
    assert auto in omni.backends()
    accelerators = [d for d in omni.backends() if d != "cpu"]
    assert auto == "cpu" if not accelerators else auto in accelerators


@pytest.mark.parametrize("spec", ["", "gpu", "cuda:", "cuda:-1", "cuda:x", "0", "cpu:0:1", "npu 0"])
def test_malformed_device_strings_raise_device_error(spec):
    with pytest.raises(omni.DeviceError):
        omni.resolve_device(spec)


def test_non_string_device_raises():
    with pytest.raises(omni.DeviceError, match="must be a string"):
        omni.resolve_device(0)


@pytest.mark.parametrize("name,flag", [("cann", "-DGGML_CANN=on"), ("cuda", "-DGGML_CUDA=on")])
def test_missing_backend_names_the_build_recipe(name, flag):
    if name in omni.compiled_backends():
        # A build that has the backend must resolve a present device (never a silent CPU).
        present = [d for d in omni.backends() if d.startswith(name)]
        assert present, f"{name} compiled in but no device listed"
        assert omni.resolve_device(f"{name}:0") == present[0]
        return
    with pytest.raises(omni.BackendUnavailableError) as err:
        omni.resolve_device(f"{name}:0")
    assert err.value.backend == name
    assert flag in err.value.recipe
    assert "pip install" in str(err.value)


def test_absent_index_raises():
    with pytest.raises(omni.DeviceError):
        core.Backend("cpu:3")


def test_cann_environment_defaults_respect_user_settings():
    env = {"GGML_CANN_ACL_GRAPH": "on"}
    applied = backends.apply_cann_environment(env)
    assert applied == {"GGML_CANN_WEIGHT_NZ": "off"}
    assert env == {"GGML_CANN_ACL_GRAPH": "on", "GGML_CANN_WEIGHT_NZ": "off"}
    assert backends.apply_cann_environment(env) == {}


def _probe_reference(n: int) -> np.ndarray:
    r, c = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    w = (np.sin(0.37 * r + 0.11 * c) / np.sqrt(n)).astype(np.float16).astype(np.float64)  # rows = outputs
    x = np.cos(0.05 * np.arange(4 * n, dtype=np.float32)).astype(np.float64).reshape(4, n)
    b = 0.01 * (np.arange(n) % 7)
    h = x @ w.T + b
    g = 0.5 * h * (1 + np.tanh(np.sqrt(2 / np.pi) * (h + 0.044715 * h**3)))
    e = np.exp(g - g.max(axis=1, keepdims=True))
    return (e / e.sum(axis=1, keepdims=True)).reshape(-1)


def test_probe_graph_computes_on_every_device():
    ref = _probe_reference(64)
    for dev in omni.backends():
        out = core.Backend(dev, 2).run_probe_graph(64)
        np.testing.assert_allclose(out, ref, atol=2e-3, err_msg=f"device {dev}")


def test_cpu_thread_setting_is_applied():
    b = core.Backend("cpu", 2)
    assert b.threads == 2
    b.set_threads(1)
    assert b.threads == 1
