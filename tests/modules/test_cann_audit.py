"""The CANN op-support audit: every graph the runtime computes, matched against ggml's CANN table."""

import json
import struct

import numpy as np
import pytest

from llama_omni_py import cli
from llama_omni_py._native import core
from llama_omni_py.errors import InvalidArgumentError
from llama_omni_py.modules import cann_audit as ca
from llama_omni_py.modules.vpm import ImageEncoder

# Nodes that may stay unsupported on CANN, each with the reason. Empty: every device graph of the
# APM, VPM, TTS, projector, Token2Mel (conformer + DiT with its CFG batch) and the LLM has a
# supported op/type combination.
ALLOWLIST: dict[str, str] = {}


@pytest.fixture(scope="module")
def table():
    return ca.OpTable.load()


@pytest.fixture(scope="module")
def audit(tiny_dir):
    return ca.run_audit(tiny_dir)


def test_every_device_graph_is_recorded(audit):
    graphs = {m: set(r.graphs) for m, r in audit.reports.items()}
    assert graphs == {
        "apm": {"encode", "encode_stream"},
        "vpm": {"encode"},
        "tts": {"projector", "step"},
        "conformer": {"chunk"},
        "dit": {"step"},
        "llm": {"prefill", "decode"},
    }
    for r in audit.reports.values():
        assert r.nodes > r.views > 0 and r.supported > 0


def test_tiny_set_has_no_unsupported_node(audit):
    unexpected = {k: n for k, n in audit.unsupported.items() if k not in ALLOWLIST}
    assert not unexpected, audit.markdown()


def test_the_dit_graph_is_the_cfg_batch(tiny_dir, table):
    graphs = ca.record_model_graphs(tiny_dir, table)
    dit = next(g for g in graphs if g["module"] == "dit")
    mat = [n for n in dit["nodes"] if n["op"] == "MUL_MAT"]
    assert any(n["dst"]["ne"][2] == 2 or n["dst"]["ne"][3] == 2 for n in mat)  # conditional + unconditional rows


def test_the_vpm_graphs_include_a_batch_of_slices(tiny_dir, table):
    # an image's same-size slices run as one graph: its output holds one 64-row block per slice
    vpm = [g for g in ca.record_model_graphs(tiny_dir, table) if g["module"] == "vpm"]
    assert sorted(g["nodes"][-1]["dst"]["ne"][2] for g in vpm) == [1, 2]


def _node(op, dst_type="f32", src=(), params=(), desc=None, slots=None):
    words = list(params) + [0] * (16 - len(params))
    return {
        "op": op,
        "desc": desc or op,
        "name": "",
        "dst": {"type": dst_type, "ne": [8, 8, 1, 1]},
        "src": [{"type": t, "ne": [8, 8, 1, 1]} for t in src],
        "src_slots": slots or list(range(len(src))),
        "op_params": words,
    }


def _f(x):
    return struct.unpack("<i", struct.pack("<f", x))[0]


def test_unsupported_ops_are_flagged(table):
    assert ca.classify(_node("CONV_2D", src=("f32", "f32")), table).status == "unsupported"
    assert ca.classify(_node("SOFTPLUS", "f32", ("f32",), desc="SOFTPLUS"), table).status == "unsupported"
    assert ca.classify(_node("MUL_MAT", src=("bf16", "f32")), table).status == "unsupported"
    assert ca.classify(_node("MUL_MAT", src=("f16", "f32")), table).status == "supported"
    # scale with a bias, softmax with sinks, circular padding: supported ops, unsupported variants
    assert ca.classify(_node("SCALE", src=("f32",), params=(_f(2.0), _f(1.0))), table).status == "unsupported"
    assert ca.classify(_node("SCALE", src=("f32",), params=(_f(2.0), _f(0.0))), table).status == "supported"
    assert ca.classify(_node("SOFT_MAX", src=("f32", "f32", "f32")), table).status == "unsupported"
    assert ca.classify(_node("PAD", src=("f32",), params=(1, 1, 0, 0, 0, 0, 0, 0, 1)), table).status == "unsupported"
    assert ca.classify(_node("MAP_CUSTOM1", src=("f32",)), table).status == "untested"
    assert ca.classify(_node("VIEW", src=("f32",)), table).status == "view"
    assert not ca.flash_attn_ok(table, 72) and ca.flash_attn_ok(table, 128)  # SigLIP's head size has no CANN kernel


def test_a_forced_unsupported_formulation_is_caught(tiny_dir, table):
    """Fused attention at the tiny VPM's head size (not in the CANN table) must be reported."""
    enc = ImageEncoder(tiny_dir, "cpu", 1)
    head = enc.vpm.dims.hidden // enc.vpm.dims.heads
    assert not ca.flash_attn_ok(table, head)
    forced = ImageEncoder(tiny_dir, "cpu", 1, flash_attn_dims=[head])
    image = np.random.default_rng(1).integers(0, 255, (28, 42, 3), dtype=np.uint8)
    core.start_graph_recording()
    try:
        fused = forced.encode(image)
    finally:
        graphs = core.stop_graph_recording()
    reports = ca.audit_graphs(graphs, table)
    flagged = [k for k in reports["vpm"].unsupported if k.startswith("FLASH_ATTN_EXT(") and f"hsk={head}" in k]
    assert flagged, reports["vpm"].unsupported
    # Both formulations compute the same thing (F16 K/V vs F32 matmul: loose tolerance).
    plain = ImageEncoder(tiny_dir, "cpu", 1, flash_attn_dims=[]).encode(image)
    np.testing.assert_allclose(fused, plain, atol=2e-2 * np.abs(plain).max())


def test_recording_is_off_unless_started(tiny_dir):
    assert not core.graph_recording()
    ImageEncoder(tiny_dir, "cpu", 1).encode(np.zeros((14, 14, 3), np.uint8))
    core.start_graph_recording()
    assert core.stop_graph_recording() == []


def test_csv_distills_to_the_packaged_form(tmp_path):
    csv_path = tmp_path / "CANN.csv"
    csv_path.write_text(
        '"backend_name","op_name","op_params","test_mode","supported","error_message","backend_reg_name"\n'
        '"CANN0","SCALE","type=f32,ne=[10,10,10,10],scale=2.000000,bias=0.000000,inplace=0","support","1","yes","CANN"\n'
        '"CANN0","SCALE","type=f32,ne=[10,10,10,10],scale=2.000000,bias=1.000000,inplace=0","support","0","no","CANN"\n'
    )
    t = ca.OpTable.load(csv_path)
    assert [g["sig"] for g in t.ops["SCALE"]] == [
        {"bias": "0.000000", "type": "f32"},
        {"bias": "1.000000", "type": "f32"},
    ]
    assert ca.classify(_node("SCALE", src=("f32",), params=(_f(3.0), _f(0.0))), t).status == "supported"
    assert ca.classify(_node("SCALE", src=("f32",), params=(_f(3.0), _f(1.0))), t).status == "unsupported"


def test_a_bad_table_is_a_clear_error(tmp_path, tiny_dir, capsys):
    bad = tmp_path / "CANN.csv"
    bad.write_text('"backend_name","op_name"\n"CANN0","ADD"\n')  # no op_params column
    with pytest.raises(InvalidArgumentError, match="op-support table"):
        ca.OpTable.load(bad)
    assert (
        cli.main(["info", "--cann-audit", "--model-dir", str(tiny_dir), "--cann-table", str(tmp_path / "absent.json")])
        == 2
    )
    assert "cannot read the op-support table" in capsys.readouterr().err


def test_cli_cann_audit_json(tiny_dir, capsys):
    assert cli.main(["info", "--cann-audit", "--model-dir", str(tiny_dir), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {m["module"] for m in out["modules"]} == {"apm", "vpm", "tts", "conformer", "dit", "llm"}
    assert out["unsupported"] == {} and "CPU by design" in out["vocoder"]
    assert any(n.startswith("vpm: fused attention") for n in out["notes"])
