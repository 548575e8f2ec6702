"""The rules where llama.cpp-omni's behaviour is not the arithmetic of ours (docs/fidelity.md,
"Edge cases"), each restated here: its audio encoder's history positions (chunk-count), its
history carried from clip to clip, its decoder's linear resampler and its stb_image JPEG decoder."""

import sys

import numpy as np
import pytest
import soundfile as sf
from reference import apm as ref

import llama_omni_py as omni
from llama_omni_py import fidelity, media
from llama_omni_py._native import core
from llama_omni_py.config import EngineConfig
from llama_omni_py.content import Audio
from llama_omni_py.modelset import spec as ms
from llama_omni_py.modules.apm import AudioEncoder
from llama_omni_py.orchestration.inputs import InputEncoder, Request
from llama_omni_py.vision import VisionConfig


def _speech(seconds: float, seed: int) -> np.ndarray:
    t = np.arange(int(seconds * 16000)) / 16000
    f0 = 140 + 40 * np.sin(2 * np.pi * 0.7 * t + seed)
    x = sum(np.sin(2 * np.pi * k * np.cumsum(f0) / 16000) / k for k in range(1, 6))
    noise = 0.01 * np.random.default_rng(seed).standard_normal(t.size)
    return (0.2 * x * (1 + np.sin(2 * np.pi * 3 * t)) + noise).astype(np.float32)


@pytest.fixture(scope="module")
def apm_path(tiny_dir):
    return str(tiny_dir / ms.APM_FILE)


def test_both_fidelities_keep_our_history_rules_and_split_the_others():
    lco, reference = EngineConfig().audio_rules, EngineConfig(fidelity="reference").audio_rules
    assert (lco["audio_history"], lco["audio_positions"]) == ("clip", "consecutive")
    assert (reference["audio_history"], reference["audio_positions"]) == ("clip", "consecutive")
    assert (lco["resampler"], reference["resampler"]) == ("linear", "band-limited")
    assert (VisionConfig().jpeg, VisionConfig(rules="reference").jpeg) == ("stb_image", "pillow")
    chosen = EngineConfig(
        fidelity="reference", audio_history="carried", audio_positions="chunk-count", audio_resampler="linear"
    ).audio_rules
    assert chosen == {
        "audio_fidelity": "reference",
        "resampler": "linear",
        "audio_history": "carried",
        "audio_positions": "chunk-count",
    }
    assert VisionConfig(rules="reference", jpeg_decoder="stb_image").jpeg == "stb_image"


@pytest.mark.parametrize(
    "make, field",
    [
        (lambda: EngineConfig(audio_history="kept"), "audio_history"),
        (lambda: EngineConfig(audio_positions="first"), "audio_positions"),
        (lambda: EngineConfig(audio_resampler="sinc"), "audio_resampler"),
        (lambda: VisionConfig(jpeg_decoder="libjpeg"), "jpeg_decoder"),
        (lambda: AudioEncoder("unused", stream_positions="first"), "stream_positions"),
        (lambda: AudioEncoder("unused", resampler="sinc"), "resampler"),
    ],
)
def test_bad_rule_names_their_field(make, field):
    with pytest.raises(omni.ConfigError, match=field):
        make()


# -- the encoder's history positions ------------------------------------------------------------


@pytest.mark.parametrize("chunk_count", [True, False])
def test_stream_positions_restate_its_rule(apm_path, chunk_count):
    # 1 s, 0.6 s, 1 s, 0.4 s = 50, 30, 50, 20 positions. chunk-count writes them at 0, 30 (over
    # the first chunk's rows 30..50), 100 (rows 60..100 never written: zeros) and 60.
    r, a = ref.ReferenceApm(apm_path), core.Apm(apm_path, "cpu", 2, True)
    mels = [r.log_mel(_speech(s, seed=i)) for i, s in enumerate((1.0, 0.6, 1.0, 0.4))]
    want = r.encode_cached(mels, chunk_count)
    got = [a.encode_mel_streaming(m, chunk_count) for m in mels]
    assert a.stream_position == (80 if chunk_count else 150)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        assert np.abs(g - w).max() <= 1e-3 * np.abs(w).max()
    # equal chunks are the same under both rules; unequal ones are not
    b = core.Apm(apm_path, "cpu", 2, True)
    other = [b.encode_mel_streaming(m, not chunk_count) for m in mels]
    assert np.allclose(other[0], got[0], atol=1e-6 * np.abs(got[0]).max())
    assert np.abs(other[2] - got[2]).max() > 1e-2 * np.abs(got[2]).max()


def test_chunk_count_clears_when_the_next_chunk_would_not_fit(apm_path):
    a = core.Apm(apm_path, "cpu", 1)
    one, ten = (a.log_mel(_speech(s, seed=3)) for s in (1.0, 10.0))
    for mel in (one, ten, ten):  # k = 0, 1, 2: 10 s chunks fit 3 times (1500 // 500)
        a.encode_mel_streaming(mel, True)
    assert (a.stream_position, a.stream_resets) == (1500, 0)
    a.encode_mel_streaming(one, True)  # k = 3 of 1 s: at 150
    assert (a.stream_position, a.stream_resets) == (200, 0)
    a.encode_mel_streaming(ten, True)  # k = 4 >= 3: cleared, then at 0
    assert (a.stream_position, a.stream_resets) == (500, 1)
    b = core.Apm(apm_path, "cpu", 1)
    for mel in (one, ten, ten):
        b.encode_mel_streaming(mel)
    assert (b.stream_position, b.stream_resets) == (1050, 0)


def test_rows_from_before_a_reset_read_as_zeros(apm_path):
    used, fresh = core.Apm(apm_path, "cpu", 1), core.Apm(apm_path, "cpu", 1)
    mels = [used.log_mel(_speech(s, seed=9)) for s in (1.0, 1.0, 1.0)]
    for m in mels:
        used.encode_mel_streaming(m, True)
    used.reset_stream()
    short, long = used.log_mel(_speech(0.6, seed=4)), used.log_mel(_speech(1.0, seed=5))
    got = [used.encode_mel_streaming(m, True) for m in (short, long)]  # the second reads rows 30..50
    want = [fresh.encode_mel_streaming(m, True) for m in (short, long)]
    for g, w in zip(got, want):
        assert np.array_equal(g, w)


def _tone(seconds: float) -> np.ndarray:
    return (0.5 * np.sin(2 * np.pi * 440 * np.arange(int(seconds * 16000)) / 16000)).astype(np.float32)


def test_llama_cpp_omni_convolutions_read_f16_input(apm_path, tiny_dir):
    r = ref.ReferenceApm(apm_path, activation="gelu_pytorch_tanh")
    a = core.Apm(apm_path, "cpu", 2, True)
    a.tanh_gelu = a.f16_conv_input = True
    mel = r.log_mel(_tone(1.0))
    want = r.encode_cached([mel], False, f16_conv_input=True)[0]
    got = a.encode_mel(mel)
    assert np.abs(got - want).max() <= 1e-3 * np.abs(want).max()
    assert np.array_equal(got, a.encode_mel(mel.astype(np.float16).astype(np.float32)))
    a.f16_conv_input = False
    assert not np.array_equal(got, a.encode_mel(mel))
    lco, reference = AudioEncoder(tiny_dir), AudioEncoder(tiny_dir, fidelity="reference")
    assert (lco.apm.f16_conv_input, reference.apm.f16_conv_input) == (True, False)


# -- the history carried from clip to clip ------------------------------------------------------


def test_carried_history_runs_a_requests_clips_through_one_stream(tiny_dir):
    voice, earlier, question = _speech(3.0, 1), _speech(1.2, 2), _speech(2.5, 3)
    carried = InputEncoder(tiny_dir, "cpu", 1, "clamp", audio_history="carried", audio_positions="chunk-count")
    req = Request((Audio(question),), ref_audio=voice, history=(("user", (Audio(earlier),)), ("assistant", "Yes.")))
    media_ = carried.encode(req)
    stream = AudioEncoder(tiny_dir, threads=1, stream_positions="chunk-count")
    want = [stream.encode_chunk(x) for x in (voice, earlier, question)]  # in prompt order
    assert np.array_equal(media_.ref_audio, want[0])
    assert np.array_equal(media_.history[0][1].parts[0][1], want[1])
    assert np.array_equal(media_.user.parts[0][1], want[2])
    # every request starts from an empty history: the same request encodes the same
    assert np.array_equal(carried.encode(req).user.parts[0][1], want[2])
    # per clip (both fidelities' default) the question is encoded on its own
    alone = InputEncoder(tiny_dir, "cpu", 1, "clamp").encode(req).user.parts[0][1]
    assert np.array_equal(alone, AudioEncoder(tiny_dir, threads=1).encode(question))
    assert np.abs(alone - want[2]).max() > 1e-2 * np.abs(alone).max()


# -- the decoder's linear resampler -------------------------------------------------------------


def _restated_linear(x: np.ndarray, rate_in: int, rate_out: int) -> np.ndarray:
    """llama.cpp-omni's decoder, restated: rates reduced by their gcd; a 4th-order Butterworth
    (two RBJ low-pass biquads, Q = 1/(2cos(pi/8)) and 1/(2cos(3pi/8))) at min(rates)/2 of
    max(rates), over the input going down and the output going up; output k interpolates the
    input at k * in/out - 1 (one sample from a zero before the first)."""
    from math import cos, gcd, pi, sin

    g = gcd(rate_in, rate_out)
    i_, o_ = rate_in // g, rate_out // g
    sections = []
    for q in (1 / (2 * cos(pi / 8)), 1 / (2 * cos(3 * pi / 8))):
        w = 2 * pi * (min(i_, o_) / 2) / max(i_, o_)
        a, c = sin(w) / (2 * q), cos(w)
        sections.append(
            [
                (1 - c) / 2 / (1 + a),
                (1 - c) / (1 + a),
                (1 - c) / 2 / (1 + a),
                -2 * c / (1 + a),
                (1 - a) / (1 + a),
                0.0,
                0.0,
            ]
        )

    def lpf(v):
        for s in sections:
            b0, b1, b2, a1, a2, r1, r2 = s
            y = b0 * v + r1
            s[5], s[6] = b1 * v - a1 * y + r2, b2 * v - a2 * y
            v = y
        return v

    n_out = len(x) * rate_out // rate_in
    if n_out * (rate_in % rate_out) + n_out * (rate_in // rate_out) // rate_out <= len(x):
        n_out += 1
    filtered = [lpf(float(v)) for v in x] if i_ > o_ else [float(v) for v in x]
    out = np.zeros(n_out)
    for k in range(n_out):
        loaded = 1 + k * i_ // o_  # input samples read before output k
        if loaded > len(x):
            break
        prev = filtered[loaded - 2] if loaded >= 2 else 0.0
        frac = (k * i_ % o_) / o_
        out[k] = prev + (filtered[loaded - 1] - prev) * frac
    if i_ < o_:
        for s in sections:
            s[5] = s[6] = 0.0
        last = k if loaded > len(x) else n_out
        out[:last] = [lpf(v) for v in out[:last]]
    return out


@pytest.mark.parametrize("rate", [44100, 22050, 8000])
def test_linear_resampler_restates_its_decoder(rate):
    x = _speech(0.2, seed=rate)[: int(0.2 * rate)] * 2
    got = core.resample_linear(x, rate, 16000)
    want = _restated_linear(x, rate, 16000)
    assert got.shape == want.shape
    assert np.abs(got - want).max() <= 1e-5
    assert got[0] == 0.0  # one input sample late, from a zero
    # a 1 kHz tone keeps its level through the low-pass; the rate is right
    t = np.arange(rate) / rate
    y = core.resample_linear(np.sin(2 * np.pi * 1000 * t).astype(np.float32), rate, 16000)
    assert abs(y.size - 16000) <= 1
    assert 0.95 < np.abs(y[2000:-2000]).max() < 1.05
    spectrum = np.abs(np.fft.rfft(y[:16000]))
    assert np.argmax(spectrum) == 1000


def test_audio_files_follow_the_resampler_rule(tiny_dir, tmp_path):
    x = _speech(1.0, seed=6)
    stereo = np.stack([x, 0.5 * x], axis=1)
    path = tmp_path / "a.wav"
    sf.write(path, stereo, 44100, subtype="FLOAT")
    mono = stereo.mean(axis=1).astype(np.float32)
    assert np.array_equal(media.load_audio(path, resampler="linear"), core.resample_linear(mono, 44100, 16000))
    assert np.array_equal(media.load_audio(path), media.resample(mono, 44100))
    lco, reference = AudioEncoder(tiny_dir), AudioEncoder(tiny_dir, fidelity="reference")
    assert (lco.resampler, reference.resampler, lco.new_stream().resampler) == ("linear", "band-limited", "linear")
    assert np.array_equal(lco.encode(path), lco.encode(core.resample_linear(mono, 44100, 16000)))


# -- JPEG decoding ------------------------------------------------------------------------------


def _picture(tmp_path):
    from PIL import Image

    y, x = np.mgrid[0:120, 0:160]
    rgb = np.stack([x * 1.5, y * 2.0, 128 + 100 * np.sin((x + y) / 5.0)], axis=-1).clip(0, 255).astype(np.uint8)
    Image.fromarray(rgb).save(tmp_path / "p.jpg", quality=85)
    Image.fromarray(rgb).save(tmp_path / "p.png")
    return tmp_path / "p.jpg", tmp_path / "p.png"


def test_jpeg_decoder_rule(tmp_path):
    libstb = pytest.importorskip("libstb")
    from PIL import Image

    jpg, png = _picture(tmp_path)
    stb = media.load_frame(jpg.read_bytes(), jpeg_decoder="stb_image")
    pil = media.load_frame(jpg, jpeg_decoder="pillow")
    assert np.array_equal(stb, libstb.Image.open(str(jpg), channels=3).numpy().reshape(stb.shape))
    assert np.array_equal(pil, np.asarray(Image.open(jpg).convert("RGB")))
    diff = np.abs(stb.astype(int) - pil.astype(int))
    assert 0 < diff.max() <= 8  # two decoders of one file: rounding, not content
    assert np.array_equal(media.load_frame(png, jpeg_decoder="stb_image"), media.load_frame(png))


def test_jpeg_decoder_without_libstb_says_what_to_do(tmp_path, monkeypatch):
    jpg, _ = _picture(tmp_path)
    monkeypatch.setitem(sys.modules, "libstb", None)
    with pytest.raises(omni.MediaError, match="libstb"):
        media.load_frame(jpg, jpeg_decoder="stb_image")


def test_fidelity_module_lists_the_rules():
    assert fidelity.AUDIO_HISTORIES == ("clip", "carried")
    assert fidelity.AUDIO_POSITIONS == ("consecutive", "chunk-count")
    assert set(fidelity.RESAMPLERS) == {d.resampler for d in fidelity.DEFAULTS.values()}
