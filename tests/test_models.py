"""Discovery and validation of module sets: every defect is a ModelFileError naming file and problem."""

import shutil
import struct

import pytest

import llama_omni_py as omni
from llama_omni_py import models
from llama_omni_py import modelspec as ms


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


def test_shape_mismatch_is_named(tiny_copy, tmp_path):
    # A TTS file whose head_code is the wrong way round (numpy (6562, hidden) instead of (hidden, 6562)).
    from llama_omni_py.gguf_writer import GgufWriter

    src = omni.discover(tiny_copy)
    from llama_omni_py._native import core

    g = core.GgufFile(str(src.path("tts")))
    w = GgufWriter(tiny_copy / ms.TTS_FILE)
    for k in g.keys:
        v = g.value(k)
        if isinstance(v, bool):
            w.add(k, "bool", v)
        elif isinstance(v, int):
            w.add(k, "uint32", v)
        elif isinstance(v, float):
            w.add(k, "float32", v)
        else:
            w.add(k, "string", v)
    arrays = {}
    for t in g.tensors:
        a = g.read(t.name)
        if t.name == "head_code.0.weight":
            a = a.T.copy()
        arrays[t.name] = a
        w.declare(t.name, tuple(reversed(a.shape)), t.type_name)
    del g
    w.write(lambda name, ne, dt: [arrays[name].reshape(-1)])
    with pytest.raises(omni.ModelFileError, match="head_code.0.weight' has shape"):
        omni.validate(omni.discover(tiny_copy), ["tts"])


def test_load_returns_validated_set(tiny_dir):
    s = models.load(tiny_dir, ["projector"])
    assert s.path("projector").name == "MiniCPM-o-4_5-projector-F16.gguf"
