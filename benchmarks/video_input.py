"""One 64-frame, 64-second video request at real dimensions (docs/media-and-encoders.md#video):
the frames decoded and shrunk to their overviews, through the vision encoder in batches and one
at a time (per frame; alternating round by round, so machine noise hits both), the 64 audio segments merged (the
reference's rule) and one by one (llama.cpp-omni's), and the LLM prefill of the whole prompt.

    python benchmarks/video_input.py --model-dir DIR [--threads 2] [--repeats 2] [--competitor]
        [--seconds 64] [--size 640x360] [--sample-frames 16] [--out FILE]

Needs a real-dimension set with the LLM, audio and vision files
(``llama-omni make-models DIR --size real --only llm,apm,vpm``; its LLM has the layers it was
written with: the prefill is reported per layer too, to scale to the 36 of Qwen3-8B).
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from common import busy_competitor, write_result  # noqa: E402

import llama_omni_py as omni  # noqa: E402
from llama_omni_py import video as V  # noqa: E402
from llama_omni_py.modelset import spec as ms  # noqa: E402
from llama_omni_py.modelset.layout import discover  # noqa: E402
from llama_omni_py.modules.apm import AudioEncoder  # noqa: E402
from llama_omni_py.modules.llm.model import LanguageModel  # noqa: E402
from llama_omni_py.modules.vpm import ImageEncoder  # noqa: E402
from llama_omni_py.orchestration.inputs import InputEncoder, Request, build_prompt  # noqa: E402


def make_video(path: Path, seconds: float, size: str) -> None:
    """testsrc2 (moving, detailed) at 30 fps with a tone over noise, as H.264 + AAC."""
    cmd = ["ffmpeg", "-v", "error", "-y", "-f", "lavfi", "-i", f"testsrc2=duration={seconds}:size={size}:rate=30"]
    cmd += ["-f", "lavfi", "-i", f"sine=frequency=330:duration={seconds}:sample_rate=44100"]
    cmd += ["-shortest", "-c:v", "libx264", "-pix_fmt", "yuv420p", "-c:a", "aac", str(path)]
    subprocess.run(cmd, check=True)


def ms_of(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1000


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model-dir", required=True)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--sample-frames", type=int, default=16, help="frames encoded together and one by one per round")
    p.add_argument("--seconds", type=float, default=64.0)
    p.add_argument("--size", default="640x360")
    p.add_argument("--competitor", action="store_true", help="one busy process beside the run")
    p.add_argument("--out")
    a = p.parse_args(argv)
    model_dir = Path(a.model_dir)
    sets = discover(model_dir)
    vision = omni.VisionConfig().resolved("reference")
    vpm = ImageEncoder(model_dir, "cpu", a.threads, vision=vision)
    apm = AudioEncoder(model_dir, "cpu", a.threads, fidelity="reference")
    result: dict = {"threads": a.threads, "seconds": a.seconds, "size": a.size, "competitor": a.competitor}
    with tempfile.TemporaryDirectory() as tmp, busy_competitor(None) if a.competitor else contextlib.nullcontext():
        clip = Path(tmp) / "clip.mp4"
        make_video(clip, a.seconds, a.size)
        t0 = time.perf_counter()
        parts = V.load_video(clip, transform=vpm.overview)
        result["decode_ms"] = (time.perf_counter() - t0) * 1000
        frames, segments = parts.frames, parts.segments
        result["frames"], result["segments"] = len(frames), len(segments)
        batched, single, merged, separate = [], [], [], []
        some = frames[: a.sample_frames]  # the per-frame cost is what matters: a batch of 16 and one by one
        for _ in range(a.repeats):  # alternating, round by round
            batched.append(ms_of(lambda: vpm.encode_overviews(some)) / len(some))
            single.append(ms_of(lambda: [vpm.encode_overviews([f]) for f in some]) / len(some))
            merged.append(ms_of(lambda: apm.encode_as_reference(segments, True, 1.0)))
            separate.append(ms_of(lambda: [apm.encode_long(s) for s in segments]))
        result["vpm_batched_ms_per_frame"] = statistics.median(batched)
        result["vpm_single_ms_per_frame"] = statistics.median(single)
        result["vpm_frames_per_s_batched"] = 1000 / result["vpm_batched_ms_per_frame"]
        result["vpm_frames_per_s_single"] = 1000 / result["vpm_single_ms_per_frame"]
        result["apm_merged_ms"], result["apm_separate_ms"] = statistics.median(merged), statistics.median(separate)

        inputs = InputEncoder(model_dir, "cpu", a.threads, "clamp", "reference", vision, omni.VideoConfig())
        llm = LanguageModel(sets.llm, "cpu", n_ctx=8192, threads=a.threads, prompt_cache=False)
        r = Request.of("What happens in the video, and what is said?", video=clip, system_prompt=False)
        t0 = time.perf_counter()
        media = inputs.encode(r)  # the whole request's media: decode, 64 frames in batches, 64 segments
        result["request_encode_ms"] = (time.perf_counter() - t0) * 1000
        result["request_vpm_ms"], result["request_apm_ms"] = media.stats.vpm_ms, media.stats.apm_ms
        prompt = build_prompt(llm.model, r, media, style="reference")
        rows = prompt.token_count()
        prefill = [ms_of(lambda: llm.prefill(prompt)) for _ in range(a.repeats)]
        layers = llm.model.info.n_layer
        result.update(
            prompt_rows=rows,
            llm_layers=layers,
            prefill_ms=statistics.median(prefill),
            prefill_rows_per_s=rows / (statistics.median(prefill) / 1000),
            prefill_ms_per_layer=statistics.median(prefill) / layers,
        )
    for k, v in result.items():
        print(f"{k:28s} {v:.1f}" if isinstance(v, float) else f"{k:28s} {v}")
    files = [model_dir / ms.VPM_FILE, model_dir / ms.APM_FILE, sets.llm]
    write_result("video_input", result, files, a.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
