"""The generator writes llama.cpp-omni's module set exactly as the table says, deterministically."""

import hashlib
import json
import math
from pathlib import Path

import numpy as np
import pytest

import llama_omni_py as omni
from llama_omni_py._native import core
from llama_omni_py.modelset import spec as ms

DATA = Path(__file__).parents[1] / "support" / "data"


def _digest(root: Path) -> dict:
    return {f.key: hashlib.sha256((root / f.relpath).read_bytes()).hexdigest() for f in ms.FILES}


def test_same_seed_gives_identical_files_and_only_matches_full(tiny_dir, tmp_path):
    omni.make_models(tmp_path / "again", "tiny", seed=0)
    assert _digest(tmp_path / "again") == _digest(tiny_dir)
    omni.make_models(tmp_path / "sub", "tiny", only=["tts", "token2wav"], seed=0)
    sub = {f.key for f in ms.FILES if (tmp_path / "sub" / f.relpath).exists()}
    assert sub == {f.key for f in ms.FILES if f.module in ("tts", "token2wav")}
    full = _digest(tiny_dir)
    for f in ms.FILES:
        if f.key in sub:
            assert hashlib.sha256((tmp_path / "sub" / f.relpath).read_bytes()).hexdigest() == full[f.key]


def test_other_seed_changes_weights(tiny_dir, tmp_path):
    omni.make_models(tmp_path / "s1", "tiny", only=["projector"], seed=1)
    a = core.GgufFile(str(tiny_dir / ms.PROJECTOR_FILE)).read("linear1.weight")
    b = core.GgufFile(str(tmp_path / "s1" / ms.PROJECTOR_FILE)).read("linear1.weight")
    assert a.shape == b.shape and not np.array_equal(a, b)


def test_every_tensor_matches_the_table(tiny_dir):
    dims = ms.preset("tiny")
    for f in ms.FILES:
        g = core.GgufFile(str(tiny_dir / f.relpath))
        specs = f.tensors(dims)
        assert [t.name for t in g.tensors] == [s.name for s in specs], f.key
        for t, s in zip(g.tensors, specs):
            assert tuple(t.ne) == s.ne, (f.key, s.name)
            assert t.type_name == s.dtype, (f.key, s.name)
            values = g.read_f32(s.name)
            assert np.isfinite(values).all(), (f.key, s.name)
        if f.architecture:
            assert g.value("general.architecture") == f.architecture
        else:
            assert "general.architecture" not in g.keys


def test_weight_scales_follow_fan_in(tiny_dir):
    # N(0, gain/sqrt(fan_in)) keeps pre-activation variance ~1 through every linear layer.
    g = core.GgufFile(str(tiny_dir / ms.APM_FILE))
    w = g.read_f32("encoder.blocks.0.mlp.0.weight")  # numpy (out, in)
    assert abs(w.std() * math.sqrt(w.shape[1]) - 1.0) < 0.05
    x = np.random.default_rng(0).standard_normal((256, w.shape[1])).astype(np.float32)
    y = x @ w.T
    assert 0.8 < y.std() < 1.2
    alpha = core.GgufFile(str(tiny_dir / "token2wav-gguf/hifigan2.gguf")).read_f32("resblocks.0.activations1.0.alpha")
    assert alpha.min() >= 0.5 and alpha.max() <= 1.5  # Snake divides by alpha


def test_apm_stores_a_real_mel_filterbank(tiny_dir):
    g = core.GgufFile(str(tiny_dir / ms.APM_FILE))
    assert g.value("n_mel") == 80 and g.value("n_fft") == 201
    f = np.asarray(g.value("filters"), dtype=np.float32).reshape(80, 201)
    assert (f >= 0).all() and (f.sum(axis=1) > 0).all()
    peaks = f.argmax(axis=1)
    assert (np.diff(peaks) >= 0).all()  # filters ascend in frequency


def test_resampler_position_table_is_sincos(tiny_dir):
    g = core.GgufFile(str(tiny_dir / ms.VPM_FILE))
    p = g.read("resampler.pos_embed_k")  # (4900, E)
    e = p.shape[1]
    assert p.shape[0] == 70 * 70
    np.testing.assert_allclose(p[0, : e // 4], 0.0, atol=1e-6)  # sin(0)
    np.testing.assert_allclose(p[0, e // 4 : e // 2], 1.0, atol=1e-6)  # cos(0)
    assert np.abs(p).max() <= 1.0 + 1e-6


def test_llm_loads_in_libllama_with_special_tokens_by_name(tiny_dir):
    m = core.LlmModel(str(tiny_dir / ms.LLM_FILE), "cpu")
    info = m.info
    d = ms.preset("tiny").llm
    assert (info.architecture, info.n_embd, info.n_layer, info.n_vocab) == ("qwen3", d.n_embd, d.n_layer, d.n_vocab)
    assert info.n_embd_inp == d.n_embd
    vocab = ms.build_vocab(full_size=False)
    for name in ("<|im_start|>", "<|im_end|>", "<|tts_bos|>", "<|tts_eos|>", "<|audio_start|>", "<think>", "<unit>"):
        assert m.find_token(name) == vocab.special_id(name), name
    assert info.eos == vocab.special_id("<|im_end|>")
    assert m.is_eog(vocab.special_id("<|im_end|>"))
    text = "<|im_start|>user\nhello world, ünïcode 你好<|im_end|>"
    ids = m.tokenize(text, True)
    assert ids[0] == vocab.special_id("<|im_start|>")
    assert m.detokenize(ids) == text
    assert len(m.tokenize("the speech", False)) < len(b"the speech")  # merges apply
    with pytest.raises(omni.InvalidArgumentError):
        m.token_text(info.n_vocab)


def test_tiny_tts_records_its_special_ids(tiny_dir):
    vocab = ms.build_vocab(full_size=False)
    g = core.GgufFile(str(tiny_dir / ms.TTS_FILE))
    bos, eos = ms.tts_special_ids(vocab.special_base)
    assert g.value("omni.tts.audio_bos_token_id") == bos
    assert g.value("omni.tts.text_eos_token_id") == eos
    assert 0 <= bos < g.find_tensor("emb_text.weight").ne[1]
    assert ms.tts_special_ids() == (151687, 151692)


def test_full_size_vocabulary_has_specials_at_real_ids():
    v = ms.build_vocab(full_size=True)
    assert v.size == 151748
    assert v.tokens[151643] == "<|endoftext|>" and v.tokens[151644] == "<|im_start|>"
    assert v.tokens[151703] == "<|tts_bos|>" and v.tokens[151704] == "<|tts_eos|>"
    assert v.tokens[151705] == "<|listen|>" and v.tokens[151747] == "<|timbre_31|>"
    assert len(set(v.tokens)) == v.size


# ---- real dimensions, checked against the reference state dicts without writing GBs ----


def _state_dict(name):
    return json.loads((DATA / name).read_text())


def _torch_to_ne(shape):
    return tuple(reversed(shape))


def test_real_token2wav_table_matches_reference_state_dicts():
    d = ms.preset("real")
    flow = _state_dict("flow_state_dict_shapes.json")
    expected = {"token2wav.encoder": {}, "token2wav.flow_matching": {}, "token2wav.flow_extra": {}}
    for k, shape in flow.items():
        if k.startswith("encoder."):
            expected["token2wav.encoder"][k[len("encoder.") :]] = _torch_to_ne(shape)
        elif k.startswith("decoder.estimator."):
            expected["token2wav.flow_matching"][k[len("decoder.") :]] = _torch_to_ne(shape)
        else:
            expected["token2wav.flow_extra"][k] = _torch_to_ne(shape)
    hift = {}
    for k, shape in _state_dict("hift_state_dict_shapes.json").items():
        if k.endswith("parametrizations.weight.original0"):
            continue  # weight-norm magnitude, folded into .weight in hifigan2.gguf
        k = k.replace("parametrizations.weight.original1", "weight")
        hift[k] = shape
    # ConvTranspose1d weights are (in, out, k) in torch and (k, out, in) in ggml: also a plain reversal.
    expected["token2wav.hifigan2"] = {k: _torch_to_ne(v) for k, v in hift.items()}
    for key, tensors in expected.items():
        f = next(f for f in ms.FILES if f.key == key)
        ours = {s.name: s.ne for s in f.tensors(d)}
        assert ours == tensors, key
        assert all(s.dtype == "f32" for s in f.tensors(d))


def test_real_sizes_match_the_distributed_files():
    d = ms.preset("real")
    mib = {f.key: sum(math.prod(s.ne) * (2 if s.dtype == "f16" else 4) for s in f.tensors(d)) / 2**20 for f in ms.FILES}
    counts = {f.key: len(f.tensors(d)) for f in ms.FILES}
    # sizes of llama.cpp-omni's distributed files (docs/model-files.md)
    assert counts["token2wav.encoder"] == 206 and round(mib["token2wav.encoder"], 1) == 144.3
    assert counts["token2wav.flow_matching"] == 394 and round(mib["token2wav.flow_matching"], 1) == 437.0
    assert counts["token2wav.flow_extra"] == 5 and round(mib["token2wav.flow_extra"], 1) == 13.0
    assert counts["token2wav.hifigan2"] == 246 and round(mib["token2wav.hifigan2"], 1) == 79.4
    assert round(mib["token2wav.prompt_cache"], 1) == 67.7
    tts = {s.name: s for s in next(f for f in ms.FILES if f.key == "tts").tensors(d)}
    assert tts["emb_text.weight"].ne == (768, 152064) and tts["emb_code.0.weight"].ne == (768, 6562)
    assert tts["head_code.0.weight"].ne == (6562, 768) and "output.weight" not in tts
    assert sum(1 for n in tts if n.endswith("attn_q.weight")) == 20
    apm = {s.name: s for s in next(f for f in ms.FILES if f.key == "apm").tensors(d)}
    assert apm["encoder.positional_embedding"].ne == (1024, 1500)
    assert "encoder.blocks.23.attn.key.bias" not in apm and "encoder.blocks.23.attn.query.bias" in apm
    vpm = {s.name: s for s in next(f for f in ms.FILES if f.key == "vpm").tensors(d)}
    assert vpm["v.position_embd.weight"].ne == (1152, 4900) and vpm["resampler.query"].ne == (4096, 64)
    assert sum(1 for n in vpm if n.endswith("attn_q.weight")) == 26


def test_invalid_generator_arguments(tmp_path):
    with pytest.raises(ValueError, match="size"):
        omni.make_models(tmp_path, "huge")
    with pytest.raises(ValueError, match="unknown module"):
        omni.make_models(tmp_path, "tiny", only=["llm", "vocoder"])
    with pytest.raises(ValueError, match="seed"):
        omni.make_models(tmp_path, "tiny", seed=-1)


def test_parallel_writer_gives_identical_files(tiny_dir, tmp_path):
    omni.make_models(tmp_path / "par", "tiny", seed=0, workers=4)
    assert _digest(tmp_path / "par") == _digest(tiny_dir)


def test_llm_layers_deepens_only_the_llm(tiny_dir, tmp_path):
    omni.make_models(tmp_path / "deep", "tiny", only=["llm"], seed=0, llm_layers=5, workers=2)
    deep = core.GgufFile(str(tmp_path / "deep" / ms.LLM_FILE))
    base = core.GgufFile(str(tiny_dir / ms.LLM_FILE))
    assert deep.value("qwen3.block_count") == 5 and base.value("qwen3.block_count") == 2
    names = {t.name for t in deep.tensors}
    assert "blk.4.ffn_down.weight" in names and "blk.5.ffn_down.weight" not in names
    for name in ("blk.1.attn_q.weight", "token_embd.weight", "output.weight"):  # same generator per tensor
        np.testing.assert_array_equal(deep.read(name), base.read(name))
    report = omni.validate(omni.discover(tmp_path / "deep" / ms.LLM_FILE), ["llm"])
    assert report[0].tensors == len(names)


@pytest.mark.parametrize("kwargs", [{"llm_layers": 0}, {"llm_layers": 37}, {"llm_layers": 2.0}, {"workers": 0}])
def test_generator_options_are_checked(tmp_path, kwargs):
    with pytest.raises(ValueError):
        omni.make_models(tmp_path, "tiny", only=["projector"], **kwargs)
    assert not any(tmp_path.iterdir())
