"""Steady-state throughput of the convolution tiles' inner loops, on paper: each kernel set's
source compiled to assembly (a cross compiler for aarch64), the innermost loop of its main tile
fed to llvm-mca for a CPU model, and the loop's FMAs per cycle set against that core's peak.
It answers "how close to the FMA pipes does this loop run" on CPUs we have no access to
(Kunpeng 920 = tsv110, Neoverse N1), and checks that no accumulator is spilled in the loop.

    python benchmarks/kernel_mca.py [--out FILE]

Then, for the vocoder (35.5 GFLOP per second of audio, docs/performance.md), what the loop rate
predicts per second of audio on 8, 16 and 24 Kunpeng 920 threads at 2.6 GHz, derated by the
fraction of its loop bound our vocoder reaches on this machine's own set (measured here).
Needs llvm-mca (Debian: llvm) and, for aarch64, aarch64-linux-gnu-g++.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import timed, write_result  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
KERNELS = ROOT / "native" / "src" / "kernels"
VOCODER_GFLOP = 35.5

# set -> (compiler, flags, main tile symbol fragment, FMA mnemonic, lanes per FMA, CPU models)
SETS = {
    "neon": ("aarch64-linux-gnu-g++", [], "tile8x12ILi8ELi3E", "fmla", 4, ["tsv110", "neoverse-n1"]),
    "avx2": ("g++", ["-mavx2", "-mfma", "-mf16c"], "tile4x24ILi4ELi3E", "vfmadd", 8, ["znver3", "haswell"]),
    "avx512": (
        "g++",
        ["-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mavx2", "-mfma"],
        "F32Tile4tileILi8ELi3E",
        "vfmadd",
        16,
        ["skylake-avx512", "icelake-server"],
    ),
}
TRIPLE = {"neon": "aarch64", "avx2": "x86_64", "avx512": "x86_64"}
PEAK_FMA_PER_CYCLE = 2  # two FMA pipes on every core modelled here
KUNPENG_GHZ = 2.6


def inner_loop(asm: str, frag: str, fma: str) -> list[str]:
    """The innermost loop (no label inside) with the most FMAs in the main tile's function (or in
    conv_block, where the compiler inlined the tile): from its label to the backward branch."""
    symbols = re.findall(r"^(\S+):", asm, re.M)
    symbol = next((m for m in symbols if frag in m), None) or next(m for m in symbols if "conv_block" in m)
    lines = asm[asm.index(symbol + ":") :].splitlines()[1:]
    end = next((i for i, x in enumerate(lines) if re.match(r"^\s+\.size\s", x)), len(lines))
    lines = lines[:end]
    best: list[str] = []
    for i, line in enumerate(lines):
        m = re.match(r"^\s+(?:b\.?\w*|j\w+)\s+(\.L\w+)$", line)
        if not m:
            continue
        start = next((j for j in range(i, -1, -1) if lines[j].startswith(m.group(1) + ":")), None)
        if start is None or any(re.match(r"^\.L\w+:", x) for x in lines[start + 1 : i]):
            continue  # a forward branch, or an outer loop
        loop = [x for x in lines[start + 1 : i + 1] if x.strip() and not re.match(r"^\s*\.", x)]
        if sum(fma in x for x in loop) > sum(fma in x for x in best):
            best = loop
    if not best:
        raise SystemExit(f"no FMA loop found in {symbol}")
    return best


def analyse(isa: str) -> list[dict]:
    cxx, flags, frag, fma, lanes, cpus = SETS[isa]
    if not shutil.which(cxx):
        print(f"{isa}: {cxx} not found, skipped", file=sys.stderr)
        return []
    with tempfile.TemporaryDirectory() as d:
        s = Path(d) / "variant.s"
        cmd = [cxx, "-std=gnu++17", "-O3", "-DNDEBUG", "-fno-trapping-math", "-S", *flags, f"-I{KERNELS}"]
        cmd += [f"-DOMNI_KERNEL_SET={isa}", f"-DOMNI_KERNEL_SET_{isa.upper()}", str(KERNELS / "variant.cpp")]
        cmd += ["-o", str(s)]
        subprocess.run(cmd, check=True)
        loop = inner_loop(s.read_text(), frag, fma)
        (Path(d) / "loop.s").write_text("\n".join(loop) + "\n")
        n_fma = sum(1 for x in loop if x.split()[0].startswith(fma))
        spills = sum(1 for x in loop if re.search(r"\b(stp|str|vmovups|vmovaps)\b.*(sp|rsp)", x))
        rows = []
        for cpu in cpus:
            out = subprocess.run(
                ["llvm-mca", f"-mtriple={TRIPLE[isa]}", f"-mcpu={cpu}", "-iterations=1000", str(Path(d) / "loop.s")],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
            cycles = int(re.search(r"Total Cycles:\s+(\d+)", out).group(1)) / 1000
            frac = n_fma / cycles / PEAK_FMA_PER_CYCLE
            rows.append(
                {
                    "set": isa,
                    "cpu": cpu,
                    "fma_per_iteration": n_fma,
                    "cycles_per_iteration": cycles,
                    "fraction_of_fma_peak": frac,
                    "flops_per_cycle": 2 * lanes * n_fma / cycles,
                    "stack_stores_in_loop": spills,
                    "instructions": len(loop),
                }  # fmt: skip
            )
            print(
                f"{isa:7} {cpu:15} {n_fma} FMAs in {cycles:.1f} cycles per step of K: {100 * frac:.0f} % of the "
                f"FMA peak ({2 * lanes * n_fma / cycles:.1f} FLOP/cycle); stack stores in the loop: {spills}"
            )
        return rows


def measured_derate() -> float:
    """Our whole vocoder's GFLOP/s over the BLAS's sgemm GFLOP/s, both on one thread of this
    machine: how much of a kernel-bound rate survives memory traffic, epilogues and the pool."""
    import numpy as np
    from vocoder import FRAMES, GFLOP_PER_CHUNK, _real_hifigan

    from llama_omni_py._native import core

    path = _real_hifigan(Path.home() / ".cache" / "llama-omni" / "bench-hifigan")
    voc = core.internal.HiftVocoder(str(path), 1)
    rng = np.random.default_rng(0)
    mel = rng.standard_normal((80, FRAMES)).astype(np.float32)
    src = (0.1 * rng.standard_normal(FRAMES * 480)).astype(np.float32)
    ms = min(timed(lambda: voc.decode(mel, src), 3))
    return min(1.0, GFLOP_PER_CHUNK / ms * 1000 / core.internal.sgemm_gflops(1))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", default="neon,avx2,avx512")
    ap.add_argument("--out", help="JSON result path (default benchmarks/results/kernel_mca-<time>.json)")
    ap.add_argument("--derate", type=float, help="fraction of its loop bound the vocoder reaches (default: measured)")
    args = ap.parse_args(argv)
    if not shutil.which("llvm-mca"):
        raise SystemExit("llvm-mca not found (Debian: apt-get install llvm)")
    rows = [r for isa in args.sets.split(",") for r in analyse(isa)]
    derate = args.derate if args.derate is not None else measured_derate()
    predict = []
    for r in rows:
        if r["cpu"] != "tsv110":
            continue
        per_core = KUNPENG_GHZ * r["flops_per_cycle"] * derate  # GFLOP/s
        for threads in (8, 16, 24):
            ms = VOCODER_GFLOP / (per_core * threads) * 1000
            predict.append({"threads": threads, "vocoder_ms_per_s": ms, "gflops_per_core": per_core})
            print(f"Kunpeng 920 (tsv110 model, {KUNPENG_GHZ} GHz, derate {derate:.2f}): vocoder {ms:.0f} ms per "
                  f"second of audio on {threads} threads (perfect scaling)")  # fmt: skip
    write_result("kernel_mca", {"rows": rows, "derate": derate, "kunpeng_vocoder": predict}, out=args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
