"""Streaming Token2Mel (encoder + CFM over the DiT; ggml graphs and the native CPU code) vs the
reference flow: setup_cache on a prompt, then inference_chunk windows and the last chunk, with the
reference's fixed noise."""

import numpy as np
import pytest
import torch  # reference dependency, installed by scripts/install-reference.sh
from reference import flow as ref

from llama_omni_py._native import core
from llama_omni_py.errors import InvalidArgumentError
from llama_omni_py.modelset import generate as modelgen
from llama_omni_py.modelset import spec as ms

TOL = 1e-4


def _run(t2w_dir, steps, windows, prompt_tokens=10, seed=0, token2mel="auto"):
    flow = ref.build_flow(t2w_dir, steps)
    t2m = core.internal.Token2Mel(t2w_dir, "cpu", 2, steps, token2mel=token2mel)
    cache = core.internal.Token2MelCache()
    rng = np.random.default_rng(seed)
    spk = rng.standard_normal(192).astype(np.float32)
    ptok = rng.integers(0, 6561, prompt_tokens + 3).astype(np.int32)
    pmel = rng.standard_normal((2 * prompt_tokens, 80)).astype(np.float32)
    noise = flow.decoder.rand_noise[0].numpy()
    with torch.inference_mode():
        tc = flow.setup_cache(
            torch.from_numpy(ptok.astype(np.int64))[None],
            torch.from_numpy(pmel)[None],
            torch.from_numpy(spk)[None],
            n_timesteps=steps,
        )
        tc = {k: v.clone() for k, v in tc.items()}  # the reference returns views of reused buffers
    t2m.chunk(
        ptok,
        False,
        spk,
        cache,
        cond=np.ascontiguousarray(pmel.T),
        noise=np.ascontiguousarray(noise[:, : 2 * prompt_tokens]),
    )
    off = 2 * prompt_tokens
    for i, (n, last) in enumerate(windows):
        tok = rng.integers(0, 6561, n).astype(np.int32)
        with torch.inference_mode():
            feat, tc = flow.inference_chunk(
                torch.from_numpy(tok.astype(np.int64))[None],
                torch.from_numpy(spk)[None],
                tc,
                last_chunk=last,
                n_timesteps=steps,
            )
            tc = {k: v.clone() for k, v in tc.items()}
        want = feat[0].numpy()
        got = t2m.chunk(tok, last, spk, cache, noise=np.ascontiguousarray(noise[:, off : off + want.shape[1]]))
        off += want.shape[1]
        rms = np.sqrt(np.mean(want.astype(np.float64) ** 2))
        err = np.abs(got - want).max()
        assert got.shape == want.shape and err <= TOL * rms, f"window {i}: max|diff| {err:.3g} vs RMS {rms:.3g}"
    assert cache.estimator_frames == off


@pytest.mark.parametrize("token2mel", ["graph", "native"])
@pytest.mark.parametrize("steps", [5, 10])
def test_streaming_matches_reference(tiny_dir, steps, token2mel):
    _run(
        str(tiny_dir / "token2wav-gguf"),
        steps,
        [(28, False), (28, False), (28, False), (13, True)],
        token2mel=token2mel,
    )


def test_native_token2mel_on_every_kernel_set(tiny_dir, cpu_isa):
    _run(str(tiny_dir / "token2wav-gguf"), 5, [(28, False), (13, True)], token2mel="native")


def test_seeded_noise_is_reproducible_and_per_stream(tiny_dir):
    t2m = core.internal.Token2Mel(str(tiny_dir / "token2wav-gguf"), "cpu", 1, 5)
    spk = np.ones(192, np.float32)
    tok = np.arange(28, dtype=np.int32)
    a = t2m.chunk(tok, False, spk, core.internal.Token2MelCache())
    b = t2m.chunk(tok, False, spk, core.internal.Token2MelCache())
    c = t2m.chunk(tok, False, spk, core.internal.Token2MelCache(seed=7))
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


def test_bad_tokens_and_inputs(tiny_dir):
    t2m = core.internal.Token2Mel(str(tiny_dir / "token2wav-gguf"), "cpu", 1, 5)
    spk = np.ones(192, np.float32)
    for bad in ([6561] + [0] * 27, [-1] + [0] * 27):
        with pytest.raises(InvalidArgumentError, match="outside 0..6560"):
            t2m.chunk(np.array(bad, np.int32), False, spk, core.internal.Token2MelCache())
    with pytest.raises(InvalidArgumentError, match="empty"):
        t2m.chunk(np.zeros(0, np.int32), True, spk, core.internal.Token2MelCache())
    with pytest.raises(InvalidArgumentError, match="not finite"):
        t2m.chunk(np.zeros(28, np.int32), False, np.full(192, np.nan, np.float32), core.internal.Token2MelCache())
    with pytest.raises(InvalidArgumentError, match="steps"):
        core.internal.Token2Mel(str(tiny_dir / "token2wav-gguf"), "cpu", 1, 0)


@pytest.mark.slow
def test_real_dimensions(tmp_path):
    for key in ("token2wav.encoder", "token2wav.flow_matching", "token2wav.flow_extra"):
        f = next(f for f in ms.FILES if f.key == key)
        modelgen.write_file(f, tmp_path, ms.preset("real"), ms.build_vocab(False), seed=0)
    for token2mel in ("graph", "native"):
        _run(str(tmp_path / "token2wav-gguf"), 5, [(28, False), (13, True)], token2mel=token2mel)
