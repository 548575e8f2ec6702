"""``llama-omni eval rtf``: the competition's real-time factor on a video, as its judge computes
it (docs/evaluation.md#rtf): the video cut into 1 s units (a frame at each second, its second of
audio), pushed one per second through a full-duplex session, and two RTFs from the units' stage
times:

* **core-frame pooled RTF** (the current metric): over the *core* units -- speaking, not the first
  of their turn, not the one that flushes its end -- sum of compute over sum of audio. The judge's
  compute of a unit is max(vision, audio encoder) + LLM prefill + LLM decode + TTS + Token2Wav
  (llama.cpp-omni encodes both at once); ours runs the two encoders one after the other, so the
  sum is reported beside it.
* **SPEAK->WAV turn RTF** (the earlier metric): per speaking turn, the time from its first push to
  its last audio over the audio it produced, pooled over the turns.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ..constants import INPUT_SAMPLE_RATE, OUTPUT_SAMPLE_RATE
from ..errors import InvalidArgumentError

MAX_SECONDS = 120  # the judge's inputs are at most 120 s


def write_units(video: str | Path, folder: Path, seconds: int | None = None) -> int:
    """The video as NNNN.wav (1 s, 16 kHz: the audio padded or cut to whole seconds) and NNNN.jpg
    (its frame at that second) files; returns the count."""
    import soundfile as sf
    from PIL import Image

    from .. import video as V

    clip = V.load_video(video, V.VideoConfig(max_frames=MAX_SECONDS))
    if clip.segments is None:
        raise InvalidArgumentError(f"{video}: the RTF run needs a video with an audio track")
    n = len(clip.frames) if seconds is None else min(seconds, len(clip.frames))
    if n < 2:
        raise InvalidArgumentError(f"{video}: the RTF run needs at least 2 seconds, got {n}")
    audio = np.concatenate(clip.segments)[: n * INPUT_SAMPLE_RATE]
    audio = np.pad(audio, (0, n * INPUT_SAMPLE_RATE - audio.size))
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        sf.write(folder / f"{i:04d}.wav", audio[i * INPUT_SAMPLE_RATE : (i + 1) * INPUT_SAMPLE_RATE], INPUT_SAMPLE_RATE)
        Image.fromarray(clip.frames[i]).save(folder / f"{i:04d}.jpg", quality=95)
    return n


def judge_rtf(frames: list[dict]) -> dict:
    """Both RTFs of a run's unit records (llama_omni_py.bench.duplex's), the judge's way."""
    from ..bench import duplex_metrics as M

    core = M.core_frames(frames)
    audio = sum(f["audio_samples"] for f in core) / OUTPUT_SAMPLE_RATE

    def judged(f):
        s = f["stage_ms"]
        return max(s["apm"], s["vpm"]) + s["prefill"] + s["decode"] + s["tts"] + s["token2wav"]

    return {
        "core_frames": len(core),
        "core_audio_s": audio,
        "core_rtf_judge": sum(map(judged, core)) / 1000 / audio if audio else None,
        "core_rtf_sum": sum(map(M.compute_ms, core)) / 1000 / audio if audio else None,
        "speak_wav_turn_rtf": M.e2e_speak_wav_rtf(frames)["rtf"],
        "turns": len(M.speaking_turns(frames)),
    }


def run_rtf(args, out: Path) -> int:
    from ..bench.duplex import DuplexBenchOptions, run_duplex_bench
    from ..modelset.random_set import random_set_dir

    units = out / "units"
    n = write_units(args.video, units, args.seconds)
    opts = DuplexBenchOptions(
        model_dir=args.model_dir or str(random_set_dir()),
        device=args.device,
        units=n,
        interval_s=args.interval,
        inputs=str(units),
        threads=args.threads,
    )
    record = run_duplex_bench(opts, log=lambda _line: None)
    frames = record["runs"][0]["frames"]
    result = {"video": str(args.video), "units": n, **judge_rtf(frames), "run": record["runs"][0]["summary"]}
    (out / "summary.json").write_text(json.dumps(result, indent=2, default=str))
    fmt = lambda v: "-" if v is None else f"{v:.3f}"  # noqa: E731
    md = [
        f"# RTF: {Path(args.video).name}",
        "",
        f"* core-frame pooled RTF (the judge's compute, max of the encoders): **{fmt(result['core_rtf_judge'])}** "
        f"over {result['core_frames']} core units ({result['core_audio_s']:.1f} s of audio)",
        f"* core-frame pooled RTF, the encoders summed (as this engine runs them): {fmt(result['core_rtf_sum'])}",
        f"* SPEAK->WAV turn RTF: {fmt(result['speak_wav_turn_rtf'])} over {result['turns']} turns",
        "",
    ]
    (out / "summary.md").write_text("\n".join(md))
    print(
        f"rtf: core {fmt(result['core_rtf_judge'])} (judge), {fmt(result['core_rtf_sum'])} (summed) over "
        f"{result['core_frames']} core units; SPEAK->WAV turn RTF {fmt(result['speak_wav_turn_rtf'])} -> "
        f"{out / 'summary.md'}"
    )
    return 0
