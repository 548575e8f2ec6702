"""The LLM runner over libllama: parity with transformers Qwen3 on the same F32 random weights,
embedding prefill, decode steps with hidden states, sampling and KV management."""

import numpy as np
import pytest
import torch  # reference dependency, installed by scripts/install-reference.sh
from reference import llm as ref

import llama_omni_py as omni
from llama_omni_py._native import core

PROMPT = "<|im_start|>user\nhello world, the quick brown fox<|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture(scope="module")
def f32_llm(tmp_path_factory):
    d = tmp_path_factory.mktemp("f32")
    omni.make_models(d, "tiny", only=["llm"], llm_dtype="f32")
    path = str(d / "MiniCPM-o-4_5-F32.gguf")
    return path, core.LlmModel(path, "cpu")


def _rel(a, b):
    return float(np.abs(a - b).max() / np.abs(b).max())


def test_logits_and_hidden_match_transformers(f32_llm):
    path, model = f32_llm
    llm = core.Llm(model, n_ctx=256, n_batch=64, threads=2, kv_f32=True)
    toks = model.tokenize(PROMPT, True)
    llm.eval_tokens(toks, all_outputs=True)
    with torch.inference_mode():
        out = ref.build_qwen3(path)(torch.tensor([toks]), output_hidden_states=True)
    for i in range(len(toks)):
        assert _rel(llm.logits(i), out.logits[0, i].numpy()) <= 1e-3, i
        assert _rel(llm.hidden(i), out.hidden_states[-1][0, i].numpy()) <= 1e-3, i  # after the final norm
    assert llm.n_past == len(toks)


def test_embedding_prefill_equals_token_prefill(f32_llm):
    path, model = f32_llm
    toks = model.tokenize(PROMPT, True)
    emb = np.array(core.GgufFile(path).read("token_embd.weight"))[toks]
    a = core.Llm(model, 256, 64, 1, True)
    a.eval_tokens(toks)
    b = core.Llm(model, 256, 64, 1, True)
    b.eval_embeddings(emb.astype(np.float32))
    np.testing.assert_allclose(a.logits(), b.logits(), rtol=0, atol=1e-5)
    np.testing.assert_allclose(a.hidden(), b.hidden(), rtol=0, atol=1e-5)


def test_decode_steps_greedy_and_seeded(f32_llm):
    _, model = f32_llm
    toks = model.tokenize(PROMPT, True)

    def run(temperature, seed, n=8):
        llm = core.Llm(model, 256, 64, 1, True)
        s = core.SamplingOptions()
        s.temperature, s.seed = temperature, seed
        llm.set_sampling(s)
        llm.eval_tokens(toks)
        first_logits = llm.logits()
        out = [llm.sample()]
        hiddens = []
        for _ in range(n - 1):
            nxt, h = llm.decode_step(out[-1])
            hiddens.append(h)
            out.append(nxt)
        return out, first_logits, hiddens

    greedy, logits, hiddens = run(0.0, 0)
    assert greedy[0] == int(np.argmax(logits))
    assert len(hiddens) == 7 and hiddens[0].shape == (model.info.n_embd,)
    assert run(0.8, 7)[0] == run(0.8, 7)[0]  # same seed, same tokens
    assert run(0.8, 7)[0] != run(0.8, 8)[0] or run(0.8, 9)[0] != run(0.8, 7)[0]


def test_keep_rewinds_the_kv_cache(f32_llm):
    _, model = f32_llm
    sys_toks = model.tokenize("<|im_start|>system\nYou are helpful.<|im_end|>\n", True)
    turn = model.tokenize("<|im_start|>user\nhi<|im_end|>\n", True)
    llm = core.Llm(model, 256, 64, 1, True)
    llm.eval_tokens(sys_toks)
    n_keep = llm.n_past
    llm.eval_tokens(turn)
    first = llm.logits()
    llm.eval_tokens(model.tokenize("more text here", True))
    llm.keep(n_keep)
    assert llm.n_past == n_keep
    llm.eval_tokens(turn)
    np.testing.assert_allclose(llm.logits(), first, rtol=0, atol=1e-5)


def test_bad_input(f32_llm, tiny_dir):
    _, model = f32_llm
    llm = core.Llm(model, 32, 16, 1)
    assert llm.n_ctx >= 32  # libllama may round the context up
    with pytest.raises(omni.InvalidArgumentError, match="context is full"):
        llm.eval_tokens([5] * (llm.n_ctx + 1))
    assert llm.n_past == 0  # nothing was evaluated
    with pytest.raises(omni.InvalidArgumentError, match="outside the vocabulary"):
        llm.eval_tokens([model.info.n_vocab + 5])
    with pytest.raises(omni.InvalidArgumentError, match="evaluate something first"):
        core.Llm(model, 32, 16, 1).sample()
    with pytest.raises(omni.InvalidArgumentError):
        core.Llm(model, 8, 16, 1)
    # The default (F16) tiny LLM runs through the same runner.
    f16 = core.LlmModel(str(tiny_dir / "MiniCPM-o-4_5-F16.gguf"), "cpu")
    l16 = core.Llm(f16, 64, 16, 1)
    l16.eval_tokens(f16.tokenize("hello", True))
    assert np.isfinite(l16.logits()).all()


def test_slide_keeps_the_system_prompt_and_frees_room(f32_llm):
    _, model = f32_llm
    llm = core.Llm(model, 256, 64, 1, True)
    system = model.tokenize("<|im_start|>system\nYou are helpful.<|im_end|>\n", True)
    llm.eval_tokens(system)
    n_keep = llm.n_past
    filler = [7] * (llm.n_ctx - n_keep - 4)
    llm.eval_tokens(filler)
    with pytest.raises(omni.InvalidArgumentError, match="context is full"):
        llm.eval_tokens([7] * 8)
    llm.slide(n_keep, len(filler) // 2)
    assert llm.n_past == n_keep + len(filler) - len(filler) // 2
    llm.eval_tokens([7] * 8)  # room again
    assert np.isfinite(llm.logits()).all()
    with pytest.raises(omni.InvalidArgumentError):
        llm.slide(0, llm.n_past + 1)
