"""DiT estimator parity with the PyTorch reference on the same random weights, for both Token2Mel
implementations (``token2mel``): the ggml graph (what every device runs) and the native CPU code."""

import numpy as np
import pytest
import torch  # reference dependency, installed by scripts/install-reference.sh
from reference import flow as ref

from llama_omni_py._native import core
from llama_omni_py.errors import InvalidArgumentError, ModelFileError
from llama_omni_py.modelset import generate as modelgen
from llama_omni_py.modelset import spec as ms

TOL = 1e-4
TOKEN2MEL = ["graph", "native"]


def _inputs(batch, frames, seed):
    rng = np.random.default_rng(seed)
    x, mu, cond = (rng.standard_normal((batch, 80, frames)).astype(np.float32) for _ in range(3))
    spks = rng.standard_normal((batch, 80)).astype(np.float32)
    t = rng.random(batch).astype(np.float32)
    return x, mu, t, spks, cond


def _reference(model, x, mu, t, spks, cond):
    with torch.inference_mode():
        mask = torch.ones(x.shape[0], 1, x.shape[2])
        return model(
            *(torch.from_numpy(a) for a in (x,)),
            mask,
            torch.from_numpy(mu),
            torch.from_numpy(t),
            torch.from_numpy(spks),
            torch.from_numpy(cond),
        ).numpy()


def _check(got, want):
    rms = np.sqrt(np.mean(want.astype(np.float64) ** 2))
    err = np.abs(got - want).max()
    assert err <= TOL * rms, f"max|diff| {err:.3g} > {TOL} x RMS {rms:.3g}"


@pytest.fixture(scope="module")
def tiny_dit(tiny_dir):
    path = str(tiny_dir / "token2wav-gguf" / "flow_matching.gguf")
    return path, ref.build_dit(path)


@pytest.mark.parametrize("token2mel", TOKEN2MEL)
@pytest.mark.parametrize("batch,frames", [(1, 1), (2, 28), (2, 50), (2, 150)])
def test_estimator_matches_reference(tiny_dit, batch, frames, token2mel):
    path, model = tiny_dit
    est = core.internal.DitEstimator(path, "cpu", 2, token2mel=token2mel)
    assert est.token2mel == token2mel
    d = est.dims
    assert (d.hidden, d.heads, d.head_dim, d.depth, d.mlp) == (64, 2, 32, 2, 256)
    inputs = _inputs(batch, frames, seed=frames)
    _check(est.forward(*inputs), _reference(model, *inputs))


def test_native_token2mel_on_every_kernel_set(tiny_dit, cpu_isa):
    path, model = tiny_dit
    est = core.internal.DitEstimator(path, "cpu", 2, token2mel="native")
    inputs = _inputs(2, 50, seed=5)
    _check(est.forward(*inputs), _reference(model, *inputs))


@pytest.mark.parametrize("token2mel", TOKEN2MEL)
def test_cfg_batch_rows_are_independent(tiny_dit, token2mel):
    # Batch doubling for CFG must not mix rows: row 0 of a batch of 2 equals a batch of 1.
    path, _ = tiny_dit
    est = core.internal.DitEstimator(path, "cpu", 1, token2mel=token2mel)
    x, mu, t, spks, cond = _inputs(2, 30, seed=9)
    both = est.forward(x, mu, t, spks, cond)
    one = est.forward(x[:1], mu[:1], t[:1], spks[:1], cond[:1])
    np.testing.assert_allclose(both[0], one[0], rtol=0, atol=1e-5)


@pytest.mark.parametrize("token2mel", TOKEN2MEL)
def test_deterministic_across_threads(tiny_dit, token2mel):
    path, _ = tiny_dit
    inputs = _inputs(2, 50, seed=3)
    a = core.internal.DitEstimator(path, "cpu", 1, token2mel=token2mel).forward(*inputs)
    b = core.internal.DitEstimator(path, "cpu", 2, token2mel=token2mel).forward(*inputs)
    c = core.internal.DitEstimator(path, "cpu", 3, token2mel=token2mel).forward(*inputs)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a, c)


def test_a_full_modulation_cache_keeps_every_item_of_a_batch(tiny_dit):
    # The native code keeps the adaLN modulation of up to 64 flow times. A batch whose distinct
    # times overflow it must still see each item's own modulation, as a fresh estimator does.
    path, _ = tiny_dit
    warm = core.internal.DitEstimator(path, "cpu", 1, token2mel="native")
    for i in range(63):
        x, mu, _, spks, cond = _inputs(1, 4, seed=100 + i)
        warm.forward(x, mu, np.array([i / 64], np.float32), spks, cond)
    inputs = _inputs(16, 6, seed=7)  # 16 distinct times the cache has not seen
    fresh = core.internal.DitEstimator(path, "cpu", 1, token2mel="native").forward(*inputs)
    np.testing.assert_array_equal(warm.forward(*inputs), fresh)


def test_token2mel_choice(tiny_dit):
    path, _ = tiny_dit
    assert core.internal.DitEstimator(path, "cpu", 1).token2mel == "native"  # auto on the CPU
    with pytest.raises(InvalidArgumentError, match="token2mel"):
        core.internal.DitEstimator(path, "cpu", 1, token2mel="fast")
    with pytest.raises(InvalidArgumentError, match="bf16 needs the native"):
        core.internal.DitEstimator(path, "cpu", 1, token2mel="graph", bf16=True)


def test_bad_input(tiny_dit, tiny_dir):
    path, _ = tiny_dit
    est = core.internal.DitEstimator(path, "cpu", 1)
    x, mu, t, spks, cond = _inputs(2, 10, seed=1)
    with pytest.raises(InvalidArgumentError):
        est.forward(x, mu[:, :, :5], t, spks, cond)
    with pytest.raises(InvalidArgumentError):
        est.forward(x, mu, t[:1], spks, cond)
    with pytest.raises(ModelFileError):
        core.internal.DitEstimator(str(tiny_dir / "token2wav-gguf" / "encoder.gguf"), "cpu", 1)
    with pytest.raises(Exception, match="cann"):
        core.internal.DitEstimator(path, "cann:0", 1)


@pytest.mark.slow
def test_real_dimensions(tmp_path):
    f = next(f for f in ms.FILES if f.key == "token2wav.flow_matching")
    modelgen.write_file(f, tmp_path, ms.preset("real"), ms.build_vocab(False), seed=0)
    path = str(tmp_path / f.relpath)
    model = ref.build_dit(path)
    inputs = _inputs(2, 50, seed=4)
    want = _reference(model, *inputs)
    for token2mel in TOKEN2MEL:
        est = core.internal.DitEstimator(path, "cpu", 2, token2mel=token2mel)
        assert (est.dims.hidden, est.dims.heads, est.dims.depth) == (512, 8, 16)
        _check(est.forward(*inputs), want)
