"""TTS (projector + LLaMA backbone + audio-code head, our ggml graph) vs transformers LlamaModel
with the projector and head in torch, on the same random weights; and the turn-based sampler."""

import numpy as np
import pytest
import torch  # reference dependency, installed by scripts/install-reference.sh
from reference import tts as ref

import llama_omni_py as omni
from llama_omni_py._native import core
from llama_omni_py.modelset import spec as ms


@pytest.fixture(scope="module")
def paths(tiny_dir):
    return str(tiny_dir / ms.TTS_FILE), str(tiny_dir / ms.PROJECTOR_FILE)


def _rows(tts, seed=0, codes=(3, 100, 6561, 42)):
    rng = np.random.default_rng(seed)
    toks = [5, 17, 300, 42, 99, 7, 8, 9, 10, 11]
    hid = rng.standard_normal((len(toks), tts.dims.llm_embd)).astype(np.float32)
    cond = tts.conditions(toks, hid, False)
    return toks, hid, cond, np.concatenate([cond] + [tts.code_embedding(c) for c in codes]).astype(np.float32)


def test_conditions_and_logits_match_reference(paths):
    tts = core.Tts(*paths, "cpu", 2, 4096, True)
    reference = ref.ReferenceTts(*paths)
    toks, hid, cond, rows = _rows(tts)
    want_cond = reference.conditions(toks, torch.from_numpy(hid)).numpy()
    np.testing.assert_allclose(cond[:-1], want_cond, atol=1e-5)
    assert cond.shape[0] == len(toks) + 1  # + audio_bos
    want = reference.logits(torch.from_numpy(rows)).numpy()
    n = cond.shape[0]
    got = [tts.forward(rows[:n])] + [tts.forward(rows[i : i + 1]) for i in range(n, rows.shape[0])]  # KV carried over
    for i, g in enumerate(got):
        w = want[n - 1 + i]
        assert np.abs(g - w).max() <= 1e-3 * np.abs(w).max(), i
    assert tts.n_past == rows.shape[0]
    tts.clear()
    np.testing.assert_allclose(tts.forward(rows[:n]), got[0], atol=1e-5)  # a new turn starts from position 0


def test_f16_weights_stay_close(paths):
    exact = core.Tts(*paths, "cpu", 1, 4096, True)
    f16 = core.Tts(*paths, "cpu", 1, 4096, False)
    _, _, _, rows = _rows(exact)
    a, b = exact.forward(rows), f16.forward(rows)
    assert np.abs(a - b).max() <= 2e-2 * np.abs(a).max()


def test_text_eos_row_and_bad_input(paths):
    tts = core.Tts(*paths, "cpu", 1, 64, False)
    hid = np.zeros((2, tts.dims.llm_embd), np.float32)
    assert tts.conditions([1, 2], hid, True).shape[0] == 4  # 2 tokens, text_eos, audio_bos
    with pytest.raises(omni.InvalidArgumentError, match="outside emb_text"):
        tts.conditions([tts.dims.text_vocab], hid[:1], False)
    with pytest.raises(omni.InvalidArgumentError):
        tts.forward(np.zeros((1, 7), np.float32))
    with pytest.raises(omni.InvalidArgumentError, match="context is full"):
        tts.forward(np.zeros((65, tts.dims.hidden), np.float32))
    with pytest.raises(omni.InvalidArgumentError):
        tts.code_embedding(tts.dims.audio_tokens)
    with pytest.raises(omni.ModelFileError, match="not a TTS file"):
        core.Tts(paths[1], "", "cpu", 1)


def _greedy(**kw):
    o = core.TtsSamplerOptions()
    o.temperature, o.repetition_penalty, o.window = 0.0, kw.get("penalty", 1.05), kw.get("window", 8)
    return core.TtsSampler(o)


def test_penalty_hits_exactly_the_window():
    s = _greedy()
    logits = np.full(20, -5.0, np.float32)
    logits[0], logits[1] = 2.0, 1.99
    assert s.sample(logits) == 0  # no penalty on the first token of a turn
    assert s.sample(logits) == 1  # 2.0 / 1.05 = 1.905 < 1.99
    other = np.full(20, -5.0, np.float32)
    for k in range(2, 9):  # 7 more distinct codes: code 0 is now 8 back, still inside the window
        other[:] = -5.0
        other[k] = 3.0
        assert s.sample(other) == k
    assert s.history[-8] == 1 and 0 not in s.history[-8:]  # code 0 has just left the window
    assert s.sample(logits) == 0  # code 0 is outside, code 1 (8 back) is inside: 1.99/1.05 < 2.0


def test_negative_logits_are_multiplied():
    s = _greedy()
    logits = np.full(10, -9.0, np.float32)
    logits[3], logits[4] = -1.0, -1.04
    assert s.sample(logits) == 3
    assert s.sample(logits) == 4  # -1.0 * 1.05 = -1.05 < -1.04


def test_multinomial_is_seeded_and_follows_the_distribution():
    def draws(seed, n=4000):
        o = core.TtsSamplerOptions()
        o.temperature, o.repetition_penalty, o.seed = 1.0, 1.0, seed
        s = core.TtsSampler(o)
        return [s.sample(np.array([0.0, np.log(3.0)], np.float32)) for _ in range(n)]

    a = draws(1)
    assert a == draws(1) and a != draws(2)
    assert 0.72 < np.mean(a) < 0.78  # p(code 1) = 3/4


def test_duplex_nucleus_keeps_at_least_three():
    o = core.TtsSamplerOptions()
    o.temperature, o.repetition_penalty, o.top_k, o.seed = 1.0, 1.0, 1, 3
    s = core.TtsSampler(o)
    logits = np.array([0.1, 0.5, 0.4], np.float32)
    # top-k 1 keeps 3 codes anyway (min_keep 3, as llama.cpp-omni's duplex sampler) -> still random
    seen = {s.sample(logits) for _ in range(200)}
    assert seen <= {0, 1, 2} and 1 in seen


@pytest.mark.parametrize("top_p_first, kept", [(False, 22), (True, 25)])
def test_nucleus_order_of_each_rule(top_p_first, kept):
    """25 (nearly) equally likely codes hold half the mass, 75 others the rest. llama.cpp-omni's chain takes
    the top-k, then a nucleus of 0.85 of *their* mass: 22 of them. The reference takes a nucleus of
    0.85 of all the mass (every one of the 25 and more), then its top-k: all 25."""
    o = core.TtsSamplerOptions()
    o.temperature, o.repetition_penalty, o.top_k, o.top_p, o.seed = 1.0, 1.0, 25, 0.85, 7
    o.top_p_first = top_p_first
    s = core.TtsSampler(o)
    top = np.log(0.5 / 25) - 1e-3 * np.arange(25)  # a defined order among them
    logits = np.concatenate([top, np.full(75, np.log(0.5 / 75))]).astype(np.float32)
    seen = {s.sample(logits) for _ in range(3000)}
    assert seen == set(range(kept))
