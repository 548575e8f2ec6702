"""Seed-TTS metrics (llama_omni_py.eval.seedtts): WER with hand-computed answers, the ASR
adapters on tiny local models, and SIM: the official model's names, shapes and hidden states
against s3prl's WavLM, its load report and scores, and the proxy."""

from __future__ import annotations

import ast
import string
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch
from seedtts_models import (
    HIDDEN,
    LAYERS,
    PARAFORMER_TOKENS,
    SR,
    head_state,
    paraformer_folder,
    proxy_folder,
    s3prl_cfg,
    s3prl_wavlm,
    save_finetune,
    save_s3prl,
    tone,
    transformers_wavlm_folder,
    whisper_folder,
)

from llama_omni_py.errors import (
    ConfigError,
    EmptyTranscriptError,
    InvalidArgumentError,
    MediaError,
    MissingDependencyError,
    ModelFileError,
)
from llama_omni_py.eval import seedtts as st
from llama_omni_py.eval.seedtts.wavlm import config_from_s3prl, map_state_dict

# ---- WER -------------------------------------------------------------------------------------


def test_punctuation_is_zhon_and_ascii_without_the_apostrophe():
    p = st.punctuation()
    assert "'" not in p
    assert set(string.punctuation) - {"'"} <= set(p)
    for c in "，。！？、；：“”‘’（）《》【】…—\u3000\uff0e":
        assert c in p, hex(ord(c))


def test_normalisation_en_and_zh():
    # punctuation gone, one double-space pass (three spaces leave two), lower case, apostrophe kept
    assert st.normalize("Hello, World!   It's ME.", "en") == "hello world  it's me"
    # every character a token, spaces included
    assert st.normalize("你好，世界！", "zh") == "你 好 世 界"
    assert st.normalize("你好 ab", "zh") == "你 好   a b"
    with pytest.raises(ConfigError, match="lang"):
        st.normalize("x", "fr")


def test_english_wer_by_hand():
    # the cat sat on the mat / the cat sit on mat: 1 substitution, 1 deletion over 6 words
    u = st.score_utterance("The cat sat on the mat.", "the cat sit on mat", "en", key="u1.wav")
    assert (u.substitutions, u.deletions, u.insertions, u.hits) == (1, 1, 0, 4)
    assert u.wer == pytest.approx(2 / 6) and u.ref_words == 6
    assert u.line("en") == f"u1.wav\t{2 / 6}\tThe cat sat on the mat.\tthe cat sit on mat\t0.0\t{1 / 6}\t{1 / 6}"
    # the apostrophe is kept, so "don't" and "dont" differ
    assert st.score_utterance("Don't stop!", "dont stop", "en").wer == 0.5
    # an empty hypothesis deletes every word
    empty = st.score_utterance("one two three", "", "en")
    assert (empty.wer, empty.deletions) == (1.0, 3)


def test_chinese_cer_converts_the_hypothesis_only():
    # traditional hypothesis -> simplified (妳->你, 間->间): 1 substitution (界/间) of 4 characters
    u = st.score_utterance("你好，世界！", "妳好世間", "zh")
    assert u.hypothesis == "你好世间" and u.wer == 0.25 and u.substitutions == 1
    # the reference is not converted: 這 (traditional) against 这 is a substitution
    assert st.score_utterance("這是", "这是", "zh").wer == 0.5
    # one inserted character over five
    ins = st.score_utterance("今天天气好", "今天天气很好", "zh")
    assert (ins.insertions, ins.wer) == (1, 0.2)


def test_per_line_ratios_count_empty_tokens_as_seed_tts_eval_does():
    # "你 好   a b".split(" ") has 6 entries (two empty), jiwer sees 4 words
    u = st.score_utterance("你好 ab", "你好 ac", "zh")
    assert u.wer == 0.25 and u.ref_words == 4
    assert u.ratios("zh") == (0.0, 0.0, 1 / 6)


def test_empty_reference_is_a_typed_error():
    for ref in ("", "   ", "。！"):
        with pytest.raises(EmptyTranscriptError) as e:
            st.score_utterance(ref, "anything", "zh", key="k.wav")
        assert e.value.key == "k.wav"
    with pytest.raises(InvalidArgumentError, match="no utterance"):
        _ = st.summarize_wer([], "en").wer


def test_mean_pooled_and_llama_cpp_normalized_differ_as_defined():
    en = st.summarize_wer(
        [st.score_utterance("a b c d e f g h i j", "a b c d e f g h i j", "en"), st.score_utterance("x", "y", "en")],
        "en",
    )
    assert en.wer == 0.5  # mean of 0 and 1
    assert en.wer_pooled == pytest.approx(1 / 11)  # 1 error over 11 words
    assert en.wer_normalized_lce == pytest.approx(1 / 11)  # raw spaced words weigh the same here
    zh = st.summarize_wer(
        [
            st.score_utterance("一二三四五六七八九十", "一二三四五六七八九十", "zh"),
            st.score_utterance("猫", "狗", "zh"),
        ],
        "zh",
    )
    assert zh.wer == 0.5 and zh.wer_pooled == pytest.approx(1 / 11)
    assert zh.wer_normalized_lce == 0.5  # unspaced Chinese: every weight is 1, so it is the mean
    assert en.report_lines() == [
        "WER: 50.0%",
        "WER_BELOW50: 0.0% ,WERS_NORM_BELOW50: 1, WER_BELOW50_RATIO: 0.5%",
        "WER_NORMALIZED: 9.091%",
        "WER_POOLED: 9.091%",
    ]


def test_below50():
    us = [st.score_utterance(r, h, "en") for r, h in (("a b", "a b"), ("a b c d", "a b c x"), ("a", "b"))]
    s = st.summarize_wer(us, "en")
    assert s.wer_below50 == 0.125 and len(s.below50) == 2
    assert s.as_dict()["n_below50"] == 2 and s.as_dict()["wer"] == pytest.approx(1.25 / 3)


def test_evaluate_wer_skips_missing_wavs_and_lists_them(tmp_path):
    class Echo:
        def transcribe(self, wav):
            if not Path(wav).exists():
                raise MediaError(f"audio file not found: {wav}")
            return "hello there"

    wav = tone(tmp_path / "a.wav", 200)
    s = st.evaluate_wer([(str(wav), "Hello there!"), (str(tmp_path / "gone.wav"), "x")], Echo(), "en")
    assert s.n == 1 and s.wer == 0.0 and s.skipped[0][0].endswith("gone.wav")
    with pytest.raises(MediaError):
        st.evaluate_wer([(str(tmp_path / "gone.wav"), "x")], Echo(), "en", skip_missing=False)


def test_missing_package_names_it_and_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "jiwer", None)
    with pytest.raises(MissingDependencyError) as e:
        st.score_utterance("a", "a", "en")
    assert e.value.package == "jiwer" and "pip install 'llama-omni-py[eval]'" in str(e.value)


def test_no_native_core_import_in_the_package():
    root = Path(st.__file__).parent.parent
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""] + [a.name for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            assert not any(n.split(".")[-1] in ("_native", "_core") for n in names), path


# ---- ASR adapters ----------------------------------------------------------------------------


def test_asr_specs():
    assert st.parse_spec("whisper:/m/whisper-large-v3") == ("whisper", "/m/whisper-large-v3")
    assert st.parse_spec("paraformer:/m/p") == ("paraformer", "/m/p")
    for bad in ("whisper", "whisper:", "vosk:/m", "/m/whisper"):
        with pytest.raises(ConfigError, match="asr"):
            st.parse_spec(bad)


@pytest.mark.parametrize("kind", ["whisper", "paraformer"])
def test_missing_model_folder_is_a_model_file_error(tmp_path, kind):
    with pytest.raises(ModelFileError, match="not found"):
        st.load_asr(f"{kind}:{tmp_path / 'nowhere'}")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelFileError, match="not a"):
        st.load_asr(f"{kind}:{tmp_path / 'empty'}")


@pytest.fixture(scope="module")
def whisper(tmp_path_factory):
    return st.load_asr(f"whisper:{whisper_folder(tmp_path_factory.mktemp('whisper'))}")


def test_whisper_forced_english_transcribe(whisper, tmp_path):
    tok = whisper.processor.tokenizer
    en, transcribe, notimestamps = tok.convert_tokens_to_ids(["<|en|>", "<|transcribe|>", "<|notimestamps|>"])
    assert whisper.forced_decoder_ids == [(1, en), (2, transcribe), (3, notimestamps)]
    # the tiny model always decodes "a"; special tokens do not reach the text
    assert whisper.transcribe(str(tone(tmp_path / "x.wav", 150))) == "a" * 8
    with pytest.raises(MediaError, match="not found"):
        whisper.transcribe(str(tmp_path / "missing.wav"))


def test_whisper_resamples_to_16k_first(whisper, tmp_path):
    import scipy.signal

    wav24 = tone(tmp_path / "x24.wav", 180, sr=24000)
    x, _ = sf.read(wav24)
    sf.write(tmp_path / "x16.wav", scipy.signal.resample(x, int(len(x) * 16000 / 24000)), SR, subtype="DOUBLE")
    a, b = whisper.features(str(wav24)), whisper.features(str(tmp_path / "x16.wav"))
    assert a.shape == (1, 80, 3000) and torch.equal(a, b)


@pytest.mark.slow
def test_paraformer_from_a_local_folder(tmp_path):
    asr = st.load_asr(f"paraformer:{paraformer_folder(tmp_path / 'para')}")
    text = asr.transcribe(str(tone(tmp_path / "z.wav", 200)))
    assert len(text) > 50 and set(text) == {"這"}  # one token per frame, as funasr returns it
    u = st.score_utterance("这" * len(text), text, "zh")
    assert u.hypothesis == "这" * len(text) and u.wer == 0.0  # the scorer simplifies it
    assert PARAFORMER_TOKENS.index("這") > 2
    with pytest.raises(MediaError):
        asr.transcribe(str(tmp_path / "missing.wav"))


def test_long_audio_windows():
    from llama_omni_py.eval.seedtts.asr import windows

    assert windows(10, 10) == [(0, 10)] and windows(10, 4) == [(0, 4), (4, 8), (8, 10)]
    assert windows(121, 60) == [(0, 41), (41, 82), (82, 121)]  # no short tail window
    assert windows(120, 60) == [(0, 60), (60, 120)]
    assert all(b - a <= 60 for a, b in windows(100_001, 60))


@pytest.mark.slow
def test_paraformer_takes_long_audio_in_windows(tmp_path, monkeypatch):
    """Up to the window a wav goes to funasr whole, by path; past it, window by window, each read
    and resampled as funasr reads the file, the texts joined by spaces."""
    from llama_omni_py.eval.seedtts import asr as asr_module

    asr = st.load_asr(f"paraformer:{paraformer_folder(tmp_path / 'para')}")
    calls = []
    generate = asr.model.generate
    monkeypatch.setattr(asr.model, "generate", lambda **kw: calls.append(kw) or generate(**kw))
    wav = tone(tmp_path / "long.wav", 200, seconds=1.2, sr=24000)
    whole = asr.transcribe(str(wav))
    assert [c["input"] for c in calls] == [str(wav)] and " " not in whole

    calls.clear()
    monkeypatch.setattr(asr_module, "PARAFORMER_WINDOW_S", 0.5)
    text = asr.transcribe(str(wav))
    assert [(c["input"].shape, c["fs"]) for c in calls] == [((9600,), 24000)] * 3  # three 0.4 s windows
    parts = text.split(" ")
    assert len(parts) == 3 and set("".join(parts)) == {"這"}
    # each window's text is what funasr gives that stretch of audio as a file of its own
    x, _ = sf.read(wav, dtype="float32")
    monkeypatch.setattr(asr_module, "PARAFORMER_WINDOW_S", 60.0)
    for i, part in enumerate(parts):
        sf.write(tmp_path / f"w{i}.wav", x[i * 9600 : (i + 1) * 9600], 24000, subtype="FLOAT")
        assert asr.transcribe(str(tmp_path / f"w{i}.wav")) == part


# ---- SIM: official model ---------------------------------------------------------------------


def official_head_shapes(feat_dim: int, num_features: int) -> dict:
    """The head's checkpoint names and shapes as the official model has them."""
    shapes = {"feature_weight": (num_features,)}

    def bn(prefix, n):
        shapes.update({f"{prefix}.{k}": (n,) for k in ("weight", "bias", "running_mean", "running_var")})
        shapes[f"{prefix}.num_batches_tracked"] = ()

    shapes["layer1.conv.weight"], shapes["layer1.conv.bias"] = (512, feat_dim, 5), (512,)
    bn("layer1.bn", 512)
    for b in (2, 3, 4):
        for c in ("Conv1dReluBn1", "Conv1dReluBn2"):
            shapes[f"layer{b}.{c}.conv.weight"], shapes[f"layer{b}.{c}.conv.bias"] = (512, 512, 1), (512,)
            bn(f"layer{b}.{c}.bn", 512)
        for i in range(7):
            shapes[f"layer{b}.Res2Conv1dReluBn.convs.{i}.weight"] = (64, 64, 3)
            shapes[f"layer{b}.Res2Conv1dReluBn.convs.{i}.bias"] = (64,)
            bn(f"layer{b}.Res2Conv1dReluBn.bns.{i}", 64)
        shapes.update({f"layer{b}.SE_Connect.linear1.weight": (128, 512), f"layer{b}.SE_Connect.linear1.bias": (128,)})
        shapes.update({f"layer{b}.SE_Connect.linear2.weight": (512, 128), f"layer{b}.SE_Connect.linear2.bias": (512,)})
    shapes.update({"conv.weight": (1536, 1536, 1), "conv.bias": (1536,)})
    shapes.update({"pooling.linear1.weight": (128, 1536, 1), "pooling.linear1.bias": (128,)})
    shapes.update({"pooling.linear2.weight": (1536, 128, 1), "pooling.linear2.bias": (1536,)})
    bn("bn", 3072)
    shapes.update({"linear.weight": (256, 3072), "linear.bias": (256,)})
    return shapes


def official_wavlm_shapes(layers, hidden, ffn, heads, conv, pos, groups) -> dict:
    """s3prl WavLM names and shapes (layer-norm conv blocks, no conv bias, gated relative bias)."""
    s = {"feature_extractor.conv_layers.0.0.weight": (conv, 1, 10)}
    for i in range(1, 7):
        s[f"feature_extractor.conv_layers.{i}.0.weight"] = (conv, conv, 3 if i < 5 else 2)
    for i in range(7):
        s[f"feature_extractor.conv_layers.{i}.2.1.weight"] = s[f"feature_extractor.conv_layers.{i}.2.1.bias"] = (conv,)
    s.update({"layer_norm.weight": (conv,), "layer_norm.bias": (conv,), "mask_emb": (hidden,)})
    s.update({"post_extract_proj.weight": (hidden, conv), "post_extract_proj.bias": (hidden,)})
    s.update(
        {"encoder.pos_conv.0.weight_g": (1, 1, pos), "encoder.pos_conv.0.weight_v": (hidden, hidden // groups, pos)}
    )
    s["encoder.pos_conv.0.bias"] = (hidden,)
    s["encoder.layers.0.self_attn.relative_attention_bias.weight"] = (320, heads)
    for i in range(layers):
        p = f"encoder.layers.{i}."
        for proj in "qkv":
            s[f"{p}self_attn.{proj}_proj.weight"], s[f"{p}self_attn.{proj}_proj.bias"] = (hidden, hidden), (hidden,)
        s[f"{p}self_attn.out_proj.weight"], s[f"{p}self_attn.out_proj.bias"] = (hidden, hidden), (hidden,)
        s[f"{p}self_attn.grep_linear.weight"], s[f"{p}self_attn.grep_linear.bias"] = (8, hidden // heads), (8,)
        s[f"{p}self_attn.grep_a"] = (1, heads, 1, 1)
        for ln in ("self_attn_layer_norm", "final_layer_norm"):
            s[f"{p}{ln}.weight"] = s[f"{p}{ln}.bias"] = (hidden,)
        s[f"{p}fc1.weight"], s[f"{p}fc1.bias"] = (ffn, hidden), (ffn,)
        s[f"{p}fc2.weight"], s[f"{p}fc2.bias"] = (hidden, ffn), (hidden,)
    s["encoder.layer_norm.weight"] = s["encoder.layer_norm.bias"] = (hidden,)
    return s


def shapes(state: dict) -> dict:
    return {k: tuple(v.shape) for k, v in state.items()}


def test_head_has_the_official_names_and_shapes():
    assert shapes(head_state(0)) == official_head_shapes(HIDDEN, LAYERS + 1)
    assert len(official_head_shapes(1024, 25)) == 222  # the official head: 222 tensors


def test_wavlm_names_are_s3prls_and_map_onto_transformers():
    expected = official_wavlm_shapes(LAYERS, HIDDEN, 64, 4, 24, 16, 4)
    assert shapes(s3prl_wavlm(s3prl_cfg(True), 0).state_dict()) == expected
    from transformers import WavLMModel

    model = WavLMModel(config_from_s3prl(s3prl_cfg(True)))
    assert set(map_state_dict({}, model).missing) == set(expected)  # every name the loader reads
    with torch.device("meta"):
        large = WavLMModel(config_from_s3prl({**s3prl_cfg(True, 24), "encoder_embed_dim": 1024,
                                              "encoder_ffn_embed_dim": 4096, "encoder_attention_heads": 16,
                                              "conv_feature_layers": "[(512,10,5)] + [(512,3,2)] * 4 + [(512,2,2)] * 2",
                                              "conv_pos": 128, "conv_pos_groups": 16}))  # fmt: skip
    assert len(map_state_dict({}, large).missing) == 488  # WavLM-Large: 488 tensors


@pytest.fixture(scope="module")
def sv_files(tmp_path_factory):
    """s3prl base checkpoints (normalise on and off) and a fine-tuned SV checkpoint whose WavLM
    weights differ from the base (the fine-tune wins, as upstream)."""
    d = tmp_path_factory.mktemp("sv")
    tuned = s3prl_wavlm(s3prl_cfg(True), seed=2)
    files = {
        "base": save_s3prl(d / "wavlm_large.pt", s3prl_cfg(True), s3prl_wavlm(s3prl_cfg(True), seed=1)),
        "base_raw": save_s3prl(d / "wavlm_raw.pt", s3prl_cfg(False), s3prl_wavlm(s3prl_cfg(False), seed=1)),
        "ft": save_finetune(d / "wavlm_large_finetune.pth", tuned.state_dict(), head_state(3)),
        "tuned": tuned,
        "dir": d,
    }
    return files


@pytest.fixture(scope="module")
def sv(sv_files):
    return st.load_speaker_verifier(str(sv_files["ft"]), str(sv_files["base"]))


def test_hidden_states_equal_s3prls(sv, sv_files, tmp_path):
    from s3prl.upstream.wavlm.expert import UpstreamExpert

    expert = UpstreamExpert(str(sv_files["base"])).eval()  # no dropout, as the SV model runs it
    expert.model.load_state_dict(sv_files["tuned"].state_dict())
    x = (np.random.default_rng(4).standard_normal(23456) * 0.2).astype(np.float32)
    with torch.no_grad():
        ref = expert([torch.from_numpy(x)])["hidden_states"]
    ours = sv.hidden_states(x)
    assert len(ref) == ours.shape[0] == LAYERS + 1
    for a, b in zip(ref, ours):
        assert float((a - b).abs().max()) <= 1e-5 * float(a.pow(2).mean().sqrt())


def test_load_report_and_normalise_flag(sv, sv_files):
    r = sv.report
    assert r.missing == () and r.unexpected == ("loss_calculator.projection.weight",)
    assert r.normalize is True and "cfg['normalize']" in r.normalize_source
    raw = st.load_speaker_verifier(str(sv_files["ft"]), str(sv_files["base_raw"]))
    assert raw.report.normalize is False
    x = (np.random.default_rng(5).standard_normal(16000) * 0.05 + 0.02).astype(np.float32)
    assert not torch.allclose(raw.hidden_states(x), sv.hidden_states(x))  # the flag is applied


def test_missing_checkpoint_tensors_are_reported(sv_files):
    gone = ("layer3.SE_Connect.linear1.bias", "feature_extract.model.encoder.layers.1.fc2.weight")
    ft = save_finetune(sv_files["dir"] / "partial.pth", sv_files["tuned"].state_dict(), head_state(3), drop=gone)
    r = st.load_speaker_verifier(str(ft), str(sv_files["base"])).report
    assert set(r.missing) == set(gone)


def test_transformers_folder_as_the_config_source(sv, sv_files, tmp_path):
    folder = transformers_wavlm_folder(tmp_path / "wavlm-large", config_from_s3prl(s3prl_cfg(True)), do_normalize=True)
    hf = st.load_speaker_verifier(str(sv_files["ft"]), str(folder))
    assert hf.report.normalize is True and "do_normalize" in hf.report.normalize_source
    x = (np.random.default_rng(6).standard_normal(20000) * 0.2).astype(np.float32)
    assert torch.allclose(hf.embed_samples(x), sv.embed_samples(x), atol=1e-6)  # the fine-tune holds every tensor


def test_similarity_self_and_other_speakers(sv, tmp_path):
    a = str(tone(tmp_path / "a.wav", 110, seconds=1.5, seed=1))
    b = str(tone(tmp_path / "b.wav", 240, seconds=1.2, harmonics=2, seed=2))
    assert sv.similarity(a, a) == pytest.approx(1.0, abs=1e-6)
    assert sv.similarity(a, b) < 0.999
    a24 = str(tone(tmp_path / "a24.wav", 110, seconds=1.5, sr=24000, seed=1))
    x, sr = st.read_audio(a24, dtype="float32")
    assert torch.equal(sv.embed(a24), sv.embed_samples(st.resample_sinc(x, sr)))


def test_sim_errors(sv, sv_files, tmp_path):
    with pytest.raises(ModelFileError, match="not found"):
        st.load_speaker_verifier(str(tmp_path / "none.pth"), str(sv_files["base"]))
    with pytest.raises(ModelFileError, match="not found"):
        st.load_speaker_verifier(str(sv_files["ft"]), str(tmp_path / "none.pt"))
    torch.save({"model": {"something": torch.zeros(1)}}, tmp_path / "other.pth")
    with pytest.raises(ModelFileError, match="ECAPA"):
        st.load_speaker_verifier(str(tmp_path / "other.pth"), str(sv_files["base"]))
    with pytest.raises(MediaError, match="not found"):
        sv.embed(str(tmp_path / "missing.wav"))
    sf.write(tmp_path / "short.wav", np.zeros(300), SR)
    with pytest.raises(MediaError, match="too short"):
        sv.embed(str(tmp_path / "short.wav"))
    a = str(tone(tmp_path / "a.wav", 120))
    s = st.evaluate_sim([(a, a), (str(tmp_path / "missing.wav"), a), (str(tmp_path / "short.wav"), a)], sv)
    assert s.n == 1 and len(s.skipped) == 2 and s.kind == "official"


def test_resample_sinc():
    x = np.sin(2 * np.pi * 440 * np.arange(24000) / 24000).astype(np.float32)
    y = st.resample_sinc(x, 24000)
    assert y.shape == (16000,) and y.dtype == np.float32
    want = np.sin(2 * np.pi * 440 * np.arange(16000) / 16000)
    assert np.abs(y[200:-200] - want[200:-200]).max() < 2e-3
    assert st.resample_sinc(x[:1001], 22050).shape == (int(np.ceil(1001 * 16000 / 22050)),)
    assert st.resample_sinc(x, 16000) is x


def test_sim_summary_by_hand():
    s = st.SIMSummary("official", tuple(st.SimScore("g", "p", v) for v in (0.5, 0.7, 0.9)))
    assert s.asv == 0.7 and s.asv_var == 0.027  # population variance 0.08 / 3
    assert s.report_lines() == ["ASV: 0.7", "ASV-var: 0.027"]
    p = st.SIMSummary("proxy", s.scores)
    assert p.report_lines() == ["ASV (proxy): 0.7", "ASV-var (proxy): 0.027"]
    assert "proxy" in p.label and "proxy" in p.as_dict()["label"] and p.as_dict()["kind"] == "proxy"


# ---- SIM: proxy ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def proxy(tmp_path_factory):
    return st.ProxySimilarity(str(proxy_folder(tmp_path_factory.mktemp("wavlm-base-plus"))))


def test_proxy_similarity(proxy, tmp_path):
    a = str(tone(tmp_path / "a.wav", 110, seed=1))
    b = str(tone(tmp_path / "b.wav", 260, harmonics=1, seed=2))
    assert proxy.kind == "proxy"
    assert proxy.similarity(a, a) == pytest.approx(1.0, abs=1e-6)
    assert proxy.similarity(a, b) < 0.999
    assert np.linalg.norm(proxy.embed(a)) == pytest.approx(1.0)
    s = st.evaluate_sim([(a, b)], proxy)
    assert s.kind == "proxy" and "proxy" in s.report_lines()[0]


def test_proxy_clips_at_30_s_and_pads_to_4000_samples(proxy, tmp_path):
    x = (np.random.default_rng(7).standard_normal(31 * SR) * 0.1).astype(np.float32)
    sf.write(tmp_path / "long.wav", x, SR, subtype="FLOAT")
    sf.write(tmp_path / "first30.wav", x[: 30 * SR], SR, subtype="FLOAT")
    assert np.allclose(proxy.embed(str(tmp_path / "long.wav")), proxy.embed(str(tmp_path / "first30.wav")), atol=1e-6)
    sf.write(tmp_path / "short.wav", x[:1600], SR, subtype="FLOAT")
    sf.write(tmp_path / "padded.wav", np.pad(x[:1600], (0, 2400)), SR, subtype="FLOAT")
    assert np.allclose(proxy.embed(str(tmp_path / "short.wav")), proxy.embed(str(tmp_path / "padded.wav")), atol=1e-6)
    with pytest.raises(ModelFileError):
        st.ProxySimilarity(str(tmp_path / "nowhere"))
