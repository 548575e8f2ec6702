"""The audio encoder (our ggml graph) vs transformers' Whisper layers + torch projector/pooling,
the log-mel front end vs torch.stft, and long audio in clamp and window modes."""

import numpy as np
import pytest
from reference import apm as ref

import llama_omni_py as omni
from llama_omni_py._native import core
from llama_omni_py.modelset import spec as ms
from llama_omni_py.modules.apm import AudioEncoder


def _audio(seconds, seed=0):
    t = np.arange(int(seconds * 16000)) / 16000
    noise = np.random.default_rng(seed).standard_normal(t.size)
    return (0.3 * np.sin(2 * np.pi * 440 * t) + 0.05 * noise).astype(np.float32)


@pytest.fixture(scope="module")
def apm_path(tiny_dir):
    return str(tiny_dir / ms.APM_FILE)


def test_log_mel_matches_torch_stft(apm_path):
    r, a = ref.ReferenceApm(apm_path), core.Apm(apm_path, "cpu", 1)
    x = _audio(2.0)
    mo, mr = a.log_mel(x), r.log_mel(x)
    assert mo.shape == mr.shape == (80, 200)
    assert np.abs(mo - mr).max() <= 1e-4


@pytest.mark.parametrize("seconds", [1.0, 2.5, 7.0])
def test_encoder_matches_reference(apm_path, seconds):
    r, a = ref.ReferenceApm(apm_path), core.Apm(apm_path, "cpu", 2, True)
    mel = r.log_mel(_audio(seconds, seed=int(seconds)))
    got, want = a.encode_mel(mel), r.encode(mel)
    assert got.shape == want.shape == (int(seconds * 10), a.dims.llm_embd)
    assert np.abs(got - want).max() <= 1e-3 * np.abs(want).max()


def test_long_audio_clamp_and_window(tiny_dir):
    x = _audio(60.0)
    assert AudioEncoder(tiny_dir, mode="clamp").encode(x).shape[0] == 299
    w = AudioEncoder(tiny_dir, mode="window").encode(x)
    assert w.shape[0] == 600 and np.isfinite(w).all()


def test_bad_input(apm_path, tiny_dir):
    a = core.Apm(apm_path, "cpu", 1)
    with pytest.raises(omni.InvalidArgumentError):
        a.encode_mel(np.zeros((80, 3001 * 2), np.float32))  # over 30 s of positions
    with pytest.raises(omni.InvalidArgumentError):
        a.log_mel(np.zeros(10, np.float32))
    with pytest.raises(omni.ConfigError, match="mode"):
        AudioEncoder(tiny_dir, mode="stream")
    with pytest.raises(omni.ModelFileError, match="not an audio encoder"):
        core.Apm(str(tiny_dir / ms.VPM_FILE), "cpu", 1)
    with pytest.raises(omni.MediaError, match="NaN"):
        AudioEncoder(tiny_dir).encode(np.full(16000, np.nan, np.float32))


def test_streaming_chunks_match_block_causal_reference(apm_path):
    # 1 s chunks with the per-layer K/V history, as llama.cpp-omni streams them.
    r, a = ref.ReferenceApm(apm_path), core.Apm(apm_path, "cpu", 2, True)
    mels = [r.log_mel(_audio(1.0, seed=s)) for s in range(4)]
    want = r.encode_stream(mels)
    got = [a.encode_mel_streaming(m) for m in mels]
    assert a.stream_position == 4 * 50 and a.stream_resets == 0
    for g, w in zip(got, want):
        assert g.shape == w.shape == (10, a.dims.llm_embd)
        assert np.abs(g - w).max() <= 1e-3 * np.abs(w).max()
    # History matters: the 4th chunk alone differs from the 4th chunk after three others.
    a.reset_stream()
    alone = a.encode_mel_streaming(mels[3])
    assert np.abs(alone - got[3]).max() > 1e-3 * np.abs(got[3]).max()
    assert np.allclose(alone, a.encode_mel(mels[3]), atol=1e-5 * np.abs(alone).max())


def test_streaming_never_overflows_the_positions(apm_path):
    a = core.Apm(apm_path, "cpu", 1)
    mel = a.log_mel(_audio(1.0))
    outs = [a.encode_mel_streaming(mel) for _ in range(31)]  # 31 s through a 30 s table
    assert a.stream_resets == 1 and a.stream_position == 50
    assert all(o.shape == (10, a.dims.llm_embd) and np.isfinite(o).all() for o in outs)
    # After the reset the stream starts over: the 31st chunk equals the 1st.
    assert np.allclose(outs[30], outs[0], atol=1e-5 * np.abs(outs[0]).max())


def test_audio_encoder_live_chunks(tiny_dir):
    enc = AudioEncoder(tiny_dir, threads=1)
    x = _audio(3.0, seed=5)
    live = [enc.encode_chunk(x[i : i + 16000]) for i in range(0, x.size, 16000)]
    assert [c.shape[0] for c in live] == [10, 10, 10]
    enc.reset_stream()
    again = enc.encode_chunk(x[:16000])
    assert np.allclose(again, live[0], atol=1e-5 * np.abs(again).max())
    with pytest.raises(omni.MediaError):
        enc.encode_chunk(np.full(16000, np.nan, np.float32))


def test_streams_over_shared_weights_keep_their_own_history(tiny_dir):
    """An engine's slots share the encoder's weights; each live stream attends over its own past."""
    rng = np.random.default_rng(3)
    a_audio, b_audio = (rng.standard_normal(48000).astype(np.float32) * 0.1 for _ in range(2))
    alone = AudioEncoder(tiny_dir, "cpu")
    expect_a = [alone.encode_chunk(a_audio[i : i + 16000]) for i in range(0, 48000, 16000)]
    alone.reset_stream()
    expect_b = [alone.encode_chunk(b_audio[i : i + 16000]) for i in range(0, 48000, 16000)]
    first = AudioEncoder(tiny_dir, "cpu")
    second = first.new_stream()
    got_a, got_b = [], []
    for i in range(0, 48000, 16000):  # interleaved chunks of two streams
        got_a.append(first.encode_chunk(a_audio[i : i + 16000]))
        got_b.append(second.encode_chunk(b_audio[i : i + 16000]))
    for g, e in zip(got_a + got_b, expect_a + expect_b):
        np.testing.assert_array_equal(g, e)
    assert second.apm.stream_position == first.apm.stream_position > 0
    assert second.apm.stream_bytes > 0
