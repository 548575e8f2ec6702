#!/usr/bin/env python3
"""Regenerates llama_omni_py/data/cann_ops.json from ggml's CANN operator support table
(docs/ops/CANN.csv of the llama.cpp tree we link; llama-cpp-python's sdist carries it under
vendor/llama.cpp). Run it when the llama.cpp pin changes:

    python scripts/make-cann-op-table.py path/to/CANN.csv
"""

import argparse
import hashlib
import json
import sys
from pathlib import Path

from llama_omni_py.modules.cann_audit import distill_csv  # the installed package

ROOT = Path(__file__).resolve().parent.parent


def pinned_llama_cpp() -> str:
    pin = dict(
        line.split(" = ", 1)
        for line in (ROOT / "vendor" / "llama.cpp.pin").read_text().splitlines()
        if " = " in line and not line.startswith("#")
    )
    return f"llama-cpp-python {pin['version']} (ggml {pin['ggml_version']}, {pin['ggml_commit']})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv", help="ggml's docs/ops/CANN.csv")
    ap.add_argument("-o", "--out", default=str(ROOT / "llama_omni_py" / "data" / "cann_ops.json"))
    ap.add_argument("--llama-cpp", default=pinned_llama_cpp(), help="which llama.cpp the table describes")
    a = ap.parse_args()
    raw = Path(a.csv).read_bytes()
    data = {
        "source": f"ggml docs/ops/CANN.csv of {a.llama_cpp} (sha256 {hashlib.sha256(raw).hexdigest()[:16]})",
        "ops": distill_csv(a.csv),
    }
    Path(a.out).write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    print(f"{a.out}: {len(data['ops'])} ops")
    return 0


if __name__ == "__main__":
    sys.exit(main())
