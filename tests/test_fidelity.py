"""The fidelity switch: SessionConfig(fidelity=...) picks llama.cpp-omni's or the reference's rule
for every module at once, each module's own field wins over it, and each rule is checked on both
sides (llama.cpp-omni's restated here, the reference's against the PyTorch modules)."""

import dataclasses

import numpy as np
import pytest
from reference import apm as ref

import llama_omni_py as omni
from llama_omni_py import fidelity
from llama_omni_py.apm import AudioEncoder
from llama_omni_py.config import SessionConfig, Token2WavConfig, TtsSampling
from llama_omni_py.modelset import spec as ms


def test_default_is_llama_cpp_omni_and_reference_switches_every_rule():
    lco, reference = SessionConfig(), SessionConfig(fidelity="reference")
    assert lco.fidelity == "llama.cpp-omni"
    assert (lco.token2wav_config.cache_policy, lco.audio_front_end, lco.tts_sampling) == (
        "llama.cpp-omni",
        "100ms",
        TtsSampling(),
    )
    assert (reference.token2wav_config.cache_policy, reference.audio_front_end, reference.tts_sampling) == (
        "reference",
        "none",
        TtsSampling.reference(),
    )
    # the switch is read when the rules are, so replace() moves every rule with it
    moved = dataclasses.replace(lco, fidelity="reference")
    assert (moved.token2wav_config.cache_policy, moved.audio_front_end) == ("reference", "none")


def test_a_module_field_wins_over_the_switch():
    tts = TtsSampling(temperature=0.3)
    c = SessionConfig(
        fidelity="reference",
        audio_padding="100ms",
        tts=tts,
        token2wav=Token2WavConfig(cache_policy="llama.cpp-omni"),
    )
    assert (c.audio_front_end, c.tts_sampling, c.token2wav_config.cache_policy) == ("100ms", tts, "llama.cpp-omni")


@pytest.mark.parametrize(
    "make, field",
    [
        (lambda: SessionConfig(fidelity="llama.cpp"), "fidelity"),
        (lambda: SessionConfig(audio_padding="10ms"), "audio_padding"),
        (lambda: SessionConfig(tts={"temperature": 1}), "tts"),
        (lambda: SessionConfig(token2wav=Token2WavConfig(cache_policy="stepaudio")), "cache_policy"),
        (lambda: AudioEncoder("unused", padding="50ms"), "padding"),
    ],
)
def test_bad_rules_name_their_field(make, field):
    with pytest.raises(omni.ConfigError, match=field):
        make()


@pytest.mark.parametrize(
    "n, padded",
    [(0, 1600), (800, 1600), (1600, 1600), (1601, 3200), (47987, 48000), (48000, 48000)],
)
def test_llama_cpp_omni_pads_to_whole_100ms(n, padded):
    x = np.linspace(-0.5, 0.5, n, dtype=np.float32)
    y = fidelity.pad_audio(x, "100ms")
    assert y.size == padded and y.dtype == np.float32
    assert np.array_equal(y[:n], x) and not y[n:].any()
    assert fidelity.pad_audio(x, "none") is x


def _speech_like(n: int) -> np.ndarray:
    t = np.arange(n) / 16000
    rng = np.random.default_rng(3)
    return (0.3 * np.sin(2 * np.pi * 220 * t) * (1 + np.sin(2 * np.pi * 3 * t)) + 0.02 * rng.standard_normal(n)).astype(
        np.float32
    )


@pytest.fixture(scope="module")
def reference_apm(tiny_dir):
    return ref.ReferenceApm(str(tiny_dir / ms.APM_FILE))


def _reference(r, samples: np.ndarray) -> np.ndarray:
    return r.encode(r.log_mel(samples))


def test_audio_front_end_on_both_sides(tiny_dir, reference_apm):
    x = _speech_like(47987)  # 2.9992 s: off the 100 ms grid
    lco = AudioEncoder(tiny_dir, threads=2, exact=True, padding="100ms").encode(x)
    reference = AudioEncoder(tiny_dir, threads=2, exact=True, padding="none").encode(x)
    # llama.cpp-omni's rule, restated: 13 zero samples make 3.0 s before the log-mel
    want_lco = _reference(reference_apm, np.concatenate([x, np.zeros(13, np.float32)]))
    want_reference = _reference(reference_apm, x)
    scale = np.abs(want_reference).max()
    assert lco.shape == want_lco.shape == reference.shape == want_reference.shape == (30, want_lco.shape[1])
    assert np.abs(lco - want_lco).max() <= 1e-3 * scale
    assert np.abs(reference - want_reference).max() <= 1e-3 * scale
    assert np.abs(lco - reference).max() > 1e-2 * scale  # the rule matters off the grid
    on_grid = x[:32000]
    a = AudioEncoder(tiny_dir, threads=2, exact=True, padding="100ms").encode(on_grid)
    b = AudioEncoder(tiny_dir, threads=2, exact=True, padding="none").encode(on_grid)
    assert np.array_equal(a, b)  # and nothing on it


def test_a_session_follows_its_fidelity(tiny_dir):
    from llama_omni_py.demo import demo_config

    with omni.OmniSession(tiny_dir, "cpu", demo_config(threads=1, fidelity="reference")) as s:
        assert s.stages.token2wav.cache_policy == "reference"
        apm, _ = s.stages.inputs.encoders()
        assert apm.padding == "none"
    with omni.OmniSession(tiny_dir, "cpu", demo_config(threads=1)) as s:
        assert s.stages.token2wav.cache_policy == "llama.cpp-omni"
        assert s.stages.inputs.encoders()[0].padding == "100ms"
