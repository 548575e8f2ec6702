"""Token2Wav streaming (windows, caches, vocoder cache and cross-fade) under both cache policies:
"reference" vs the PyTorch streaming path, "llama.cpp-omni" vs its rules restated on the PyTorch
modules (tests/support/reference/token2wav_stream.py)."""

import numpy as np
import pytest
import torch  # reference dependency, installed by scripts/install-reference.sh
from reference import flow as flow_ref
from reference import hift as hift_ref
from reference.token2wav_stream import LlamaCppOmniStream, ReferenceStream, prompt_caches, stream_all

from llama_omni_py._native import core
from llama_omni_py.config import Token2WavConfig
from llama_omni_py.errors import InvalidArgumentError, ModelFileError
from llama_omni_py.modules import token2wav

POLICIES = {"reference": ReferenceStream, "llama.cpp-omni": LlamaCppOmniStream}


def native(t2w_dir, steps=5, threads=1, **options):
    """The core stream with options from a Token2WavConfig (the one route into the core)."""
    return core.Token2Wav(
        str(t2w_dir), token2wav.to_native(Token2WavConfig(steps=steps, threads=threads, **options), "cpu")
    )


@pytest.fixture(autouse=True)
def one_torch_thread():
    # PyTorch's spinning worker threads slow it several-fold on a shared 2-core machine.
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def t2w_dir(tiny_dir):
    return str(tiny_dir / "token2wav-gguf")


def _reference(t2w_dir, policy="reference", steps=5):
    flow = flow_ref.build_flow(t2w_dir, steps)
    flow.decoder.rand_noise.zero_()  # matched by temperature 0 on our side
    dit = flow.decoder.estimator
    cache, spk = prompt_caches(f"{t2w_dir}/prompt_cache.gguf", steps, len(dit.blocks), dit.blocks[0].attn.num_heads)
    return POLICIES[policy](flow, hift_ref.build(f"{t2w_dir}/hifigan2.gguf"), cache, spk, steps)


def _ours(t2w_dir, policy, tokens, pieces=25, token2mel="auto"):
    """Our stream fed `pieces` tokens per push, then the final flush; one array per push. One
    thread: results do not depend on it (see below), and it stays fast on a busy machine."""
    t = native(t2w_dir, temperature=0.0, cache_policy=policy, token2mel=token2mel)
    n_full = len(tokens) // pieces * pieces
    got = [t.push(tokens[i : i + pieces]) for i in range(0, n_full, pieces)]
    got.append(t.push(tokens[n_full:], final=True))
    return got


def _assert_close(got, want, rms_tol=1e-5, max_tol=3e-4):
    """Audio after Token2Mel, the vocoder and the streaming caches: the RMS of the difference
    stays near float rounding (measured 2.4e-6..3.2e-6 x the audio's RMS per window, both token2mel
    and policies, AVX2 kernels), and no sample strays far (the largest of 24000 differences is
    20-40 x their RMS: 4e-5..1.1e-4 x the audio's RMS). A bound on the maximum alone sat within
    10 % of what one CPU's rounding gives, so it failed on another."""
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape, i
        w64 = w.astype(np.float64)
        rms = np.sqrt(np.mean(w64**2))
        err_rms, err_max = np.sqrt(np.mean((g - w64) ** 2)), np.abs(g - w64).max()
        assert err_rms <= rms_tol * rms and err_max <= max_tol * rms, (
            f"chunk {i}: RMS of difference {err_rms:.3g}, max {err_max:.3g}, vs RMS {rms:.3g}"
        )


@pytest.mark.parametrize("token2mel", ["graph", "native"])
@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("tail", [11, 24])  # final windows of 14 and 27 tokens
def test_stream_matches_its_restatement(t2w_dir, policy, tail, token2mel):
    # 9 full windows, so both caches pass their bounds and slide (the tiny prompt is 20 frames).
    tokens = np.random.default_rng(tail).integers(0, 6561, 25 * 9 + tail).astype(np.int32)
    got = _ours(t2w_dir, policy, tokens, token2mel=token2mel)
    want = stream_all(_reference(t2w_dir, policy), tokens)
    assert [len(g) for g in got] == [20160] + [24000] * 8 + [len(want[-1])]
    _assert_close(got, want)
    assert sum(len(g) for g in got) == (3 + len(tokens)) * 960  # every token is 2 mel frames of 480 samples


def test_policies_differ_where_their_rules_do(t2w_dir):
    tokens = np.random.default_rng(3).integers(0, 6561, 25 * 4 + 5).astype(np.int32)
    a = _ours(t2w_dir, "llama.cpp-omni", tokens)
    b = _ours(t2w_dir, "reference", tokens)
    np.testing.assert_array_equal(a[0], b[0])  # the first window reads only the prompt's caches
    assert [len(x) for x in a] == [len(x) for x in b]
    assert not np.allclose(a[1], b[1], rtol=0, atol=1e-6)  # the caches part ways after one update


def test_last_window_is_padded_with_silence_tokens(t2w_dir):
    # A final window of n < 28 tokens runs as 28 (padded with 4218) and keeps 2n mel frames: its
    # audio equals the PyTorch modules fed the padded window, cropped.
    tokens = np.random.default_rng(4).integers(0, 6561, 25 + 6).astype(np.int32)  # final window: 9 tokens
    got = _ours(t2w_dir, "llama.cpp-omni", tokens)
    ref = _reference(t2w_dir, "reference")  # no padding of its own; the test pads
    first = ref.stream(np.r_[[4218] * 3, tokens[:25]], False)
    ref.cache["conformer_att_cache"] = ref.cache["conformer_att_cache"][:, :, :, -20:]  # slide as llama.cpp-omni does
    ref.cache["estimator_att_cache"] = ref.cache["estimator_att_cache"][..., -20:, :]  # the prompt's frames
    mel = ref.flow_chunk(np.r_[tokens[22:], [4218] * 19], True)[0]
    assert mel.shape[2] == 56
    _assert_close(got, [first, ref.vocode(mel[:, :, :18], True)])
    unpadded = _ours(t2w_dir, "reference", tokens)[-1]
    assert unpadded.shape == got[-1].shape and not np.allclose(unpadded, got[-1], rtol=0, atol=1e-6)


def test_cache_policy_is_checked(t2w_dir):
    options = core.Token2WavOptions()
    with pytest.raises(InvalidArgumentError, match="cache_policy"):
        options.cache_policy = "pytorch"
    assert core.Token2Wav(t2w_dir, options).cache_policy == "llama.cpp-omni"


@pytest.mark.parametrize("token2mel", ["graph", "native"])
def test_determinism_across_runs_and_threads(t2w_dir, token2mel):
    tokens = np.random.default_rng(1).integers(0, 6561, 80).astype(np.int32)

    def run(threads):
        t = native(t2w_dir, threads=threads, token2mel=token2mel)
        assert t.token2mel == token2mel
        out = [t.push(tokens[:50]), t.push(tokens[50:], final=True)]
        return np.concatenate(out)

    a, b, c = run(1), run(2), run(2)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(b, c)


def test_reset_restarts_the_stream(t2w_dir):
    tokens = np.arange(60, dtype=np.int32)
    t = native(t2w_dir)
    first = np.concatenate([t.push(tokens), t.push(np.zeros(0, np.int32), final=True)])
    t.reset()
    again = np.concatenate([t.push(tokens), t.push(np.zeros(0, np.int32), final=True)])
    np.testing.assert_array_equal(first, again)
    assert t.total_timings["windows"] >= 2 and t.total_timings["vocoder_ms"] > 0


def test_bad_input(t2w_dir):
    t = native(t2w_dir)
    with pytest.raises(InvalidArgumentError, match="outside 0..6560"):
        t.push(np.array([1, 2, 6561], np.int32))
    with pytest.raises(InvalidArgumentError, match="empty push"):
        t.push(np.zeros(0, np.int32))
    t.push(np.zeros(10, np.int32), final=True)
    with pytest.raises(InvalidArgumentError, match="after the final"):
        t.push(np.zeros(3, np.int32))
    with pytest.raises(ModelFileError, match="built for 5 CFM steps"):
        native(t2w_dir, steps=10)


def test_nan_in_prompt_cache_is_refused(t2w_dir, tmp_path):
    import shutil

    from llama_omni_py.modelset.gguf_writer import GgufWriter

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
        native(d)


@pytest.fixture(scope="module")
def real_t2w_dir(tmp_path_factory):
    import llama_omni_py as omni

    d = tmp_path_factory.mktemp("real_t2w")
    omni.make_models(d, "real", only=["token2wav"])
    return str(d / "token2wav-gguf")


@pytest.mark.slow
@pytest.mark.parametrize("policy", POLICIES)
def test_stream_matches_its_restatement_at_real_dimensions(real_t2w_dir, policy):
    """Real-dimension Token2Wav (random weights, the real 100-frame prompt cache): 8 windows and
    a final window of 7 tokens vs the PyTorch modules under the same rules."""
    tokens = np.random.default_rng(5).integers(0, 6561, 25 * 8 + 4).astype(np.int32)
    got = _ours(real_t2w_dir, policy, tokens, pieces=len(tokens))
    want = stream_all(_reference(real_t2w_dir, policy), tokens)
    _assert_close([np.concatenate(got)], [np.concatenate(want)])


@pytest.mark.parametrize("token2mel", ["graph", "native"])
def test_split_halves_give_the_same_audio(t2w_dir, token2mel):
    # push == vocode(push_mel) window by window, flush likewise, with the vocoder of earlier
    # windows running on another thread while Token2Mel makes the next (as the pipeline does).
    import queue
    import threading

    tokens = np.random.default_rng(6).integers(0, 6561, 25 * 5 + 13).astype(np.int32)
    # Four pushes of 25 codes, a flush (3 codes wait: fewer than a flushed window needs), the rest
    # with final=True (one full window and the final one).
    calls = [("push", tokens[i : i + 25], False) for i in range(0, 100, 25)]
    calls += [("flush", None, False), ("push", tokens[100:], True)]

    def stream():
        return native(t2w_dir, threads=2, token2mel=token2mel)

    ref = stream()
    want = [ref.flush() if kind == "flush" else ref.push(codes, final) for kind, codes, final in calls]

    t = stream()
    todo, done, made = queue.Queue(), [], []
    vocoding = threading.Event()

    def vocoder():
        while (windows := todo.get()) is not None:
            vocoding.set()
            done.append(np.concatenate([t.vocode(w) for w in windows] or [np.zeros(0, np.float32)]))

    th = threading.Thread(target=vocoder)
    th.start()
    try:
        for kind, codes, final in calls:
            made.append(t.flush_mel() if kind == "flush" else t.push_mel(codes, final))
            todo.put(made[-1])
            if len(made) == 1:
                vocoding.wait(60)  # the next Token2Mel runs while window 0 is being vocoded
    finally:
        todo.put(None)
        th.join()
    assert [len(w) for w in made] == [1, 1, 1, 1, 0, 2]
    assert [w.last for w in made[-1]] == [False, True]
    assert all(w.mel.shape == (80, w.frames) for ws in made for w in ws)
    assert [len(a) for a in done] == [len(a) for a in want]
    for a, b in zip(done, want):
        np.testing.assert_array_equal(a, b)
    assert t.total_timings["windows"] == 6 and t.total_timings["samples"] == sum(len(a) for a in want)
    assert t.total_timings["vocoder_ms"] > 0 and t.total_timings["token2mel_ms"] > 0
    with pytest.raises(InvalidArgumentError, match="after the final"):
        t.push_mel(tokens[:3])


def test_split_halves_refuse_out_of_order_windows(t2w_dir):
    t = native(t2w_dir)
    tokens = np.arange(100, 150, dtype=np.int32)
    first, second = t.push_mel(tokens[:25])[0], t.push_mel(tokens[25:])[0]
    with pytest.raises(InvalidArgumentError, match="in the order"):
        t.vocode(second)  # window 1 before window 0
    a = t.vocode(first)
    assert a.size > 0 and t.last_timings["windows"] == 1 and t.last_timings["samples"] == a.size
    with pytest.raises(InvalidArgumentError, match="in the order"):
        t.vocode(first)  # twice
    t.reset()
    with pytest.raises(InvalidArgumentError, match="reset"):
        t.vocode(second)  # made before the reset
    # After the reset the stream starts again: the same first window, the same audio.
    again = t.push_mel(tokens[:25])
    assert len(again) == 1 and np.array_equal(t.vocode(again[0]), a)
