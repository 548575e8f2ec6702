"""Token2Wav streaming (windows, caches, vocoder cache and cross-fade) vs the reference stream."""

import numpy as np
import pytest
from reference import flow as flow_ref
from reference import hift as hift_ref
from reference.token2wav_stream import ReferenceStream, prompt_caches, stream_all

from llama_omni_py._native import core
from llama_omni_py.errors import InvalidArgumentError, ModelFileError


@pytest.fixture(scope="module")
def t2w_dir(tiny_dir):
    return str(tiny_dir / "token2wav-gguf")


def _reference(t2w_dir, steps=5):
    flow = flow_ref.build_flow(t2w_dir, steps)
    flow.decoder.rand_noise.zero_()  # matched by temperature 0 on our side
    dit = flow.decoder.estimator
    cache, spk = prompt_caches(f"{t2w_dir}/prompt_cache.gguf", steps, len(dit.blocks), dit.blocks[0].attn.num_heads)
    return ReferenceStream(flow, hift_ref.build(f"{t2w_dir}/hifigan2.gguf"), cache, spk, steps)


def test_stream_matches_reference(t2w_dir):
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, 6561, 25 * 5 + 11).astype(np.int32)
    ours = core.Token2Wav(t2w_dir, "cpu", 5, 2, temperature=0.0)
    got = [ours.push(tokens[i : i + 25]) for i in range(0, 125, 25)]
    got.append(ours.push(tokens[125:], final=True))

    want = stream_all(_reference(t2w_dir), tokens)

    assert [len(g) for g in got] == [20160, 24000, 24000, 24000, 24000, len(want[-1])]
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        rms = np.sqrt(np.mean(w.astype(np.float64) ** 2))
        assert g.shape == w.shape, i
        assert np.abs(g - w).max() <= 1e-4 * rms, f"chunk {i}: {np.abs(g - w).max():.3g} vs RMS {rms:.3g}"
    total = sum(len(g) for g in got)
    assert total == (3 + len(tokens)) * 960  # every token is 2 mel frames of 480 samples


def test_determinism_across_runs_and_threads(t2w_dir):
    tokens = np.random.default_rng(1).integers(0, 6561, 80).astype(np.int32)

    def run(threads):
        t = core.Token2Wav(t2w_dir, "cpu", 5, threads)
        out = [t.push(tokens[:50]), t.push(tokens[50:], final=True)]
        return np.concatenate(out)

    a, b, c = run(1), run(2), run(2)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(b, c)


def test_reset_restarts_the_stream(t2w_dir):
    tokens = np.arange(60, dtype=np.int32)
    t = core.Token2Wav(t2w_dir, "cpu", 5, 1)
    first = np.concatenate([t.push(tokens), t.push(np.zeros(0, np.int32), final=True)])
    t.reset()
    again = np.concatenate([t.push(tokens), t.push(np.zeros(0, np.int32), final=True)])
    np.testing.assert_array_equal(first, again)
    assert t.total_timings["windows"] >= 2 and t.total_timings["vocoder_ms"] > 0


def test_bad_input(t2w_dir):
    t = core.Token2Wav(t2w_dir, "cpu", 5, 1)
    with pytest.raises(InvalidArgumentError, match="outside 0..6560"):
        t.push(np.array([1, 2, 6561], np.int32))
    with pytest.raises(InvalidArgumentError, match="empty push"):
        t.push(np.zeros(0, np.int32))
    t.push(np.zeros(10, np.int32), final=True)
    with pytest.raises(InvalidArgumentError, match="after the final"):
        t.push(np.zeros(3, np.int32))
    with pytest.raises(ModelFileError, match="built for 5 CFM steps"):
        core.Token2Wav(t2w_dir, "cpu", 10, 1)


def test_nan_in_prompt_cache_is_refused(t2w_dir, tmp_path):
    import shutil

    from llama_omni_py.gguf_writer import GgufWriter

    d = tmp_path / "t2w"
    shutil.copytree(t2w_dir, d)
    g = core.GgufFile(str(d / "prompt_cache.gguf"))
    w = GgufWriter(d / "prompt_cache.gguf")
    for k in g.keys:
        v = g.value(k)
        w.add(k, "float32" if isinstance(v, float) else "int32", v)
    arrays = {t.name: np.array(g.read(t.name)) for t in g.tensors}
    arrays["prompt_cache.spk_cb"][5] = np.nan
    for name, a in arrays.items():
        w.declare(name, tuple(reversed(a.shape)), "f32")
    del g
    w.write(lambda name, ne, dt: [arrays[name].reshape(-1)])
    with pytest.raises(ModelFileError, match="NaN"):
        core.Token2Wav(str(d), "cpu", 5, 1)


@pytest.mark.slow
def test_stream_matches_reference_at_real_dimensions(tmp_path):
    """Real-dimension Token2Wav (random weights): 3 windows and the final flush vs the reference."""
    import llama_omni_py as omni

    omni.make_models(tmp_path, "real", only=["token2wav"])
    t2w_dir = str(tmp_path / "token2wav-gguf")
    tokens = np.random.default_rng(5).integers(0, 6561, 25 * 3 + 4).astype(np.int32)
    ours = core.Token2Wav(t2w_dir, "cpu", 5, 2, temperature=0.0)
    got = [ours.push(tokens[:75]), ours.push(tokens[75:], final=True)]
    want = stream_all(_reference(t2w_dir), tokens)
    g, w = np.concatenate(got), np.concatenate(want)
    assert g.shape == w.shape
    rms = np.sqrt(np.mean(w.astype(np.float64) ** 2))
    assert np.abs(g - w).max() <= 1e-4 * rms, f"{np.abs(g - w).max():.3g} vs RMS {rms:.3g}"
