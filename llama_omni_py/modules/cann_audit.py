"""CANN readiness without Ascend hardware: every graph the runtime computes is recorded on the
CPU and each node is matched against ggml's per-op support table for the CANN backend of the
llama.cpp we link (``data/cann_ops.json``, distilled from llama.cpp's ``docs/ops/CANN.csv`` by
``scripts/make-cann-op-table.py``).

A node is *supported* when its op (with the unary/GLU sub-op) and the type/flag combination the
table discriminates on (input and output types, K/V type and head size of fused attention,
softmax sinks, scale bias, circular padding, ...) passed in at least one tested case. Shapes are
only noted: the table tests a few shapes per op. Runtime numerics on the NPU are not checked.

Our own module graphs are bound to one backend (no scheduler): an unsupported node there would
abort on the device, so GraphModule::compute refuses such a graph up front. The LLM runs through
libllama's scheduler, where an unsupported node falls back to the CPU (slow, not fatal).
"""

from __future__ import annotations

import csv
import json
import re
import struct
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .._native import core
from ..errors import InvalidArgumentError

TABLE_PATH = Path(__file__).parents[1] / "data" / "cann_ops.json"

# Parameters of the table that decide support (types and flags); every other parameter is a
# shape or a value the backend handles generally, and is only compared as "shape tested".
SIGNATURE_KEYS = (
    "type",
    "type_a",
    "type_b",
    "type_src",
    "type_dst",
    "type_idx",
    "type_input",
    "type_kernel",
    "dst_type",
    "type_KV",
    "hsk",
    "hsv",
    "sinks",
    "mask",
    "m_prec",
    "logit_softcap",
    "circular",
    "mode",
    "bias",
    "pool_type",
    "swapped",
    "is_2D",
)
SHAPE_KEYS = ("ne", "ne_a", "ne_input")
VIEW_OPS = {"NONE", "VIEW", "RESHAPE", "PERMUTE", "TRANSPOSE"}
# Graphs bound to one backend (ours) vs run by libllama's scheduler (per-node CPU fallback).
SCHEDULED_MODULES = {"llm"}
MODULE_TITLES = {
    "apm": "audio encoder (APM)",
    "vpm": "vision encoder (VPM)",
    "tts": "TTS + projector",
    "conformer": "Token2Mel conformer",
    "dit": "Token2Mel DiT (CFG batch)",
    "llm": "LLM (libllama)",
}
GGML_PREC_F32 = 10


def parse_params(text: str) -> dict[str, str]:
    """``type=f32,ne=[1,2,3,4],mask=1`` -> {"type": "f32", "ne": "[1,2,3,4]", "mask": "1"}."""
    return {m.group(1): m.group(2) for m in re.finditer(r"(\w+)=(\[[^\]]*\]|[^,]*)", text)}


def distill_csv(path: str | Path) -> dict:
    """ggml's test-backend-ops support CSV -> {op: [{sig, supported, unsupported, shapes}]}."""
    groups: dict[tuple, dict] = {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            params = parse_params(row["op_params"])
            sig = {k: params[k] for k in SIGNATURE_KEYS if k in params}
            key = (row["op_name"], tuple(sorted(sig.items())))
            g = groups.setdefault(key, {"sig": sig, "supported": 0, "unsupported": 0, "shapes": set()})
            ok = row["supported"] == "1"
            g["supported" if ok else "unsupported"] += 1
            if ok:
                g["shapes"].update(params[k] for k in SHAPE_KEYS if k in params)
    ops: dict[str, list] = {}
    for (op, _), g in sorted(groups.items(), key=lambda kv: (kv[0][0], str(kv[0][1]))):
        ops.setdefault(op, []).append({**g, "shapes": sorted(g["shapes"])})
    return ops


@dataclass
class OpTable:
    ops: dict[str, list[dict]]
    source: str = ""

    @classmethod
    def load(cls, path: str | Path | None = None) -> OpTable:
        """The packaged table, a distilled JSON, or a raw ggml ``<BACKEND>.csv``."""
        p = Path(path) if path else TABLE_PATH
        try:
            if p.suffix == ".csv":
                return cls(distill_csv(p), str(p))
            data = json.loads(p.read_text())
            return cls(data["ops"], data.get("source", str(p)))
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise InvalidArgumentError(f"cannot read the op-support table {p}: {type(e).__name__}: {e}") from e


def _f32(word: int) -> float:
    return struct.unpack("<f", struct.pack("<i", word))[0]


def node_signature(node: dict) -> dict[str, str]:
    """The table's signature parameters that can be read off a recorded node."""
    op, src = node["op"], node["src"]
    slots = dict(zip(node["src_slots"], src))
    p = node["op_params"]
    first = src[0]["type"] if src else node["dst"]["type"]
    sig = {"type": first}
    if op == "MUL_MAT":
        sig = {"type_a": src[0]["type"], "type_b": src[1]["type"]}
    elif op in ("CPY", "DUP") and len(src) >= 1:
        sig = {"type_src": src[0]["type"], "type_dst": node["dst"]["type"]} if op == "CPY" else {"type": first}
    elif op == "SET_ROWS":
        sig = {"type": node["dst"]["type"], "type_idx": src[1]["type"]}
    elif op == "SOFT_MAX":
        sig.update(mask=str(int(1 in slots)), sinks=str(int(2 in slots)))
        if 1 in slots:
            sig["m_prec"] = slots[1]["type"]
    elif op == "FLASH_ATTN_EXT":
        q, k, v = slots[0], slots[1], slots[2]
        sig = {
            "hsk": str(q["ne"][0]),
            "hsv": str(v["ne"][0]),
            "type_KV": k["type"],
            "mask": str(int(3 in slots)),
            "sinks": str(int(4 in slots)),
            "logit_softcap": f"{_f32(p[2]):.6f}",
        }
    elif op == "SCALE":
        sig["bias"] = f"{_f32(p[1]):.6f}"
    elif op == "PAD":
        sig["circular"] = str(int(p[8] != 0))
    elif op == "ROPE":
        sig["mode"] = str(p[2])
    elif op == "GLU":
        sig["swapped"] = str(int(p[1] != 0))
    elif op == "IM2COL":
        sig = {
            "type_input": src[1]["type"],
            "type_kernel": src[0]["type"],
            "dst_type": node["dst"]["type"],
            "is_2D": str(int(p[6] != 0)),
        }
    return sig


@dataclass
class NodeVerdict:
    desc: str
    signature: dict[str, str]
    status: str  # "view", "supported", "unsupported", "untested"
    shape_tested: bool = False


def classify(node: dict, table: OpTable) -> NodeVerdict:
    desc = node["desc"]
    sig = node_signature(node)
    if node["op"] in VIEW_OPS:
        return NodeVerdict(desc, sig, "view", True)
    groups = table.ops.get(desc)
    if not groups:
        return NodeVerdict(desc, sig, "untested")
    matches = [g for g in groups if all(g["sig"].get(k, v) == v for k, v in sig.items())]
    ok = [g for g in matches if g["supported"]]
    if not ok:
        return NodeVerdict(desc, sig, "unsupported")
    src0 = node["src"][0]["ne"] if node["src"] else node["dst"]["ne"]
    shape = "[" + ",".join(str(x) for x in src0) + "]"
    return NodeVerdict(desc, sig, "supported", any(shape in g["shapes"] for g in ok))


@dataclass
class ModuleReport:
    module: str
    graphs: list[str] = field(default_factory=list)
    nodes: int = 0
    views: int = 0
    supported: int = 0
    shape_tested: int = 0
    unsupported: Counter = field(default_factory=Counter)  # "DESC type=..." -> count

    @property
    def placement(self) -> str:
        if self.module in SCHEDULED_MODULES:
            return "scheduler: unsupported nodes fall back to the CPU"
        return "bound to the device: unsupported nodes are refused before compute"

    def as_dict(self) -> dict:
        return {
            "module": self.module,
            "graphs": self.graphs,
            "nodes": self.nodes,
            "views": self.views,
            "supported": self.supported,
            "shape_tested": self.shape_tested,
            "unsupported": dict(self.unsupported),
            "placement": self.placement,
        }


def _describe(v: NodeVerdict) -> str:
    return v.desc + "(" + ",".join(f"{k}={x}" for k, x in sorted(v.signature.items())) + ")"


def audit_graphs(graphs: list[dict], table: OpTable) -> dict[str, ModuleReport]:
    reports: dict[str, ModuleReport] = {}
    for g in graphs:
        r = reports.setdefault(g["module"], ModuleReport(g["module"]))
        if g["graph"] not in r.graphs:
            r.graphs.append(g["graph"])
        for node in g["nodes"]:
            v = classify(node, table)
            r.nodes += 1
            if v.status == "view":
                r.views += 1
            elif v.status == "supported":
                r.supported += 1
                r.shape_tested += v.shape_tested
            else:
                r.unsupported[_describe(v) + ("" if v.status == "unsupported" else " [not in table]")] += 1
    return reports


def flash_attn_ok(table: OpTable, head_dim: int) -> bool:
    """Whether the table has fused attention for this head size with F16 K/V and no sinks."""
    node = {
        "op": "FLASH_ATTN_EXT",
        "desc": "FLASH_ATTN_EXT",
        "op_params": [0] * 16,
        "src_slots": [0, 1, 2, 3],
        "dst": {"type": "f32", "ne": [head_dim, 1, 1, 1]},
        "src": [
            {"type": "f32", "ne": [head_dim, 1, 1, 1]},
            {"type": "f16", "ne": [head_dim, 1, 1, 1]},
            {"type": "f16", "ne": [head_dim, 1, 1, 1]},
            {"type": "f16", "ne": [1, 1, 1, 1]},
        ],
    }
    return classify(node, table).status == "supported"


def record_model_graphs(
    model_dir: str | Path, table: OpTable, threads: int = 2, notes: list[str] | None = None
) -> list[dict]:
    """Runs one representative call of every device graph on the CPU, built as a CANN device
    would build it (fused attention only where the table has it), and returns the recordings.
    The formulation choices made are appended to `notes`."""
    notes = notes if notes is not None else []
    from ..modelset.layout import load
    from .apm import AudioEncoder
    from .token2wav import Token2Wav
    from .vpm import ImageEncoder

    models = load(model_dir)
    rng = np.random.default_rng(0)
    core.start_graph_recording()
    try:
        audio = AudioEncoder(models.root, "cpu", threads)
        speech = (0.1 * rng.standard_normal(16000)).astype(np.float32)
        audio.encode(speech)
        audio.encode_chunk(speech)
        probe = ImageEncoder(models.root, "cpu", threads)
        d = probe.vpm.dims
        heads = {d.hidden // max(1, d.heads), d.llm_embd // max(1, d.resampler_heads)}
        fused = sorted(h for h in heads if flash_attn_ok(table, h))
        notes.append(
            f"vpm: fused attention for head sizes {fused}, matmul + softmax for "
            f"{sorted(heads - set(fused))} (chosen per device at run time)"
        )
        image = ImageEncoder(models.root, "cpu", threads, flash_attn_dims=fused)
        image.encode(rng.integers(0, 255, (2 * d.patch, 3 * d.patch, 3), dtype=np.uint8))
        # an image's slices go through one batched graph (the resampler's queries repeated per slice)
        image.vpm.encode(rng.standard_normal((2, 3, 2 * d.patch, 3 * d.patch)).astype(np.float32))
        del probe

        llm_model = core.LlmModel(str(models.llm), "cpu")
        meta = core.GgufFile(str(models.llm)).metadata()
        arch = meta.get("general.architecture", "")
        head_dim = meta.get(f"{arch}.attention.key_length", llm_model.info.n_embd // llm_model.info.n_head)
        # libllama's auto mode turns fused attention on where the device supports it.
        fa = int(flash_attn_ok(table, int(head_dim)))
        notes.append(
            f"llm: flash attention {'on' if fa else 'off'} (head size {head_dim}, F16 KV), "
            "as libllama's auto mode picks"
        )
        llm = core.Llm(llm_model, 256, 64, threads, False, fa, True)
        llm.eval_tokens(list(range(1, 9)))
        llm.decode_step(3)

        tts = core.Tts(str(models.path("tts")), str(models.path("projector")), "cpu", threads, 256, False)
        cond = tts.conditions([1, 2, 3], rng.standard_normal((3, tts.dims.llm_embd)).astype(np.float32), False)
        tts.forward(cond)
        tts.forward(tts.code_embedding(1))

        with Token2Wav(models.root, "cpu", threads=1, token2mel="graph") as t2w:  # the graphs a device runs
            t2w.push(rng.integers(0, 6561, 28).tolist())
            t2w.push(rng.integers(0, 6561, 5).tolist(), final=True)
    finally:
        graphs = core.stop_graph_recording()
    return graphs


@dataclass
class AuditResult:
    table: str
    reports: dict[str, ModuleReport]
    notes: list[str] = field(default_factory=list)

    @property
    def unsupported(self) -> Counter:
        total: Counter = Counter()
        for r in self.reports.values():
            total.update({f"{r.module}: {k}": n for k, n in r.unsupported.items()})
        return total

    def as_dict(self) -> dict:
        return {
            "table": self.table,
            "modules": [r.as_dict() for r in self.reports.values()],
            "notes": self.notes,
            "unsupported": dict(self.unsupported),
            "vocoder": "CPU by design (HiFT on its own pinned thread pool; not a ggml graph)",
        }

    def markdown(self) -> str:
        lines = [
            "| module | graphs | nodes | views | supported | shape in table | unsupported | on CANN |",
            "|---|---|---:|---:|---:|---:|---:|---|",
        ]
        for r in self.reports.values():
            lines.append(
                f"| {MODULE_TITLES.get(r.module, r.module)} | {', '.join(r.graphs)} | {r.nodes} | {r.views} | "
                f"{r.supported} | {r.shape_tested} | {sum(r.unsupported.values())} | {r.placement} |"
            )
        lines.append("| vocoder (HiFT) | - | - | - | - | - | - | CPU by design, own pinned pool |")
        lines += [""] + [f"note: {n}" for n in self.notes]
        lines += [f"unsupported: {what} x{n}" for what, n in sorted(self.unsupported.items())]
        return "\n".join(lines)


def run_audit(model_dir: str | Path, table_path: str | Path | None = None, threads: int = 2) -> AuditResult:
    table = OpTable.load(table_path)
    notes: list[str] = []
    graphs = record_model_graphs(model_dir, table, threads, notes)
    return AuditResult(table.source, audit_graphs(graphs, table), notes)
