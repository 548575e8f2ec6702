"""The native GGUF reader against hostile files: every defect is a ModelFileError, never a crash."""

import random
import struct

import numpy as np
import pytest

import llama_omni_py as omni
from llama_omni_py._native import core
from llama_omni_py.modelset import spec as ms


def _sections(data: bytes) -> list[int]:
    """Byte offsets where each header section (and the data section) starts; a test-side walker."""
    pos = 24
    cuts = [0, 4, 8, 16, 24]
    n_tensors, n_kv = struct.unpack_from("<QQ", data, 8)

    def string(p):
        (n,) = struct.unpack_from("<Q", data, p)
        return p + 8 + n

    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
    for _ in range(n_kv):
        pos = string(pos)
        (t,) = struct.unpack_from("<I", data, pos)
        pos += 4
        if t == 8:
            pos = string(pos)
        elif t == 9:
            et, n = struct.unpack_from("<IQ", data, pos)
            pos += 12
            for _ in range(n):
                pos = string(pos) if et == 8 else pos + sizes[et]
        else:
            pos += sizes[t]
        cuts.append(pos)
    for _ in range(n_tensors):
        pos = string(pos)
        (nd,) = struct.unpack_from("<I", data, pos)
        pos += 4 + 8 * nd + 4 + 8
        cuts.append(pos)
    data_start = pos + (-pos % 32)
    cuts += [data_start, data_start + 1, len(data) - 1]
    return sorted(set(c for c in cuts if c < len(data)))


@pytest.fixture(scope="module")
def small_file(tiny_dir):
    return (tiny_dir / "token2wav-gguf" / "prompt_cache.gguf").read_bytes()


def _open(tmp_path, data: bytes, name="f.gguf"):
    p = tmp_path / name
    p.write_bytes(data)
    return core.GgufFile(str(p))


def test_reads_a_valid_file(tiny_dir):
    g = core.GgufFile(str(tiny_dir / "token2wav-gguf" / "prompt_cache.gguf"))
    assert g.version == 3 and g.alignment == 32
    assert g.value("mtmd.prompt_cache.n_timesteps") == 5
    assert abs(g.value("mtmd.prompt_cache.temperature") - 1.0) < 1e-7
    assert [t.name for t in g.tensors][0] == "prompt_cache.spk_cb"


def test_truncation_at_every_section_boundary_raises(tmp_path, small_file):
    cuts = _sections(small_file)
    assert len(cuts) > 15
    for cut in cuts:
        with pytest.raises(omni.ModelFileError) as err:
            _open(tmp_path, small_file[:cut])
        assert err.value.path.endswith("f.gguf")
        assert err.value.problem


def test_truncation_at_every_header_byte_raises(tmp_path, tiny_dir):
    data = (tiny_dir / "tts" / "MiniCPM-o-4_5-projector-F16.gguf").read_bytes()
    end = _sections(data)[-3]  # data section start
    for cut in range(0, end + 1):
        with pytest.raises(omni.ModelFileError):
            _open(tmp_path, data[:cut])


def test_random_bytes_raise(tmp_path):
    rng = random.Random(7)
    for i in range(200):
        n = rng.randrange(0, 4096)
        body = bytes(rng.randrange(256) for _ in range(n))
        if i % 2:  # valid magic and version, garbage after: exercises the parser, not the magic check
            body = b"GGUF" + struct.pack("<I", 3) + body
        with pytest.raises(omni.ModelFileError):
            _open(tmp_path, body)


def _header(n_tensors, n_kv, version=3, magic=b"GGUF"):
    return magic + struct.pack("<IQQ", version, n_tensors, n_kv)


def _s(text: str) -> bytes:
    b = text.encode()
    return struct.pack("<Q", len(b)) + b


@pytest.mark.parametrize(
    "data,problem",
    [
        (b"GGML" + b"\0" * 60, "bad magic"),
        (_header(0, 0, version=1), "version"),
        (_header(0, 0, version=99), "version"),
        (_header(0, 1 << 62), "metadata count"),
        (_header(1 << 62, 0), "tensor count"),
        (_header(0, 1) + struct.pack("<Q", 1 << 40), "string length"),
        (_header(0, 1) + _s("k") + struct.pack("<I", 77) + b"\0" * 16, "invalid type"),
        (_header(0, 1) + _s("k") + struct.pack("<IIQ", 9, 4, 1 << 60) + b"\0" * 16, "elements"),
        (_header(0, 1) + _s("k") + struct.pack("<IIQ", 9, 9, 1) + b"\0" * 16, "element type"),
        (_header(0, 2) + _s("k") + struct.pack("<Ii", 5, 1) + _s("k") + struct.pack("<Ii", 5, 1), "duplicate"),
        (_header(0, 1) + _s("k") + struct.pack("<IB", 7, 9) + b"\0" * 8, "bool"),
        (_header(1, 0) + _s("t") + struct.pack("<I", 5) + b"\0" * 60, "dimensions"),
        (_header(1, 0) + _s("t") + struct.pack("<IQIQ", 1, 0, 0, 0) + b"\0" * 40, "dimension"),
        (_header(1, 0) + _s("t") + struct.pack("<IQIQ", 1, 4, 9999, 0) + b"\0" * 40, "unknown ggml type"),
        (_header(1, 0) + _s("t") + struct.pack("<IQIQ", 1, 4, 0, 3) + b"\0" * 40, "aligned"),
        (_header(1, 0) + _s("t") + struct.pack("<IQIQ", 1, 1 << 40, 0, 0) + b"\0" * 40, "past the end"),
        (_header(1, 0) + _s("t") + struct.pack("<IQQIQ", 2, 1 << 40, 1 << 40, 0, 0) + b"\0" * 40, "invalid dimension"),
        (_header(1, 0) + _s("t") + struct.pack("<IQIQ", 1, 33, 8, 0) + b"\0" * 64, "block size"),  # q8_0 needs 32 | ne0
        (_header(2, 0) + (_s("t") + struct.pack("<IQIQ", 1, 4, 0, 0)) * 2 + b"\0" * 64, "duplicate tensor"),
        (_header(0, 1) + _s("general.alignment") + struct.pack("<II", 4, 3), "power of two"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_malformed_headers_raise_typed_errors(tmp_path, data, problem):
    # Trailing zeros so that each case fails on its own defect, not on a short file.
    with pytest.raises(omni.ModelFileError, match=problem):
        _open(tmp_path, data + b"\0" * 64)


def test_missing_and_special_paths(tmp_path):
    with pytest.raises(omni.ModelFileError, match="not found"):
        core.GgufFile(str(tmp_path / "nope.gguf"))
    with pytest.raises(omni.ModelFileError, match="regular file"):
        core.GgufFile(str(tmp_path))
    with pytest.raises(omni.ModelFileError, match="bad magic"):
        _open(tmp_path, b"")


def test_libllama_never_sees_a_corrupt_file(tmp_path, tiny_dir):
    data = (tiny_dir / ms.LLM_FILE).read_bytes()
    for cut in (100, len(data) // 2, len(data) - 7):
        p = tmp_path / f"llm{cut}.gguf"
        p.write_bytes(data[:cut])
        with pytest.raises(omni.ModelFileError):
            core.LlmModel(str(p), "cpu")


def test_libllama_rejects_a_wellformed_file_of_the_wrong_kind(tiny_dir):
    # The TTS file is valid GGUF but not a model libllama can run (no output.weight, extra tensors):
    # a typed error that quotes llama.cpp, and the process lives on.
    with pytest.raises(omni.ModelFileError, match="libllama could not load"):
        core.LlmModel(str(tiny_dir / ms.PROJECTOR_FILE), "cpu")


def test_tensor_reads_match_the_gguf_package(tiny_dir):
    import gguf  # test dependency (pyproject [test]); an independent reader

    for f in ms.FILES:
        path = tiny_dir / f.relpath
        ours = core.GgufFile(str(path))
        theirs = gguf.GGUFReader(str(path))
        assert [t.name for t in ours.tensors] == [t.name for t in theirs.tensors]
        for t_ours, t_theirs in zip(ours.tensors, theirs.tensors):
            assert list(t_ours.ne) == [int(x) for x in t_theirs.shape]
            a = ours.read(t_ours.name)
            np.testing.assert_array_equal(
                a.reshape(-1).view(np.uint8), np.asarray(t_theirs.data).reshape(-1).view(np.uint8)
            )
