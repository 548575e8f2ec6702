"""Options cross into the core once: each module's to_native() fills the core's options struct
from its Python config field by field, and the two sides have one set of defaults."""

from dataclasses import fields

import pytest

from llama_omni_py._native import core
from llama_omni_py.config import LlmSampling, Token2WavConfig, TtsSampling
from llama_omni_py.modules import token2wav, tts
from llama_omni_py.modules.llm import model as llm_model

# (config class, core options struct, fields that only exist as resolved values on the core side)
PAIRS = [
    (LlmSampling, core.SamplingOptions, set()),
    (TtsSampling, core.TtsSamplerOptions, set()),
    # cache_policy None is "the session's fidelity"; on its own it resolves to the core's default
    (Token2WavConfig, core.Token2WavOptions, {"threads", "cpus", "cache_policy"}),
]


@pytest.mark.parametrize("config,native,resolved", PAIRS, ids=lambda x: getattr(x, "__name__", ""))
def test_one_set_of_defaults(config, native, resolved):
    ours, theirs = config(), native()
    shared = [f.name for f in fields(config) if hasattr(theirs, f.name) and f.name not in resolved]
    assert len(shared) >= 5
    for name in shared:
        assert getattr(theirs, name) == pytest.approx(getattr(ours, name)), name


def test_an_unset_cache_policy_is_the_core_default():
    assert Token2WavConfig().cache_policy is None
    assert token2wav.to_native(Token2WavConfig(), "cpu").cache_policy == core.Token2WavOptions().cache_policy
    assert token2wav.to_native(Token2WavConfig(cache_policy="reference"), "cpu").cache_policy == "reference"


def test_to_native_carries_every_field():
    sampling = LlmSampling(temperature=0.3, top_k=7, top_p=0.5, min_p=0.1, repeat_penalty=1.2, repeat_last_n=9)
    llm = llm_model.to_native(sampling, 5)
    assert (llm.temperature, llm.top_k, llm.top_p, llm.min_p, llm.repeat_penalty, llm.repeat_last_n, llm.seed) == (
        pytest.approx(0.3),
        7,
        pytest.approx(0.5),
        pytest.approx(0.1),
        pytest.approx(1.2),
        9,
        5,
    )
    sampling = TtsSampling(temperature=0.5, repetition_penalty=1.5, window=3, top_k=4, top_p=0.6, count_penalty=True)
    t = tts.to_native(sampling, 11)
    assert (t.window, t.top_k, t.count_penalty, t.seed) == (3, 4, True, 11)
    assert (t.temperature, t.repetition_penalty, t.top_p) == pytest.approx((0.5, 1.5, 0.6))
    c = Token2WavConfig(steps=7, threads=1, temperature=0.5, seed=3, cache_policy="reference", token2mel="graph")
    o = token2wav.to_native(c, "cpu")
    assert (o.device, o.steps, o.threads, o.cpus, o.seed, o.cache_policy, o.token2mel, o.bf16) == (
        "cpu",
        7,
        1,
        [],
        3,
        "reference",
        "graph",
        False,
    )
    assert o.temperature == pytest.approx(0.5)


def test_the_token2mel_default_is_the_cores():
    assert core.Token2WavOptions().token2mel == Token2WavConfig().token2mel
