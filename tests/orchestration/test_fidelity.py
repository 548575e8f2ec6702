"""The fidelity switch: EngineConfig(fidelity=...) picks llama.cpp-omni's or the reference's rule
for every module at once, each module's own field wins over it, and each rule is checked on both
sides (llama.cpp-omni's restated here, the reference's against the PyTorch modules)."""

import dataclasses

import numpy as np
import pytest
from reference import apm as ref

import llama_omni_py as omni
from llama_omni_py import fidelity
from llama_omni_py.config import EngineConfig, ReplyConfig, Token2WavConfig, TtsSampling
from llama_omni_py.modelset import spec as ms
from llama_omni_py.modules.apm import AudioEncoder


def test_default_is_llama_cpp_omni_and_reference_switches_every_rule():
    lco, reference, reply = EngineConfig(), EngineConfig(fidelity="reference"), ReplyConfig()
    assert lco.fidelity == "llama.cpp-omni"
    assert (lco.token2wav_config.cache_policy, lco.audio_rule, reply.tts_sampling(lco.fidelity)) == (
        "llama.cpp-omni",
        "llama.cpp-omni",
        TtsSampling(),
    )
    rule = reply.tts_sampling(reference.fidelity)
    assert (reference.token2wav_config.cache_policy, reference.audio_rule, rule) == (
        "reference",
        "reference",
        TtsSampling.reference(),
    )
    # the switch is read when the rules are, so replace() moves every rule with it
    moved = dataclasses.replace(lco, fidelity="reference")
    assert (moved.token2wav_config.cache_policy, moved.audio_rule) == ("reference", "reference")


def test_a_module_field_wins_over_the_switch():
    tts = TtsSampling(temperature=0.3)
    c = EngineConfig(
        fidelity="reference",
        audio_fidelity="llama.cpp-omni",
        token2wav=Token2WavConfig(cache_policy="llama.cpp-omni"),
    )
    rule = ReplyConfig(tts=tts).tts_sampling(c.fidelity)
    assert (c.audio_rule, rule, c.token2wav_config.cache_policy) == ("llama.cpp-omni", tts, "llama.cpp-omni")


@pytest.mark.parametrize(
    "make, field",
    [
        (lambda: EngineConfig(fidelity="llama.cpp"), "fidelity"),
        (lambda: EngineConfig(audio_fidelity="whisper"), "audio_fidelity"),
        (lambda: ReplyConfig(tts={"temperature": 1}), "tts"),
        (lambda: EngineConfig(token2wav=Token2WavConfig(cache_policy="stepaudio")), "cache_policy"),
        (lambda: AudioEncoder("unused", fidelity="whisper"), "fidelity"),
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
    y = fidelity.pad_audio(x, "llama.cpp-omni")
    assert y.size == padded and y.dtype == np.float32
    assert np.array_equal(y[:n], x) and not y[n:].any()
    assert fidelity.pad_audio(x, "reference") is x


def _speech_like(n: int) -> np.ndarray:
    t = np.arange(n) / 16000
    rng = np.random.default_rng(3)
    return (0.3 * np.sin(2 * np.pi * 220 * t) * (1 + np.sin(2 * np.pi * 3 * t)) + 0.02 * rng.standard_normal(n)).astype(
        np.float32
    )


@pytest.fixture(scope="module")
def reference_apm(tiny_dir):
    return ref.ReferenceApm(str(tiny_dir / ms.APM_FILE))


@pytest.fixture(scope="module")
def reference_apm_tanh(tiny_dir):
    """The reference modules with llama.cpp-omni's GELU (the tanh approximation)."""
    return ref.ReferenceApm(str(tiny_dir / ms.APM_FILE), activation="gelu_pytorch_tanh")


def _reference(r, samples: np.ndarray) -> np.ndarray:
    return r.encode(r.log_mel(samples))


def _lco_log_mel(r, x: np.ndarray) -> np.ndarray:
    """llama.cpp-omni's front end, restated: 100 ms grid, 200 reflected samples before the start
    and 200 zeros after the end, n/160 frames, periodic Hann, power spectrum, the file's filters,
    log10 floored at 1e-10, then the clip's max - 8 floor and (x + 4) / 4."""
    x = fidelity.pad_audio(x, "llama.cpp-omni").astype(np.float64)
    padded = np.concatenate([x[1:201][::-1], x, np.zeros(200)])
    frames = x.size // 160
    window = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(400) / 400)
    idx = np.arange(frames)[:, None] * 160 + np.arange(400)[None, :]
    power = np.abs(np.fft.rfft(padded[idx] * window, axis=1)) ** 2
    log = np.log10(np.maximum(r.filters.double().numpy() @ power.T, 1e-10))
    return ((np.maximum(log, log.max() - 8.0) + 4.0) / 4.0).astype(np.float32)


def test_audio_encoder_rules_on_both_sides(tiny_dir, reference_apm, reference_apm_tanh):
    x = _speech_like(47987)  # 2.9992 s: off the 100 ms grid
    lco = AudioEncoder(tiny_dir, threads=2, exact=True, fidelity="llama.cpp-omni")
    reference = AudioEncoder(tiny_dir, threads=2, exact=True, fidelity="reference")
    want_mel = _lco_log_mel(reference_apm, x)
    assert np.abs(lco._log_mel(x) - want_mel).max() <= 1e-4
    want_lco, want_reference = reference_apm_tanh.encode(want_mel), _reference(reference_apm, x)
    got_lco, got_reference = lco.encode(x), reference.encode(x)
    scale = np.abs(want_reference).max()
    assert got_lco.shape == want_lco.shape == got_reference.shape == want_reference.shape == (30, want_lco.shape[1])
    assert np.abs(got_lco - want_lco).max() <= 1e-3 * scale
    assert np.abs(got_reference - want_reference).max() <= 1e-3 * scale
    assert np.abs(got_lco - got_reference).max() > 1e-2 * scale  # the rule matters off the grid
    assert np.abs(lco._log_mel(x[:32000]) - reference._log_mel(x[:32000]))[:, :-1].max() == 0  # all but the last frame


def test_a_session_follows_its_fidelity(tiny_dir):
    from llama_omni_py.modelset.random_set import random_set_config

    engine, reply = random_set_config(EngineConfig(threads=1, fidelity="reference"))
    with omni.OmniSession(tiny_dir, "cpu", engine, reply=reply) as s:
        assert s.stages.token2wav.cache_policy == "reference"
        apm, _ = s.stages.inputs.encoders()
        assert apm.fidelity == "reference" and not apm.apm.tanh_gelu
    engine, reply = random_set_config(EngineConfig(threads=1))
    with omni.OmniSession(tiny_dir, "cpu", engine, reply=reply) as s:
        assert s.stages.token2wav.cache_policy == "llama.cpp-omni"
        assert s.stages.inputs.encoders()[0].apm.tanh_gelu
