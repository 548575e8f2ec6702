"""Discovery and validation of module sets: every defect is a ModelFileError naming file and problem."""

import shutil
import struct

import numpy as np
import pytest

import llama_omni_py as omni
from llama_omni_py.modelset import layout as models
from llama_omni_py.modelset import spec as ms


def test_discover_from_directory_and_from_llm_path(tiny_dir):
    a = omni.discover(tiny_dir)
    b = omni.discover(tiny_dir / ms.LLM_FILE)
    assert a.root == b.root == tiny_dir
    assert a.modules_present() == list(ms.MODULES)
    assert a.files == b.files
    reports = omni.validate(a)
    assert [r.key for r in reports] == [f.key for f in ms.FILES]


def test_quantised_llm_name_is_found(tiny_copy):
    (tiny_copy / ms.LLM_FILE).rename(tiny_copy / "MiniCPM-o-4_5-Q8_0.gguf")
    assert omni.discover(tiny_copy).llm.name == "MiniCPM-o-4_5-Q8_0.gguf"


def test_missing_path_and_missing_file(tiny_copy):
    with pytest.raises(omni.ModelFileError, match="does not exist"):
        omni.discover(tiny_copy / "nowhere")
    (tiny_copy / "token2wav-gguf" / "hifigan2.gguf").unlink()
    s = omni.discover(tiny_copy)
    assert "token2wav" not in s.modules_present()
    assert any(p.endswith("hifigan2.gguf") for p in s.missing())
    with pytest.raises(omni.ModelFileError) as err:
        omni.validate(s)
    assert err.value.path.endswith("hifigan2.gguf") and "missing file" in err.value.problem
    omni.validate(s, ["llm", "apm"])  # the other modules stay usable


def test_wrong_architecture_is_named(tiny_copy):
    shutil.copy(tiny_copy / ms.APM_FILE, tiny_copy / ms.VPM_FILE)
    with pytest.raises(omni.ModelFileError, match="'whisper', expected 'clip'") as err:
        omni.validate(omni.discover(tiny_copy), ["vpm"])
    assert err.value.path.endswith("vision/MiniCPM-o-4_5-vision-F16.gguf")


def test_truncated_module_file(tiny_copy):
    p = tiny_copy / ms.TTS_FILE
    p.write_bytes(p.read_bytes()[: p.stat().st_size // 3])
    with pytest.raises(omni.ModelFileError, match="truncated") as err:
        omni.validate(omni.discover(tiny_copy), ["tts"])
    assert err.value.path == str(p)


def _patch_tensor_type(path, tensor_name: str, new_type: int):
    """Rewrites one tensor's ggml type id in the header (data left as is)."""
    data = bytearray(path.read_bytes())
    name = tensor_name.encode()
    at = data.index(struct.pack("<Q", len(name)) + name)
    pos = at + 8 + len(name)
    (nd,) = struct.unpack_from("<I", data, pos)
    type_pos = pos + 4 + 8 * nd
    struct.pack_into("<I", data, type_pos, new_type)
    path.write_bytes(bytes(data))


def test_token2wav_tensor_must_be_f32(tiny_copy):
    _patch_tensor_type(tiny_copy / "token2wav-gguf/hifigan2.gguf", "conv_pre.weight", 1)  # f16
    with pytest.raises(omni.ModelFileError, match="conv_pre.weight' is f16, expected f32.*F32"):
        omni.validate(omni.discover(tiny_copy), ["token2wav"])


def test_k_quant_llm_is_refused_for_cann_only(tiny_copy):
    _patch_tensor_type(tiny_copy / ms.LLM_FILE, "blk.0.ffn_gate.weight", 12)  # q4_K
    s = omni.discover(tiny_copy)
    reports = omni.validate(s, ["llm"], device="cpu")
    assert set(reports[0].weight_types) == {"f16", "q4_K"}
    with pytest.raises(omni.ModelFileError, match="q4_K.*CANN"):
        omni.validate(s, ["llm"], device="cann:0")


def _rewrite(path, meta=None, tensors=None):
    """Rewrites a GGUF in place; meta(dict) and tensors(dict of numpy arrays) may edit the copies."""
    from llama_omni_py._native import core
    from llama_omni_py.modelset.gguf_writer import GgufWriter

    g = core.GgufFile(str(path))
    kv = g.metadata()
    arrays = {t.name: (g.read(t.name), t.type_name) for t in g.tensors}
    del g
    if meta:
        meta(kv)
    if tensors:
        tensors(arrays)

    def vtype(v):
        if isinstance(v, list):
            return (
                "string[]"
                if all(isinstance(x, str) for x in v)
                else "float32[]"
                if any(isinstance(x, float) for x in v)
                else "int32[]"
            )
        return (
            "bool"
            if isinstance(v, bool)
            else "uint32"
            if isinstance(v, int)
            else "float32"
            if isinstance(v, float)
            else "string"
        )

    w = GgufWriter(path)
    for k, v in kv.items():
        w.add(k, vtype(v), v)
    for name, (a, t) in arrays.items():
        w.declare(name, tuple(reversed(a.shape)), t)
    w.write(lambda name, ne, dt: [arrays[name][0].reshape(-1)])


def test_shape_mismatch_is_named(tiny_copy):
    # A TTS file whose head_code is the wrong way round (numpy (6562, hidden) instead of (hidden, 6562)).
    def transpose(arrays):
        a, t = arrays["head_code.0.weight"]
        arrays["head_code.0.weight"] = (a.T.copy(), t)

    _rewrite(tiny_copy / ms.TTS_FILE, tensors=transpose)
    with pytest.raises(omni.ModelFileError, match="head_code.0.weight' has shape"):
        omni.validate(omni.discover(tiny_copy), ["tts"])


def test_tts_tokenizer_round_trip(tiny_dir):
    # The TTS file carries the LLM's tokenizer padded with "[PAD{i}]" to token_embd's rows
    # (6562 audio tokens + emb_text rows), as llama.cpp's loader needs; the pad rows are zero.
    from llama_omni_py._native import core

    g = core.GgufFile(str(tiny_dir / ms.TTS_FILE))
    llm = core.GgufFile(str(tiny_dir / ms.LLM_FILE))
    rows = g.find_tensor("emb_text.weight").ne[1] + ms.AUDIO_TOKENS
    tokens, llm_tokens = g.value("tokenizer.ggml.tokens"), llm.value("tokenizer.ggml.tokens")
    assert g.find_tensor("token_embd.weight").ne == [64, rows] and g.value("llama.vocab_size") == rows
    assert len(tokens) == rows and tokens[: len(llm_tokens)] == llm_tokens
    assert tokens[len(llm_tokens) :] == [f"[PAD{i}]" for i in range(len(llm_tokens), rows)]
    assert g.value("tokenizer.ggml.token_type")[-1] == 5  # unused
    assert (g.value("tokenizer.ggml.model"), g.value("tokenizer.ggml.pre")) == ("gpt2", "qwen2")
    assert g.value("tokenizer.ggml.merges") == llm.value("tokenizer.ggml.merges")
    assert g.value("tokenizer.ggml.eos_token_id") == ms.build_vocab(False).special_id("<|im_end|>")
    assert not g.has_key("tokenizer.ggml.bos_token_id")
    assert g.value("llama.rope.dimension_count") == 16
    embd = np.asarray(g.read("token_embd.weight"), np.float32)
    assert np.abs(embd[:256]).min(axis=1).max() > 0 and not embd[256:].any()


def test_real_tts_vocabulary_matches_the_converters():
    d = ms.preset("real").tts
    v = ms.tts_vocab(ms.build_vocab(full_size=True), d)
    assert d.token_rows == v.size == 158626 and len(set(v.tokens)) == v.size
    assert v.tokens[151747] == "<|timbre_31|>" and v.tokens[151748] == "[PAD151748]"
    assert v.tokens[-1] == "[PAD158625]"
    tts = next(f for f in ms.FILES if f.key == "tts")
    embd = next(s for s in tts.tensors(ms.preset("real")) if s.name == "token_embd.weight")
    assert (embd.ne, embd.live_rows) == ((768, 158626), 32000)


@pytest.mark.parametrize(
    "drop",
    [
        "tokenizer.ggml.model",
        "tokenizer.ggml.tokens",
        "tokenizer.ggml.merges",
        "llama.context_length",
        "llama.attention.layer_norm_rms_epsilon",
    ],
)
def test_tts_without_loader_keys_is_refused(tiny_copy, drop):
    _rewrite(tiny_copy / ms.TTS_FILE, meta=lambda kv: kv.pop(drop))
    with pytest.raises(omni.ModelFileError, match=drop.replace(".", r"\.")) as err:
        omni.validate(omni.discover(tiny_copy), ["tts"])
    assert err.value.path.endswith(ms.TTS_FILE)


def test_tts_without_any_tokenizer_is_refused(tiny_copy):
    _rewrite(tiny_copy / ms.TTS_FILE, meta=lambda kv: [kv.pop(k) for k in list(kv) if k.startswith("tokenizer.")])
    with pytest.raises(omni.ModelFileError, match="missing metadata key 'tokenizer.ggml.model'"):
        omni.validate(omni.discover(tiny_copy), ["tts"])


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda kv: kv["tokenizer.ggml.tokens"].pop(), "entries but token_embd.weight has"),
        (lambda kv: kv["tokenizer.ggml.tokens"].__setitem__(-1, kv["tokenizer.ggml.tokens"][0]), "duplicate"),
        (lambda kv: kv.__setitem__("tokenizer.ggml.model", "sentencepiece"), "not one of"),
        (lambda kv: kv.__setitem__("llama.rope.dimension_count", 32), "expected 16"),
        (lambda kv: kv.__setitem__("llama.block_count", "2"), "'llama.block_count' should be"),
    ],
)
def test_tts_with_unusable_keys_is_refused(tiny_copy, edit, message):
    _rewrite(tiny_copy / ms.TTS_FILE, meta=edit)
    with pytest.raises(omni.ModelFileError, match=message):
        omni.validate(omni.discover(tiny_copy), ["tts"])


@pytest.mark.parametrize(
    "relpath, drop",
    [
        (ms.APM_FILE, "filters"),
        (ms.VPM_FILE, "clip.vision.image_mean"),
        (ms.LLM_FILE, "tokenizer.ggml.tokens"),
        ("token2wav-gguf/prompt_cache.gguf", "mtmd.prompt_cache.n_timesteps"),
    ],
)
def test_other_files_need_their_loader_keys(tiny_copy, relpath, drop):
    _rewrite(tiny_copy / relpath, meta=lambda kv: kv.pop(drop))
    with pytest.raises(omni.ModelFileError, match=drop.replace(".", r"\.")):
        omni.validate(omni.discover(tiny_copy))


def test_load_returns_validated_set(tiny_dir):
    s = models.load(tiny_dir, ["projector"])
    assert s.path("projector").name == "MiniCPM-o-4_5-projector-F16.gguf"
