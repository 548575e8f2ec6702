"""``llama-omni bench --mode duplex``: a full-duplex session fed in real time, one unit a second,
shaped like llama.cpp-omni's perf-duplex case (36 units, each 1 s of 16 kHz speech-like audio and
one 540x960 JPEG frame). A producer thread pushes unit i at t0 + i s; the results are read as they
come. Per unit the stage costs, push and result times and the audio are recorded; the metrics are
in duplex_metrics.py. Writes one JSON file (docs/benchmark-schema.md, "Duplex")."""

from __future__ import annotations

import json
import subprocess
import threading
import time
import wave
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import ConfigError, MediaError
from . import duplex_metrics
from .duplex_metrics import _fmt, headline
from .manifest import manifest
from .schema import validate_duplex_run

DUPLEX_SCHEMA_VERSION = 1
CASE_RATE = 16000
CASE_SIZE = (540, 960)  # width x height of perf-duplex's frames


@dataclass(frozen=True)
class DuplexBenchOptions:
    model_dir: str | None = None  # None: the real-dimension random set in the user cache
    device: str = "auto"
    units: int = 36
    interval_s: float = 1.0
    inputs: str | None = None  # a folder of NNNN.wav (+ NNNN.jpg) units; None: generated into the cache
    frames: bool = True  # push the unit's image with it
    repeats: int = 1
    warmup_units: int = 2
    threads: int | None = None
    t2w_threads: int | None = None
    pin: bool | None = None
    force_listen_count: int = 4  # perf-duplex's case listens for its first 4 units
    seed: int = 42
    out_dir: str = "bench-results"
    tag: str = ""

    def __post_init__(self):
        if not isinstance(self.units, int) or self.units < 2:
            raise ConfigError("units", f"must be an integer of at least 2, got {self.units!r}")
        if not isinstance(self.interval_s, (int, float)) or not 0 <= self.interval_s <= 10:
            raise ConfigError("interval_s", f"must be between 0 and 10 seconds, got {self.interval_s!r}")
        for name in ("repeats", "warmup_units", "force_listen_count"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < (1 if name == "repeats" else 0):
                raise ConfigError(name, f"must be a {'positive' if name == 'repeats' else 'non-negative'} integer")
        if self.t2w_threads is not None and (not isinstance(self.t2w_threads, int) or self.t2w_threads < 1):
            raise ConfigError("t2w_threads", f"must be a positive integer, got {self.t2w_threads!r}")


# -- the input case --------------------------------------------------------------------------------
def _speechlike(i: int, n: int) -> np.ndarray:
    """A voiced sound with a moving pitch, syllable-rate loudness and a little noise."""
    rng = np.random.default_rng(1000 + i)
    t = np.arange(n) / CASE_RATE
    f0 = 120 + 40 * np.sin(2 * np.pi * (0.3 + 0.1 * (i % 5)) * t)
    phase = 2 * np.pi * np.cumsum(f0) / CASE_RATE
    voiced = sum(np.sin(k * phase) / k for k in range(1, 8))
    envelope = 0.5 + 0.5 * np.sin(2 * np.pi * 4 * t + i)
    x = 0.15 * voiced * envelope + 0.01 * rng.standard_normal(n)
    return np.clip(x, -1, 1).astype(np.float32)


def _write_wav(path: Path, samples: np.ndarray) -> None:
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(CASE_RATE)
        w.writeframes((samples * 32767).astype("<i2").tobytes())


def make_case(folder: Path, units: int) -> Path:
    """Writes units of NNNN.wav (1 s, 16 kHz, 16-bit) and NNNN.jpg (540x960) into folder."""
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(units):
        _write_wav(folder / f"{i:04d}.wav", _speechlike(i, CASE_RATE))
    w, h = CASE_SIZE
    cmd = [
        "ffmpeg", "-nostdin", "-v", "error", "-y", "-f", "lavfi", "-i", f"testsrc2=size={w}x{h}:rate=1",
        "-frames:v", str(units), "-start_number", "0", "-q:v", "3", str(folder / "%04d.jpg"),
    ]  # fmt: skip
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise MediaError(f"writing the benchmark frames with ffmpeg failed: {e}") from None
    if done.returncode:
        raise MediaError(f"writing the benchmark frames with ffmpeg failed: {done.stderr.strip()[-500:]}")
    return folder


def default_case(units: int) -> Path:
    """The generated case in the user cache (written once, by one process of any that start
    together; the files are deterministic)."""
    from ..env import cache_dir
    from ..modelset.cache_write import build_once

    def complete(folder: Path) -> bool:
        return len(list(folder.glob("*.wav"))) >= units and len(list(folder.glob("*.jpg"))) >= units

    return build_once(
        cache_dir() / f"duplex-case-{units}", lambda tmp: make_case(tmp, units), complete, "the duplex case"
    )


def load_case(folder: Path, units: int, frames: bool) -> list[tuple[np.ndarray, bytes | None]]:
    """The units' audio decoded up front (the wire carries PCM), their frames as JPEG bytes (the
    vision stage decodes them, as it does a frame from the wire)."""
    from ..media import load_audio

    wavs = sorted(folder.glob("*.wav"))
    if len(wavs) < units:
        raise ConfigError("inputs", f"{folder} holds {len(wavs)} .wav units, the run needs {units}")
    case = []
    for wav in wavs[:units]:
        jpg = wav.with_suffix(".jpg")
        if frames and not jpg.is_file():
            raise ConfigError("inputs", f"{jpg} is missing (every unit's frame; or run without frames)")
        case.append((load_audio(str(wav)), jpg.read_bytes() if frames else None))
    return case


# -- one run ---------------------------------------------------------------------------------------
def _frame_record(index: int, r, t_push: float, late_ms: float, t_result: float) -> dict:
    t = r.timings
    stage = {
        "apm": t.cost_apm_ms,
        "vpm": t.cost_vpm_ms,
        "prefill": t.cost_prefill_ms,
        "decode": t.cost_llm_ms - t.cost_prefill_ms,
        "tts": t.cost_tts_ms,
        "token2wav": t.cost_token2wav_ms,
    }
    return {
        "index": index,
        "is_listen": bool(r.is_listen),
        "end_of_turn": bool(r.end_of_turn),
        "text_chars": len(r.text),
        "n_tokens": t.n_tokens,
        "n_tts_tokens": t.n_tts_tokens,
        "audio_samples": int(r.audio.size),
        "t_push_s": t_push,
        "push_late_ms": late_ms,
        "t_result_s": t_result,
        "wall_ms": t.wall_ms,
        "kv_cache_length": t.kv_cache_length,
        "stage_ms": {k: float(v) for k, v in stage.items()},
    }


def run_units(duplex, case, interval_s: float) -> list[dict]:
    """Pushes unit i at t0 + i * interval from a producer thread; returns one record per unit."""
    n = len(case)
    pushed: dict[int, tuple[float, float]] = {}  # index -> (push time, how late), set before send
    failure: list[BaseException] = []
    t0 = time.perf_counter() + 0.05

    def producer():
        try:
            for i, (wav, jpg) in enumerate(case):
                target = t0 + i * interval_s
                time.sleep(max(0.0, target - time.perf_counter()))
                now = time.perf_counter()
                pushed[i] = (now - t0, (now - target) * 1000)
                duplex.send(wav, frame=jpg)
        except BaseException as e:  # forwarded to the reader below
            failure.append(e)

    thread = threading.Thread(target=producer, name="bench-duplex-producer", daemon=True)
    thread.start()
    records = []
    results = duplex.results()
    try:
        for i in range(n):
            while not failure and i not in pushed:
                time.sleep(0.001)
            if failure:
                break
            r = next(results)
            t_push, late = pushed[i]
            records.append(_frame_record(i, r, t_push, late, time.perf_counter() - t0))
    finally:
        thread.join(timeout=60)
    if failure:
        raise failure[0]
    return records


def run_duplex_bench(opts: DuplexBenchOptions, log=print) -> dict:
    from ..config import DuplexConfig, EngineConfig, ReplyConfig, Token2WavConfig
    from ..modelset.layout import discover
    from ..modelset.random_set import random_set_dir
    from ..session import OmniSession

    model_dir = opts.model_dir or str(random_set_dir("real"))
    folder = Path(opts.inputs) if opts.inputs else default_case(opts.units)
    case = load_case(folder, opts.units, opts.frames)
    dcfg = DuplexConfig(force_listen_count=opts.force_listen_count, seed=opts.seed)
    engine = EngineConfig(threads=opts.threads, token2wav=Token2WavConfig(threads=opts.t2w_threads), pin=opts.pin)
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    t_start = time.perf_counter()
    runs, warmup = [], []
    with OmniSession(model_dir, opts.device, engine, reply=ReplyConfig(seed=opts.seed)) as session:
        if opts.warmup_units:
            with session.duplex(config=dcfg) as d:
                warmup = run_units(d, case[: opts.warmup_units], opts.interval_s)
        for rep in range(opts.repeats):
            with session.duplex(config=dcfg) as d:
                frames = run_units(d, case, opts.interval_s)
            summary = duplex_metrics.summarise(frames, opts.interval_s)
            runs.append({"summary": summary, "frames": frames})
            log(f"run {rep + 1}/{opts.repeats}: " + headline(summary))
        config = {
            "device": session.device,
            "threads": session.engine_config.llm_threads,
            "t2w_threads": session.token2wav.threads,
            "pinned": session.placement is not None,
            "duplex": {"force_listen_count": dcfg.force_listen_count, "codes_per_unit": dcfg.codes_per_unit},
        }
    env = manifest([str(f) for f in discover(model_dir).files.values()], False)
    record = {
        "schema_version": DUPLEX_SCHEMA_VERSION,
        "benchmark": "omni-duplex-bench",
        "label": opts.tag or "duplex",
        "started": started,
        "elapsed_s": time.perf_counter() - t_start,
        "model_dir": str(model_dir),
        "config": config,
        "options": {
            "units": opts.units,
            "interval_s": opts.interval_s,
            "inputs": str(folder),
            "frames": opts.frames,
            "repeats": opts.repeats,
            "warmup_units": opts.warmup_units,
            "seed": opts.seed,
        },
        "data_valid": all(r["summary"]["data_valid"] for r in runs),
        "realtime_eligible": all(r["summary"]["realtime_eligible"] for r in runs),
        "runs": runs,
        "warmup": warmup,
        "manifest": env,
    }
    validate_duplex_run(record)
    return record


def stage_table(s: dict) -> str:
    """Markdown: per stage (and per thread) p50 / p95 / max ms over the speaking units."""
    rows = ["| stage | p50 ms | p95 ms | max ms |", "|---|---:|---:|---:|"]
    for name, st in list(s["speaking_stage_ms"].items()) + [(f"{k} thread", v) for k, v in s["thread_ms"].items()]:
        rows.append(f"| {name} | {_fmt(st['p50'])} | {_fmt(st['p95'])} | {_fmt(st['max'])} |")
    return "\n".join(rows)


def write_duplex_run(record: dict, out_dir: str | Path) -> Path:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{time.strftime('%Y%m%d-%H%M%S')}-{record['label']}.json"
    path.write_text(json.dumps(record, indent=2))
    return path
