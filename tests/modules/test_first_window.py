"""Token2WavConfig.first_window_codes: the stream's first window waits for fewer speech codes, so
the first audio comes sooner; every later window, the total audio and the default schedule stay
as they were."""

import numpy as np
import pytest

import llama_omni_py as omni
from llama_omni_py import Token2Wav, Token2WavConfig
from llama_omni_py.errors import ConfigError, InvalidArgumentError
from llama_omni_py.modules import token2wav

CODES = np.random.default_rng(3).integers(0, 6561, 110).astype(np.int32)


def _stream(tiny_dir, first, policy="llama.cpp-omni", **options):
    cfg = Token2WavConfig(threads=1, first_window_codes=first, cache_policy=policy, **options)
    t2w = Token2Wav(tiny_dir, "cpu", cfg)
    parts = [t2w.push(CODES[:first])]
    at = first
    while CODES.size - at >= 25:
        parts.append(t2w.push(CODES[at : at + 25]))
        at += 25
    parts.append(t2w.push(CODES[at:], final=True))
    return parts


@pytest.mark.parametrize("policy", ["llama.cpp-omni", "reference"])
def test_first_audio_after_fewer_codes(tiny_dir, policy):
    default, early = _stream(tiny_dir, 25, policy), _stream(tiny_dir, 8, policy)
    # default: the first push of 25 codes gives the first window's 20160 samples; with 8 codes
    # the first window (3 silence tokens + 5 codes voiced, 3 codes of look-ahead) gives 3840
    assert default[0].size == 20160 and early[0].size == 8 * 960 - 3840
    assert all(p.size == 24000 for p in early[1:-1])  # later windows: a second each, as before
    total = sum(p.size for p in early)
    assert total == sum(p.size for p in default) == (CODES.size + 3) * 960
    a, b = np.concatenate(early), np.concatenate(default)
    assert np.isfinite(a).all() and not np.array_equal(a, b)  # a different first window, a stream that differs
    assert np.linalg.norm(a - b) / np.linalg.norm(b) < 1.0


def test_default_schedule_is_unchanged(tiny_dir):
    explicit = np.concatenate(_stream(tiny_dir, 25))
    t2w = Token2Wav(tiny_dir, "cpu", Token2WavConfig(threads=1))
    plain = [t2w.push(CODES[i : i + 25]) for i in range(0, 100, 25)] + [t2w.push(CODES[100:], final=True)]
    plain = np.concatenate(plain)
    assert np.array_equal(explicit, plain)


def test_the_pipeline_hands_the_first_codes_on_early(tiny_dir):
    def first_audio(first):
        cfg = omni.EngineConfig(threads=1, token2wav=Token2WavConfig(threads=1, first_window_codes=first))
        with omni.OmniSession(tiny_dir, "cpu", cfg, reply=omni.ReplyConfig(max_new_tokens=30)) as s:
            chunks = [c for c in s.stream("hello there, how are you today?", seed=1) if c.audio.size]
        return chunks[0].audio.size, sum(c.audio.size for c in chunks)

    (first8, total8), (first25, total25) = first_audio(8), first_audio(25)
    assert (first8, first25) == (8 * 960 - 3840, 20160)
    assert total8 == total25  # the same codes, the same amount of audio


@pytest.mark.parametrize("value", [4, 26, 0, "8", 8.0])
def test_out_of_range_is_refused(value):
    with pytest.raises(ConfigError) as e:
        Token2WavConfig(first_window_codes=value)
    assert e.value.field == "first_window_codes"


def test_the_core_refuses_it_too(tiny_dir):
    from llama_omni_py._native import core

    opts = token2wav.to_native(Token2WavConfig(threads=1), "cpu")
    opts.first_window_codes = 30
    with pytest.raises(InvalidArgumentError):
        core.Token2Wav(str(tiny_dir / "token2wav-gguf"), opts)
