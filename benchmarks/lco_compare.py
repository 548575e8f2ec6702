"""Our modules beside llama.cpp-omni's on the same files and inputs, under each setting of the
fidelity switch (docs/fidelity.md): how far our embeddings, prompt tokens, greedy reply and
speech codes are from what llama.cpp-omni computes.

    python benchmarks/lco_compare.py --lco-src SRC --lco-build BUILD [--model-dir TINY]
        [--pipeline-model-dir REAL] [--threads 2] [--out FILE]

* encoders (``--model-dir``, default: the tiny set written with seed 4): the audio encoder on
  clips on and off the 100 ms grid and on 1 s streaming chunks, the vision encoder on square,
  shrunk, enlarged, thin and portrait images; max |ours - theirs| / RMS(theirs) per input.
* edge cases (benchmarks/lco_edges.py): a pure tone, a voice sample followed by a spoken
  question, streaming chunks of unequal size, JPEG files, audio files at 44.1 and 8 kHz, each
  beside every rule that applies there.
* pipeline (``--pipeline-model-dir``, a real-dimension set, e.g. ``llama-omni make-models DIR
  --size real --seed 4``, whose reduced LLM keeps it small; llama.cpp-omni's TTS loader expects
  the real TTS dimensions): one greedy request per class (text, spoken question, voice cloning,
  image) through llama.cpp-omni's own pipeline (benchmarks/lco_drivers/pipeline_driver.cpp);
  its prompt token ids beside the prompt our engine builds for the same request, our LLM's
  greedy reply to its prompt, and our TTS's greedy codes from its hidden states.

llama.cpp-omni is never fetched or built here: build it yourself (benchmarks/lco.py shows the
commands) and pass its tree and build directory. Writes a JSON report (``--out``) and prints the
tables of docs/fidelity.md.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import lco  # noqa: E402
from lco import distance, photo_like, speech_like  # noqa: E402

from llama_omni_py import fidelity  # noqa: E402
from llama_omni_py.modelset import spec as ms  # noqa: E402
from llama_omni_py.modules.apm import AudioEncoder  # noqa: E402
from llama_omni_py.modules.vpm import ImageEncoder  # noqa: E402

AUDIO_LENGTHS = (1000, 16000, 16500, 47987, 48000, 80037)  # samples at 16 kHz, on and off 100 ms
IMAGE_SIZES = ((448, 448), (960, 540), (200, 150), (1344, 1008), (4000, 300), (300, 800))


class Encoders:
    """llama.cpp-omni's audio and vision encoders in a driver process."""

    def __init__(self, exe: Path, model_dir: Path, threads: int, tmp: Path):
        self.tmp = tmp
        self.proc = subprocess.Popen(
            [str(exe), str(model_dir / ms.APM_FILE), str(model_dir / ms.VPM_FILE), str(threads)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        if self.proc.stdout.readline().strip() != "ready":
            raise SystemExit("llama.cpp-omni's encoders did not load this set (see the driver's stderr)")

    def _ask(self, line: str) -> tuple[int, int]:
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline().split()
        if not answer or answer[0] != "ok":
            raise RuntimeError(f"llama.cpp-omni encoders driver: {' '.join(answer) or 'exited'}")
        return int(answer[1]), int(answer[2])

    def _read(self, shape: tuple[int, int]) -> np.ndarray:
        return np.fromfile(self.tmp / "out.f32", np.float32).reshape(shape)

    def audio(self, samples: np.ndarray, clear: bool = True) -> np.ndarray:
        import soundfile as sf

        sf.write(self.tmp / "in.wav", samples, 16000, subtype="FLOAT")  # read back bit for bit
        return self.audio_file(self.tmp / "in.wav", clear)

    def audio_file(self, path: Path, clear: bool = True) -> np.ndarray:
        """An audio file as its pipeline reads it (its decoder converts the rate and channels)."""
        if clear:
            self._ask("clear")
        return self._read(self._ask(f"audio {path} {self.tmp / 'out.f32'}"))

    def image_file(self, path: Path, max_slices: int = 0) -> np.ndarray:
        """An image file decoded by its pipeline's own loader, then encoded."""
        return self._read(self._ask(f"file {path} {max_slices} {self.tmp / 'out.f32'}"))

    def image(self, rgb: np.ndarray, max_slices: int = 0) -> np.ndarray:
        np.ascontiguousarray(rgb).tofile(self.tmp / "in.rgb")
        h, w = rgb.shape[:2]
        return self._read(self._ask(f"image {self.tmp / 'in.rgb'} {w} {h} {max_slices} {self.tmp / 'out.f32'}"))

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.write("quit\n")
            self.proc.stdin.flush()
            self.proc.wait(timeout=60)


def compare_audio(theirs: Encoders, model_dir: Path, threads: int) -> list[dict]:
    ours = {f: AudioEncoder(model_dir, threads=threads, fidelity=f) for f in fidelity.FIDELITIES}
    rows = []
    for n in AUDIO_LENGTHS:
        x = speech_like(n, seed=n)
        want = theirs.audio(x)
        row = {"input": f"{n / 16000:.4f} s ({n} samples)", "rows": want.shape[0]}
        for f, enc in ours.items():
            got = enc.encode(x) if n >= 1600 or f == "llama.cpp-omni" else np.zeros((0, want.shape[1]), np.float32)
            row[f] = distance(got, want)
            row[f"{f} rows"] = got.shape[0]
        rows.append(row)
    # live input: 1 s chunks, each attending over the ones before (no clearing in between)
    chunks = [speech_like(16000, seed=100 + i) for i in range(4)]
    want = [theirs.audio(c, clear=(i == 0)) for i, c in enumerate(chunks)]
    stream = [{"input": f"stream chunk {i + 1} of 4 (1 s)", "rows": w.shape[0]} for i, w in enumerate(want)]
    for f, enc in ours.items():
        enc.reset_stream()
        for row, c, w in zip(stream, chunks, want):
            got = enc.encode_chunk(c)
            row[f], row[f"{f} rows"] = distance(got, w), got.shape[0]
    return rows + stream


def compare_images(theirs: Encoders, model_dir: Path, threads: int) -> list[dict]:
    ours = ImageEncoder(model_dir, threads=threads)
    rows = []
    for i, (w, h) in enumerate(IMAGE_SIZES):
        img = photo_like(w, h, seed=i)
        want = theirs.image(img)
        got = ours.encode(img)
        rows.append({"input": f"{w}x{h}", "rows": want.shape[0], "ours": distance(got, want)})
    return rows


def table(rows: list[dict], columns: list[str]) -> str:
    def cell(v):
        return "shape differs" if v is None else f"{v:.1e}" if isinstance(v, float) else str(v)

    head = "| input | " + " | ".join(columns) + " |\n|---|" + "---|" * len(columns) + "\n"
    return head + "".join(f"| {r['input']} | " + " | ".join(cell(r.get(c, "")) for c in columns) + " |\n" for r in rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lco-src", required=True, help="llama.cpp-omni source tree")
    ap.add_argument("--lco-build", required=True, help="its build directory (shared libraries)")
    ap.add_argument("--model-dir", type=Path, help="module set for the encoders (default: tiny, seed 4)")
    ap.add_argument("--pipeline-model-dir", type=Path, help="real-dimension set for the pipeline comparison")
    ap.add_argument("--lco-commit", help="the commit of --lco-src, when it is not a git checkout")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, help="JSON report")
    ap.add_argument(
        "--work-dir",
        type=Path,
        help="keep llama.cpp-omni's outputs here (default: a temporary folder); outputs already "
        "there are reused, so that ours can be compared again without running it",
    )
    args = ap.parse_args(argv)

    model_dir = args.model_dir
    if model_dir is None:
        from llama_omni_py.modelset.generate import make_models

        model_dir = Path(tempfile.gettempdir()) / "llama-omni-lco-compare-tiny4"
        if not (model_dir / ms.APM_FILE).exists():
            make_models(model_dir, "tiny", seed=4)
    report: dict = {"lco_src": str(args.lco_src), "lco_commit": args.lco_commit or lco.commit_of(args.lco_src)}
    with tempfile.TemporaryDirectory() as tmp:
        work = args.work_dir or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        import lco_edges

        exe = lco.build_driver("encoders_driver", args.lco_src, args.lco_build)
        enc = Encoders(exe, model_dir, args.threads, Path(tmp))
        try:
            report["audio"] = compare_audio(enc, model_dir, args.threads)
            report["image"] = compare_images(enc, model_dir, args.threads)
            report["edges"] = lco_edges.compare(enc, model_dir, args.threads, Path(tmp))
        finally:
            enc.close()
        cols = [f for f in fidelity.FIDELITIES]
        print(f"llama.cpp-omni {report['lco_commit']}, {model_dir}\n")
        print("Audio encoder, max |ours - llama.cpp-omni| / RMS:\n")
        print(table(report["audio"], ["rows", *cols]))
        print("Vision encoder, max |ours - llama.cpp-omni| / RMS:\n")
        print(table(report["image"], ["rows", "ours"]))
        for name, rows in report["edges"].items():
            print(f"Edge case '{name}', max |ours - llama.cpp-omni| / RMS per rule:\n")
            print(table(rows, lco_edges.COLUMNS[name]))
        if args.pipeline_model_dir is not None:
            import lco_pipeline

            report["pipeline"] = lco_pipeline.compare(args, work)
            print(lco_pipeline.render(report["pipeline"]))
    if args.out:
        args.out.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
