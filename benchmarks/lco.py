"""llama.cpp-omni beside us in one benchmark run: builds our small driver programs
(benchmarks/lco_drivers/) against a llama.cpp-omni tree and build directory the user provides,
and runs them as long-lived processes the benchmark alternates with our code.

The project never fetches, vendors or builds llama.cpp-omni itself. Build it first (CPU):

    cmake -S SRC -B BUILD -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON \\
        -DGGML_F16C=ON -DGGML_AVX512=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \\
        -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF
    cmake --build BUILD --target omni

(-DGGML_AVX512=ON on a CPU that has it; both ISAs are worth a row.) Then pass --lco-src SRC
--lco-build BUILD to the benchmark.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

import numpy as np

DRIVERS = Path(__file__).resolve().parent / "lco_drivers"
CACHE = Path.home() / ".cache" / "llama-omni-py" / "lco-drivers"


def _libdir(build: Path) -> Path:
    for d in (build / "bin", build):
        if list(d.glob("libomni.*")):
            return d
    raise SystemExit(f"{build}: no libomni shared library (build the 'omni' target of llama.cpp-omni there)")


def build_driver(name: str, src: str | Path, build: str | Path) -> Path:
    """Compiles lco_drivers/<name>.cpp against the tree and its build (cached by content). The
    pipeline driver stands in front of libllama's llama_decode, which needs a shared build."""
    src, build = Path(src).resolve(), Path(build).resolve()
    omni = src / "tools" / "omni"
    if not (omni / "token2wav" / "token2wav-impl.h").exists():
        raise SystemExit(f"{src}: not a llama.cpp-omni source tree (no tools/omni/token2wav)")
    lib = _libdir(build)
    code = (DRIVERS / f"{name}.cpp").read_text()
    key = hashlib.sha256(f"{code}|{src}|{lib}".encode()).hexdigest()[:16]
    exe = CACHE / f"{name}-{key}"
    if exe.exists():
        return exe
    CACHE.mkdir(parents=True, exist_ok=True)
    cxx = shutil.which("g++") or shutil.which("c++")
    cmd = [cxx, "-std=c++17", "-O2", str(DRIVERS / f"{name}.cpp"), "-o", str(exe)]
    cmd += [f"-I{p}" for p in (omni, omni / "token2wav", src / "include", src / "ggml" / "include", src / "common")]
    cmd += [f"-L{lib}", "-lomni", "-lllama", "-lggml", "-lggml-base", "-lggml-cpu", f"-Wl,-rpath,{lib}", "-lpthread"]
    cmd += ["-ldl", "-rdynamic"]
    subprocess.run(cmd, check=True)
    return exe


class Token2Wav:
    """llama.cpp-omni's Token2Wav in a driver process: 28-token windows advancing by 25."""

    def __init__(self, exe: Path, t2w_dir: str | Path, threads: int, tokens: np.ndarray, tmp: Path):
        tok = tmp / "lco-tokens.txt"
        tok.write_text(" ".join(str(int(t)) for t in tokens))
        self.proc = subprocess.Popen(
            [str(exe), str(t2w_dir), str(threads), str(tok)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,  # it prints a timing line per window there
            text=True,
        )
        if self.proc.stdout.readline().strip() != "ready":
            raise RuntimeError(f"llama.cpp-omni Token2Wav driver failed to start (exit {self.proc.wait()})")

    def _ask(self, line: str) -> str:
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        out = self.proc.stdout.readline()
        if not out or out.startswith("error"):
            raise RuntimeError(f"llama.cpp-omni driver: {out.strip() or 'exited'}")
        return out

    def window_ms(self, n: int) -> list[float]:
        """Wall ms of each of the next n windows (Token2Mel + vocoder)."""
        return [float(x) for x in self._ask(f"run {n}").split()]

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.write("quit\n")
            self.proc.stdin.flush()
            self.proc.wait(timeout=30)


def commit_of(src: str | Path) -> str | None:
    """The git commit of a llama.cpp-omni tree (short), or None when it is not a checkout."""
    try:
        out = subprocess.run(["git", "-C", str(src), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    except OSError:
        return None
    return out.stdout.strip() or None


# Test material and the distance every comparison reports (lco_compare, lco_edges, lco_pipeline).
def speech_like(n: int, seed: int) -> np.ndarray:
    """A voiced, amplitude-modulated tone with a little noise (the encoders see no real speech here)."""
    t = np.arange(n) / 16000
    rng = np.random.default_rng(seed)
    f0 = 140 + 40 * np.sin(2 * np.pi * 0.7 * t)
    x = sum(np.sin(2 * np.pi * k * np.cumsum(f0) / 16000) / k for k in range(1, 6))
    return (0.2 * x * (1 + np.sin(2 * np.pi * 3 * t)) + 0.01 * rng.standard_normal(n)).astype(np.float32)


def photo_like(w: int, h: int, seed: int) -> np.ndarray:
    """Smooth gradients, discs and fine stripes: the content resizing treats differently."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    img = np.stack([x / w, y / h, 0.5 + 0.5 * np.sin((x + y) / 37.0)], axis=-1) * 180
    for _ in range(6):
        cx, cy, r = rng.uniform(0, w), rng.uniform(0, h), rng.uniform(0.05, 0.3) * min(w, h)
        img[(x - cx) ** 2 + (y - cy) ** 2 < r * r] = rng.uniform(0, 255, 3)
    img[::7, :, :] = 250  # one-pixel lines: aliasing is where the resize kernels differ most
    return np.clip(img, 0, 255).astype(np.uint8)


def distance(ours: np.ndarray, theirs: np.ndarray) -> float | None:
    if ours.shape != theirs.shape:
        return None
    return float(np.abs(ours - theirs).max() / np.sqrt(np.mean(theirs.astype(np.float64) ** 2)))
