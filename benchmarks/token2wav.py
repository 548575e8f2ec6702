"""Token2Wav speed on the CPU: ms per 1 s of audio (one steady 28-token window) for Token2Mel
(5 CFM steps, caches at the voice prompt's length) and for the HiFT vocoder (58 frames), at
each thread count, beside the PyTorch reference on the same random weights in the same run
(alternating A B A B), plus the vocoder's achieved GFLOP/s beside a measured sgemm rate.

    python benchmarks/token2wav.py [--model-dir DIR] [--device cpu] [--threads 1,2] [--chunks 5] [--steps 5]
        [--engines auto] [--mode speed,contention,overlap] [--baseline DIR] [--no-reference] [--out FILE]

Modes (any of them, comma-separated):

* ``speed`` (default): Token2Mel and vocoder ms per window for each of ``--engines``
  (``auto``, ``graph``, ``native``; ``+bf16`` adds the BF16 path, e.g. ``native+bf16``: its
  speed and the SNR of its audio against the same ``token2mel`` in F32; ``@SET`` runs the row on that
  CPU kernel set, e.g. ``native@generic,native@avx2``), and the PyTorch reference.
* ``contention``: wall ms per window, quiet and beside one busy competitor process (a
  single-threaded busy loop, pinned with ``--competitor-cpu``), alternating quiet/busy round by
  round, for each of ``--engines``, the PyTorch reference, ``--baseline`` (another build of the
  package, e.g. an older commit's, imported from that directory in a fresh process per round)
  and llama.cpp-omni (``--lco-src``/``--lco-build``: its tree and a build you made, see
  benchmarks/lco.py; at our thread count unless ``--lco-threads 0`` keeps its own defaults);
  the ratio busy / quiet, and each row's time over llama.cpp-omni's.
* ``overlap``: Token2Mel as a stand-in device stage that releases the CPU for ``--device-ms``
  (uniform in the range, per window) and hands on real mel windows, the vocoder on its CPU
  pool; ms per window run one after the other (one Token2Wav stage) and as two pipeline
  stages (the product's stages and Pipeline), alternating, with the audio of the two checked
  equal. Overlapped, a window costs max(device, vocoder) instead of the sum.

--device puts Token2Mel on an accelerator (cuda:0, cann:0); the vocoder stays on the CPU with
--threads workers. The RTF printed is (Token2Mel + vocoder) ms per 1000 ms of audio.

Without --model-dir it writes a real-dimension token2wav-gguf (random weights, ~740 MB) into
~/.cache/llama-omni/bench-token2wav. Needs scripts/install-reference.sh for the comparison.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))

from common import busy_competitor, kernel_set, timed, write_result  # noqa: E402

from llama_omni_py._native import core  # noqa: E402
from llama_omni_py.config import Token2WavConfig  # noqa: E402
from llama_omni_py.modelset import generate as modelgen  # noqa: E402
from llama_omni_py.modelset import spec as ms  # noqa: E402

VOCODER_FRAMES, VOCODER_GFLOP = 58, 35.5  # docs/performance.md
MODES = ("speed", "contention", "overlap")


def real_token2wav(cache: Path) -> Path:
    for f in ms.files_of("token2wav"):
        if not (cache / f.relpath).exists():
            modelgen.write_file(f, cache, ms.preset("real"), ms.build_vocab(False), seed=0)
    return cache / ms.T2W_DIR


def variants(spec: str) -> list[dict]:
    """``auto,native+bf16,native@avx2`` -> [{"label", "token2mel", "bf16", "isa"}, ...]."""
    out = []
    for label in spec.split(","):
        head, _, isa = label.partition("@")
        token2mel, _, extra = head.partition("+")
        if extra not in ("", "bf16"):
            raise SystemExit(f"unknown token2mel variant {label!r} (TOKEN2MEL[+bf16][@SET])")
        if isa and isa not in core.internal.cpu_isas():
            raise SystemExit(f"{label!r}: this CPU runs the kernel sets {', '.join(core.internal.cpu_isas())}")
        out.append(
            {"label": label, "token2mel": token2mel, "bf16": extra == "bf16", "isa": isa or core.internal.cpu_isa()}
        )
    return out


def native_options(device: str, **fields):
    """The core's Token2WavOptions of these Token2WavConfig fields (``token2mel`` among them), in
    this build or in an older one (--baseline), where the config filled them itself and called
    the Token2Mel implementation ``engine``."""
    try:
        from llama_omni_py.modules.token2wav import to_native
    except ImportError:  # a build from before the modules folder
        fields["engine"] = fields.pop("token2mel", "auto")
        return Token2WavConfig(**fields).to_native(device)
    return to_native(Token2WavConfig(**fields), device)


def open_stream(t2w: Path, device: str, steps: int, threads: int, token2mel: str = "auto", bf16: bool = False):
    """Our streaming Token2Wav, past its first window (no vocoder cache yet: not steady state).
    The reference cache policy, so both implementations attend over the same bounded caches.
    token2mel and BF16 are passed only when asked for, so an older build (--baseline) runs too."""
    try:
        options = native_options(
            device, steps=steps, threads=threads, cache_policy="reference", token2mel=token2mel, bf16=bf16
        )
        stream = core.Token2Wav(str(t2w), options)
    except TypeError:  # an older build (--baseline) takes the options one by one, token2mel as engine
        extra = {"engine": token2mel} if token2mel != "auto" else {}
        extra.update({"bf16": True} if bf16 else {})
        stream = core.Token2Wav(str(t2w), device, steps, threads, cache_policy="reference", **extra)
    stream.push(np.arange(25, dtype=np.int32))
    return stream


def open_stream_on(isa: str, *args):
    """open_stream with the given CPU kernel set in use (it picks the weights' layout)."""
    with kernel_set(isa):
        return open_stream(*args)


def push_ms(stream, window: np.ndarray, n: int) -> list[float]:
    """Wall ms of n pushes of one window each (Token2Mel + vocoder)."""
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        stream.push(window)
        out.append((time.perf_counter() - t0) * 1000)
    return out


def push_ms_on(isa: str, stream, window: np.ndarray, n: int) -> list[float]:
    """push_ms on the given CPU kernel set."""
    with kernel_set(isa):
        return push_ms(stream, window, n)


def snr_db(want: np.ndarray, got: np.ndarray) -> float:
    want, got = want.astype(np.float64), got.astype(np.float64)
    return float(10 * np.log10(np.sum(want**2) / max(np.sum((want - got) ** 2), 1e-30)))


class Reference:
    """The PyTorch reference (flow + HiFT) on the same weights, in streaming steady state."""

    def __init__(self, t2w: Path, steps: int, tokens: np.ndarray):
        import torch
        from reference import flow as flow_ref
        from reference import hift as hift_ref
        from reference.token2wav_stream import ReferenceStream, prompt_caches

        self.torch, self.steps = torch, steps
        self.flow = flow_ref.build_flow(str(t2w), steps)
        dit = self.flow.decoder.estimator
        cache, self.spk = prompt_caches(
            str(t2w / "prompt_cache.gguf"), steps, len(dit.blocks), dit.blocks[0].attn.num_heads
        )
        self.hift = hift_ref.build(str(t2w / "hifigan2.gguf"))
        # Steady state: stream a few windows so the caches hold prompt + 100 recent frames, as
        # ours do (its bounding rule, applied by ReferenceStream).
        warm = ReferenceStream(self.flow, self.hift, cache, self.spk, steps)
        for _ in range(4):
            warm.stream(tokens, False)
        self.cache = warm.cache
        self.tokens = torch.from_numpy(tokens.astype(np.int64))[None]
        rng = np.random.default_rng(1)
        self.mel = torch.from_numpy(rng.standard_normal((1, 80, VOCODER_FRAMES)).astype(np.float32))
        self.src = torch.from_numpy((0.1 * rng.standard_normal((1, 1, VOCODER_FRAMES * 480))).astype(np.float32))

    def token2mel(self):
        with self.torch.inference_mode():
            cache = {k: v.clone() for k, v in self.cache.items()}
            self.flow.inference_chunk(self.tokens, self.spk, cache, last_chunk=False, n_timesteps=self.steps)

    def vocoder(self):
        with self.torch.inference_mode():
            self.hift.decode(self.mel, self.src)

    def window_ms(self, n: int) -> list[float]:
        """Wall ms of n windows, Token2Mel then vocoder."""
        return [a + b for a, b in zip(timed(self.token2mel, n), timed(self.vocoder, n))]


def speed(args, t2w, window, ref, threads: int) -> list[dict]:
    rows = []
    for v in variants(args.engines):
        stream = open_stream_on(v["isa"], t2w, args.device, args.steps, threads, v["token2mel"], v["bf16"])
        rows.append({"device": args.device, "threads": threads, **v, "stream": stream})
        rows[-1].update(token2mel_ms=[], vocoder_ms=[], ref_token2mel_ms=[], ref_vocoder_ms=[])
    for _ in range(2):  # A B A B
        for row in rows:
            with kernel_set(row["isa"]):
                for _ in range(args.chunks):
                    row["stream"].push(window)
                    row["token2mel_ms"].append(row["stream"].last_timings["token2mel_ms"])
                    row["vocoder_ms"].append(row["stream"].last_timings["vocoder_ms"])
        if ref is not None:
            t2m, voc = timed(ref.token2mel, args.chunks), timed(ref.vocoder, args.chunks)
            for row in rows:
                row["ref_token2mel_ms"] += t2m
                row["ref_vocoder_ms"] += voc
    sgemm = core.internal.sgemm_gflops(threads)
    for row in rows:
        del row["stream"]
        row.update({k + "_median": statistics.median(v) for k, v in list(row.items()) if isinstance(v, list) and v})
        row["total_ms"] = row["token2mel_ms_median"] + row["vocoder_ms_median"]
        row["rtf"] = row["total_ms"] / 1000.0  # one push = 25 tokens = 1 s of audio
        row["vocoder_gflops"] = VOCODER_GFLOP / row["vocoder_ms_median"] * 1000
        row["sgemm_gflops"] = sgemm
        if row["bf16"]:
            row["bf16_snr_db"] = bf16_snr(args, t2w, threads, row["token2mel"])
        ref_txt = ""
        if row.get("ref_token2mel_ms_median"):
            row["token2mel_vs_ref"] = row["token2mel_ms_median"] / row["ref_token2mel_ms_median"]
            row["vocoder_vs_ref"] = row["vocoder_ms_median"] / row["ref_vocoder_ms_median"]
            ref_txt = (
                f" | PyTorch: token2mel {row['ref_token2mel_ms_median']:.0f} ms, vocoder "
                f"{row['ref_vocoder_ms_median']:.0f} ms (ours/PyTorch {row['token2mel_vs_ref']:.2f}, "
                f"{row['vocoder_vs_ref']:.2f})"
            )
        print(
            f"threads {threads} {row['label']}: token2mel {row['token2mel_ms_median']:.0f} ms, "
            f"vocoder {row['vocoder_ms_median']:.0f} ms, total {row['total_ms']:.0f} ms per 1 s of audio "
            f"(RTF {row['rtf']:.3f}){ref_txt}; vocoder {row['vocoder_gflops']:.0f} GFLOP/s vs sgemm {sgemm:.0f}"
            + (f"; BF16 audio SNR vs F32 {row['bf16_snr_db']:.1f} dB" if row["bf16"] else "")
        )
    return rows


def bf16_snr(args, t2w: Path, threads: int, token2mel: str) -> float:
    """SNR (dB) of the BF16 path's audio against F32, same token2mel, tokens and noise."""
    tokens = np.random.default_rng(3).integers(0, 6561, 4 * 25 + 10).astype(np.int32)
    audio = []
    for bf16 in (False, True):
        t = core.Token2Wav(
            str(t2w), native_options(args.device, steps=args.steps, threads=threads, token2mel=token2mel, bf16=bf16)
        )
        audio.append(
            np.concatenate([t.push(tokens[i : i + 25]) for i in range(0, 100, 25)] + [t.push(tokens[100:], True)])
        )
    return snr_db(*audio)


def baseline_ms(args, t2w: Path, window: np.ndarray, threads: int) -> list[float]:
    """Per-window wall ms of the --baseline build, in a fresh process."""
    job = {"t2w": str(t2w), "device": args.device, "steps": args.steps, "threads": threads, "n": args.chunks}
    job["window"] = window.tolist()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [args.baseline, os.environ.get("PYTHONPATH")])))
    out = subprocess.run(
        [sys.executable, __file__, "--worker", json.dumps(job)], env=env, check=True, capture_output=True, text=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def worker(job: dict) -> None:
    stream = open_stream(Path(job["t2w"]), job["device"], job["steps"], job["threads"])
    window = np.asarray(job["window"], np.int32)
    push_ms(stream, window, 1)  # warm
    print(json.dumps(push_ms(stream, window, job["n"])))


def contention(args, t2w, window, ref, threads: int) -> list[dict]:
    """Quiet vs one busy competitor, alternating (quiet first in even rounds, busy first in odd)."""
    rows = [
        {
            "label": v["label"],
            "isa": v["isa"],
            "stream": open_stream_on(v["isa"], t2w, args.device, args.steps, threads, v["token2mel"], v["bf16"]),
        }
        for v in variants(args.engines)
    ]
    if ref is not None:
        rows.append({"label": "pytorch", "measure": ref.window_ms})
    if args.baseline:
        rows.append({"label": "baseline", "measure": lambda n: baseline_ms(args, t2w, window, threads)})
    lco_t2w = None
    if args.lco_build:
        import tempfile

        import lco

        exe = lco.build_driver("t2w_driver", args.lco_src, args.lco_build)
        lco_threads = threads if args.lco_threads is None else args.lco_threads
        lco_t2w = lco.Token2Wav(exe, t2w, lco_threads, np.tile(window, 4), Path(tempfile.mkdtemp()))
        lco_t2w.window_ms(1)  # past its first window, as ours
        rows.append({"label": "llama.cpp-omni", "measure": lco_t2w.window_ms})
    for row in rows:
        row.update(threads=threads, quiet_ms=[], busy_ms=[])
        if "stream" in row:
            row["measure"] = lambda n, s=row["stream"], isa=row["isa"]: push_ms_on(isa, s, window, n)
    for r in range(args.rounds):
        for busy in (False, True) if r % 2 == 0 else (True, False):
            with busy_competitor(args.competitor_cpu) if busy else contextlib.nullcontext():
                for row in rows:
                    row["busy_ms" if busy else "quiet_ms"] += row["measure"](args.chunks)
    if lco_t2w is not None:
        lco_t2w.close()
    lco_row = next((r for r in rows if r["label"] == "llama.cpp-omni"), None)
    for row in rows:
        del row["measure"]
        row.pop("stream", None)
        row["quiet_ms_median"] = statistics.median(row["quiet_ms"])
        row["busy_ms_median"] = statistics.median(row["busy_ms"])
        row["busy_over_quiet"] = row["busy_ms_median"] / row["quiet_ms_median"]
    for row in rows:
        vs = ""
        if lco_row is not None:
            row["quiet_vs_lco"] = row["quiet_ms_median"] / lco_row["quiet_ms_median"]
            row["busy_vs_lco"] = row["busy_ms_median"] / lco_row["busy_ms_median"]
            vs = f"; vs llama.cpp-omni {row['quiet_vs_lco']:.2f} x quiet, {row['busy_vs_lco']:.2f} x busy"
        print(
            f"contention, threads {threads} {row['label']}: quiet {row['quiet_ms_median']:.0f} ms, "
            f"beside a busy process {row['busy_ms_median']:.0f} ms per window ({row['busy_over_quiet']:.2f} x){vs}"
        )
    return rows


class StandInDevice:
    """Token2Wav whose Token2Mel half is a stand-in for a device: it sleeps (the CPU free) for
    the given time per window and hands on mel windows made beforehand; the vocoder is real."""

    def __init__(self, stream, windows: list, device_ms: list[float]):
        self.stream, self.windows, self.device_ms = stream, list(windows), list(device_ms)

    def reset(self):  # the windows were made on a fresh stream already
        pass

    def push_mel(self, tokens, final: bool = False) -> list:
        if not len(tokens):
            return []
        time.sleep(self.device_ms.pop(0) / 1000)
        return [self.windows.pop(0)]

    def vocode(self, window) -> np.ndarray:
        return self.stream.vocode(window)

    def push(self, tokens, final: bool = False) -> np.ndarray:
        return np.concatenate([self.vocode(w) for w in self.push_mel(tokens, final)] or [np.zeros(0, np.float32)])


def overlap(args, t2w, window, threads: int) -> dict:
    from llama_omni_py.modules.tts import CodeChunk
    from llama_omni_py.orchestration import stages
    from llama_omni_py.orchestration.channels import Pipeline

    v = variants(args.engines)[0]
    options = native_options(args.device, steps=args.steps, threads=threads, token2mel=v["token2mel"], bf16=v["bf16"])
    stream = core.Token2Wav(str(t2w), options)
    lo, hi = (float(x) for x in args.device_ms.split(","))
    n = args.windows
    device_ms = list(np.random.default_rng(2).uniform(lo, hi, n))
    out = {"threads": threads, "windows": n, "device_ms": device_ms, "sequential_ms": [], "overlapped_ms": []}
    out.update(vocoder_ms=[], audio_equal=True)
    audio = {}
    for r in range(args.rounds):
        for two in (False, True) if r % 2 == 0 else (True, False):
            stream.reset()
            windows = [stream.push_mel(window)[0] for _ in range(n)]  # untimed: the device's work
            t2w_like = StandInDevice(stream, windows, device_ms)

            def source(emit):
                for _ in range(n):
                    emit(CodeChunk(window.tolist(), False))
                emit(CodeChunk([], True))

            body = stages.token2wav_stages(t2w_like, two)
            t0 = time.perf_counter()
            pipe = Pipeline(("codes", source), body, [n + 1] * (len(body) + 1))
            got = np.concatenate([c.audio for c in pipe])
            per_window = (time.perf_counter() - t0) * 1000 / n
            pipe.close()
            out["overlapped_ms" if two else "sequential_ms"].append(per_window)
            out["vocoder_ms"].append(stream.total_timings["vocoder_ms"] / n)
            if two in audio:
                out["audio_equal"] &= bool(np.array_equal(audio[two], got))
            audio[two] = got
    out["audio_equal"] &= bool(np.array_equal(audio[False], audio[True]))
    for k in ("sequential_ms", "overlapped_ms", "vocoder_ms"):
        out[k + "_median"] = statistics.median(out[k])
    dev = statistics.mean(device_ms)
    out["device_ms_mean"] = dev
    out["sum_ms"] = dev + out["vocoder_ms_median"]
    out["max_ms"] = max(dev, out["vocoder_ms_median"])
    print(
        f"overlap, threads {threads}: stand-in device {dev:.0f} ms + vocoder {out['vocoder_ms_median']:.0f} ms per "
        f"window; one stage {out['sequential_ms_median']:.0f} ms, two stages {out['overlapped_ms_median']:.0f} ms "
        f"per window (sum {out['sum_ms']:.0f}, max {out['max_ms']:.0f}); same audio: {out['audio_equal']}"
    )
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model-dir", help="module set (or token2wav-gguf dir) at real dimensions")
    ap.add_argument("--device", default="cpu", help="Token2Mel's device (the vocoder runs on the CPU)")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--chunks", type=int, default=5, help="windows per measurement")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument(
        "--engines",
        default="auto",
        help="Token2Mel implementations (token2mel) to compare: auto, graph, native[+bf16][@SET]",
    )
    ap.add_argument("--mode", default="speed", help="comma-separated: " + ", ".join(MODES))
    ap.add_argument("--rounds", type=int, default=2, help="contention/overlap: alternating rounds")
    ap.add_argument("--competitor-cpu", type=int, help="contention: pin the busy competitor to this CPU")
    ap.add_argument("--baseline", help="contention: a directory holding another build of llama_omni_py")
    ap.add_argument("--lco-src", help="contention: a llama.cpp-omni source tree (with --lco-build)")
    ap.add_argument("--lco-build", help="contention: the build directory you made of --lco-src (target omni)")
    ap.add_argument("--lco-threads", type=int, help="llama.cpp-omni's threads (default ours; 0: its own defaults)")
    ap.add_argument("--device-ms", default="100,140", help="overlap: the stand-in device's ms per window (range)")
    ap.add_argument("--windows", type=int, default=8, help="overlap: windows per run")
    ap.add_argument("--no-reference", action="store_true")
    ap.add_argument("--out")
    ap.add_argument("--worker", help=argparse.SUPPRESS)  # --baseline's fresh process
    args = ap.parse_args(argv)
    if args.worker:
        worker(json.loads(args.worker))
        return 0
    if bool(args.lco_src) != bool(args.lco_build):
        raise SystemExit("--lco-src and --lco-build go together")
    modes = args.mode.split(",")
    if set(modes) - set(MODES):
        raise SystemExit(f"unknown mode in {args.mode!r}; choose from {', '.join(MODES)}")

    if args.model_dir:
        d = Path(args.model_dir)
        t2w = d if (d / "encoder.gguf").exists() else d / ms.T2W_DIR
    else:
        t2w = real_token2wav(Path.home() / ".cache" / "llama-omni" / "bench-token2wav")
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, 6561, 28).astype(np.int32)
    window = rng.integers(0, 6561, 25).astype(np.int32)

    ref = None
    if not args.no_reference and {"speed", "contention"} & set(modes):
        try:
            ref = Reference(t2w, args.steps, tokens)
        except ImportError as exc:
            print(f"reference unavailable ({exc}); run scripts/install-reference.sh", file=sys.stderr)

    payload = {"device": args.device, "steps": args.steps, "engines": args.engines, "modes": modes}
    payload["load_before"] = os.getloadavg()
    results, cont, over = [], [], []
    for threads in [int(t) for t in args.threads.split(",")]:
        if ref is not None:
            ref.torch.set_num_threads(threads)
        if "speed" in modes:
            results += speed(args, t2w, window, ref, threads)
        if "contention" in modes:
            cont += contention(args, t2w, window, ref, threads)
        if "overlap" in modes:
            over.append(overlap(args, t2w, window, threads))
    payload.update(results=results, contention=cont, overlap=over, load_after=os.getloadavg())
    write_result("token2wav", payload, [t2w / f"{s}.gguf" for s in ms.T2W_FILES], args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
