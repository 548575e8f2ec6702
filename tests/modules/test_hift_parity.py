"""HiFT vocoder parity with the PyTorch reference (minicpmo-utils 1.0.7 HiFTGenerator) on the
same random weights: f0 predictor, sine source, decode with a fixed source, the whole forward.
Tolerance: max |diff| <= 1e-4 x RMS of the reference output, except where noted."""

import numpy as np
import pytest
import torch  # reference dependency, installed by .ci/run (scripts/install-reference.sh)
from reference import hift as ref

from llama_omni_py._native import core
from llama_omni_py.errors import InvalidArgumentError, ModelFileError
from llama_omni_py.modelset import generate as modelgen
from llama_omni_py.modelset import spec as ms

TOL = 1e-4


def _assert_close(ours, theirs, tol=TOL, what=""):
    ours, theirs = np.asarray(ours, np.float64), np.asarray(theirs, np.float64)
    assert ours.shape == theirs.shape, what
    rms = np.sqrt(np.mean(theirs**2))
    err = np.max(np.abs(ours - theirs))
    assert rms > 0 and err <= tol * rms, f"{what}: max|diff| {err:.3g} > {tol} x RMS {rms:.3g}"


@pytest.fixture(scope="module")
def tiny_hift(tiny_dir):
    path = str(tiny_dir / "token2wav-gguf" / "hifigan2.gguf")
    return path, ref.build(path)


def _mel(frames, seed=0):
    return np.random.default_rng(seed).standard_normal((80, frames)).astype(np.float32)


@pytest.mark.parametrize("threads", [1, 2])
def test_f0_predictor(tiny_hift, threads):
    path, model = tiny_hift
    mel = _mel(58)
    with torch.inference_mode():
        want = model.f0_predictor(torch.from_numpy(mel)[None])[0].numpy()
    _assert_close(core.internal.HiftVocoder(path, threads).f0(mel), want, what="f0")


def test_sine_source(tiny_hift):
    # Voiced (80-280 Hz) and unvoiced frames. The phase reaches ~1e4 rad, where one float32 ulp is
    # ~1e-3 rad; PyTorch's linear-interpolation kernel rounds its weights differently from the
    # plain formula, so the excitation agrees to ~1e-3 x RMS, not 1e-4 (measured 9.6e-4).
    path, model = tiny_hift
    rng = np.random.default_rng(1)
    f0 = np.where(np.arange(58) % 7 < 5, 80 + 200 * rng.random(58), 0).astype(np.float32)
    want = ref.deterministic_source(model, torch.from_numpy(f0)).numpy()
    _assert_close(core.internal.HiftVocoder(path, 1).source(f0), want, tol=2e-3, what="source")


@pytest.mark.parametrize("frames", [1, 8, 58])
def test_decode_with_fixed_source(tiny_hift, frames):
    path, model = tiny_hift
    mel = _mel(frames, seed=frames)
    src = (0.1 * np.random.default_rng(7).standard_normal(frames * 480)).astype(np.float32)
    with torch.inference_mode():
        want = model.decode(torch.from_numpy(mel)[None], torch.from_numpy(src)[None, None])[0].numpy()
    got = core.internal.HiftVocoder(path, 2).decode(mel, src)
    assert got.shape == (frames * 480,)
    _assert_close(got, want, what=f"decode {frames} frames")


def test_decode_on_every_kernel_set(tiny_hift, cpu_isa):
    path, model = tiny_hift
    mel = _mel(58, seed=11)
    src = (0.1 * np.random.default_rng(12).standard_normal(58 * 480)).astype(np.float32)
    with torch.inference_mode():
        want = model.decode(torch.from_numpy(mel)[None], torch.from_numpy(src)[None, None])[0].numpy()
    _assert_close(core.internal.HiftVocoder(path, 2).decode(mel, src), want, what=f"decode on {cpu_isa}")


def test_forward_with_cache_source(tiny_hift):
    path, model = tiny_hift
    mel = _mel(58, seed=3)
    cache = (0.05 * np.random.default_rng(4).standard_normal(3840)).astype(np.float32)
    want, want_src = ref.deterministic_forward(model, torch.from_numpy(mel), torch.from_numpy(cache))
    audio, src = core.internal.HiftVocoder(path, 2).forward(mel, cache)
    np.testing.assert_array_equal(src[:3840], cache)
    _assert_close(src, want_src.numpy(), tol=2e-3, what="excitation")
    _assert_close(audio, want.numpy(), what="audio")


def test_deterministic_across_threads_and_runs(tiny_hift):
    path, _ = tiny_hift
    mel = _mel(58, seed=5)
    a = core.internal.HiftVocoder(path, 1).forward(mel)[0]
    b = core.internal.HiftVocoder(path, 2).forward(mel)[0]
    c = core.internal.HiftVocoder(path, 2).forward(mel)[0]
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(b, c)


def test_bad_input_raises(tiny_hift, tiny_dir):
    path, _ = tiny_hift
    v = core.internal.HiftVocoder(path, 1)
    with pytest.raises(InvalidArgumentError):
        v.decode(_mel(4), np.zeros(100, np.float32))
    with pytest.raises(InvalidArgumentError):
        v.f0(np.zeros((40, 10), np.float32))
    with pytest.raises(InvalidArgumentError):
        v.forward(_mel(2), np.zeros(2000, np.float32))
    with pytest.raises(InvalidArgumentError):
        core.internal.HiftVocoder(path, 0)
    with pytest.raises(InvalidArgumentError, match="one CPU per thread"):
        core.internal.HiftVocoder(path, 2, [0])
    with pytest.raises(ModelFileError, match="conv_pre"):
        core.internal.HiftVocoder(str(tiny_dir / "token2wav-gguf" / "encoder.gguf"), 1)


def test_pinning_outside_the_affinity_mask_raises(tiny_hift):
    path, _ = tiny_hift
    import os

    bad = max(os.sched_getaffinity(0)) + 1
    from llama_omni_py.errors import DeviceError

    with pytest.raises(DeviceError, match="pinning cannot be honoured"):
        core.internal.HiftVocoder(path, 1, [bad])
    v = core.internal.HiftVocoder(path, 1, [min(os.sched_getaffinity(0))])
    assert v.forward(_mel(4))[0].shape == (4 * 480,)


@pytest.mark.slow
def test_real_dimensions(tmp_path):
    """Real HiFT (base 512, 20.8 M parameters): decode one streaming chunk (58 frames)."""
    dims = ms.preset("real")
    f = next(f for f in ms.FILES if f.key == "token2wav.hifigan2")
    modelgen.write_file(f, tmp_path, dims, ms.build_vocab(False), seed=0)
    path = str(tmp_path / f.relpath)
    model = ref.build(path)
    mel = _mel(58, seed=11)
    src = (0.1 * np.random.default_rng(12).standard_normal(58 * 480)).astype(np.float32)
    with torch.inference_mode():
        want = model.decode(torch.from_numpy(mel)[None], torch.from_numpy(src)[None, None])[0].numpy()
    v = core.internal.HiftVocoder(path, 2)
    assert v.base_channels == 512
    _assert_close(v.decode(mel, src), want, what="real decode")
