"""Video as MiniCPM-o 4.5 watches it: frames sampled about one per second, each followed by the
audio of its span (docs/media-and-encoders.md#video).

A video becomes the steps [frame 0, audio 0, frame 1, audio 1, ...] (plus, with
``stack_frames``, a tiled image of the frames between two steps). Two documented rule sets pick
the frames and cut the audio, chosen by name in :class:`VideoConfig`:

``"minicpmo-utils"`` (default)
    The model's own utility (``get_video_frame_audio_segments`` of minicpmo-utils 1.0.7, the
    decord path). A video of ``duration`` = frames / average fps seconds gives ``ceil(duration)``
    frames at 0, 1, 2, ... s; past ``max_frames`` seconds it is put on a 0.1 s grid and
    ``max_frames`` points are taken with ``np.linspace`` (both ends included). Audio segment i
    runs from frame i's time to frame i+1's, the last to the video's duration; only the last is
    zero-padded, to 1600 samples (0.1 s).
``"evalkit"``
    The OmniEvalKit's (``_sample_video_frame_indices`` and its segmenting): ``floor(duration)``
    frames for short videos (at least one), segment midpoints (``int(i*gap + gap/2)``) when
    sampling a long one; the last audio segment runs to the end of the audio, empty segments are
    dropped and frames and segments are cut to the same count, with no padding.
``"vllm-omni"``
    vLLM-Omni's Video-MME frames: ``floor(duration)`` (at least one) for short videos, the
    linspace pick of the grid for long ones; audio as minicpmo-utils'.

Frame *indices* are what decord would return: packets of the video stream in presentation order
(``ffprobe`` counts them; decord's index is the same list), fps its average frame rate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from . import checks
from .constants import INPUT_SAMPLE_RATE
from .errors import MediaError

FRAME_RULES = ("minicpmo-utils", "evalkit", "vllm-omni")
SEGMENT_ENCODINGS = ("merged", "separate")
MAX_FRAMES = 1024  # frames per video at most (64 is the model's default, 96 Video-MME's)
MAX_STACK_FRAMES = 10  # sub-frames per second at most (the model card suggests 5)
LAST_SEGMENT_MIN = 1600  # samples: the last segment is padded to 0.1 s (minicpmo-utils)
GRID_STEP = 0.1  # seconds: the grid of a long video


@dataclass(frozen=True)
class VideoConfig:
    """How a video becomes prompt parts (``EngineConfig.video``; per request ``speak(video=...,
    max_frames=..., ...)``).

    * ``max_frames``: frames per video at most (1..1024; 64 as the model's utility). ``1`` is the
      one-frame mode: the first frame and the whole audio track as one segment.
    * ``frame_rule``: ``"minicpmo-utils"`` (default), ``"evalkit"`` or ``"vllm-omni"`` (module
      docstring).
    * ``stack_frames``: 1 (off), or N > 1 sub-frames per second: the frames at s + i/N
      (i = 1..N-1) of each second are tiled into one grid image that follows that second's audio
      (the model card's "high refresh rate" mode; minicpmo-utils rule only).
    * ``audio``: False drops the audio (frames only); a video without an audio track gives
      frames only anyway.
    * ``segments``: how the audio segments are encoded: ``"merged"`` -- the reference's
      ``merge_audio_from_same_content``: a message's audio joined and encoded per 30 s chunk, each
      segment given its own rows back -- or ``"separate"`` -- each segment on its own, as
      llama.cpp-omni's evaluation CLI does. None: the fidelity's (merged for the reference).
    * ``audio_chunk_seconds``: the merged audio's encoder attention: blocks of this many seconds,
      each attending to itself and every block before it (the model code's
      ``audio_chunk_length``, 1.0); None: full attention.
    """

    max_frames: int = 64
    frame_rule: str = "minicpmo-utils"
    stack_frames: int = 1
    audio: bool = True
    segments: str | None = None
    audio_chunk_seconds: float | None = 1.0

    def __post_init__(self):
        checks.int_in("video.max_frames", self.max_frames, 1, MAX_FRAMES)
        checks.choice("video.frame_rule", self.frame_rule, FRAME_RULES)
        checks.int_in("video.stack_frames", self.stack_frames, 1, MAX_STACK_FRAMES)
        checks.that("video.audio", isinstance(self.audio, bool), f"must be True or False, got {self.audio!r}")
        if self.segments is not None:
            checks.choice("video.segments", self.segments, SEGMENT_ENCODINGS)
        if self.audio_chunk_seconds is not None:
            checks.number_in("video.audio_chunk_seconds", self.audio_chunk_seconds, 0.0, 30.0, lo_open=True)
        if self.stack_frames > 1 and self.frame_rule != "minicpmo-utils":
            checks.that("video.stack_frames", False, "stacking is part of the minicpmo-utils rule set only")

    def segment_encoding(self, fidelity: str) -> str:
        """The segment encoding in force: the field, else the fidelity's."""
        return self.segments or ("merged" if fidelity == "reference" else "separate")


@dataclass(frozen=True)
class VideoInfo:
    """What sampling needs to know of a video: its frames (decord's count), average fps and
    whether it has an audio track."""

    frames: int
    fps: float
    has_audio: bool = False

    @property
    def duration(self) -> float:
        """Seconds, as decord-based tools compute it: frames / average fps."""
        return self.frames / self.fps


@dataclass(frozen=True)
class FramePlan:
    """The frames a rule set picks: their indices and times (seconds), and the stacked sub-frames
    (one tuple of indices per second, empty for a second without any) when stacking."""

    indices: tuple
    timestamps: tuple
    duration: float
    stacked: tuple = ()


def _linspace_sample(items: list, n: int) -> list:
    """minicpmo-utils' ``uniform_sample``: n points with both ends, or all when there are fewer."""
    if len(items) <= n:
        return list(items)
    return [items[i] for i in np.linspace(0, len(items) - 1, n, dtype=int)]


def _midpoint_sample(items: list, n: int) -> list:
    """The evaluation kit's ``uniform_sample``: the middle of each of n equal segments."""
    gap = len(items) / n
    return [items[int(i * gap + gap / 2)] for i in range(n)]


def _grid(duration: float) -> list[float]:
    return [round(i * GRID_STEP, 1) for i in range(int(duration / GRID_STEP))]


def plan_frames(
    info: VideoInfo, max_frames: int = 64, rule: str = "minicpmo-utils", stack_frames: int = 1
) -> FramePlan:
    """The frames ``rule`` picks of a video (module docstring). The long-video test compares the
    duration in seconds with the frame cap, as both tools do."""
    checks.choice("frame_rule", rule, FRAME_RULES, config=False)
    n, fps = info.frames, info.fps
    if n < 1 or not (fps > 0 and math.isfinite(fps)):
        raise checks.InvalidArgumentError(f"a video needs frames and a frame rate, got {n} frames at {fps} fps")
    duration = info.duration
    if duration > max_frames:  # long: a 0.1 s grid, then max_frames points of it
        times = _grid(duration)
        idx = [min(int(t * fps), n - 1) for t in times]
        if rule != "evalkit":
            idx, times = _linspace_sample(idx, max_frames), _linspace_sample(times, max_frames)
        elif len(idx) > max_frames:
            idx, times = _midpoint_sample(idx, max_frames), _midpoint_sample(times, max_frames)
    else:  # one frame per started second (minicpmo-utils), or per whole second, at least one
        seconds = math.ceil(duration) if rule == "minicpmo-utils" else max(1, int(duration))
        idx, times = [int(i * fps) for i in range(seconds)], [float(i) for i in range(seconds)]
    stacked: tuple = ()
    if stack_frames > 1:
        stacked = _plan_stack(info, duration, max_frames, stack_frames)
    return FramePlan(tuple(idx), tuple(times), duration, stacked)


def _plan_stack(info: VideoInfo, duration: float, max_frames: int, per_second: int) -> tuple:
    """minicpmo-utils' sub-frames: s + i/N for each second s and i = 1..N-1 (before the end), at
    most max_frames*(N-1) of them (linspace), grouped by the second they fall in."""
    times = [
        s + i / per_second
        for s in range(math.ceil(duration))
        for i in range(1, per_second)
        if s + i / per_second < duration
    ]
    idx = [min(int(t * info.fps), info.frames - 1) for t in times]
    cap = max_frames * (per_second - 1)
    if len(idx) > cap:
        idx, times = _linspace_sample(idx, cap), _linspace_sample(times, cap)
    groups, cursor = [], 0
    for s in range(math.ceil(duration)):
        group = []
        while cursor < len(times) and times[cursor] < s + 1:
            group.append(idx[cursor])
            cursor += 1
        groups.append(tuple(group))
    return tuple(groups)


def cut_segments(
    samples: np.ndarray, timestamps, duration: float, rule: str = "minicpmo-utils", rate: int = INPUT_SAMPLE_RATE
) -> list[np.ndarray]:
    """The audio of each frame's span (module docstring): segment i is samples
    [int(t_i * rate), int(t_{i+1} * rate)); the last ends at the video's duration
    (minicpmo-utils, padded to 0.1 s) or at the audio's end (evalkit, which drops empty segments;
    the caller then keeps as many frames as segments)."""
    x = np.asarray(samples, np.float32)
    out = []
    for i, start in enumerate(timestamps):
        last = i == len(timestamps) - 1
        if rule != "evalkit":
            end = duration if last else timestamps[i + 1]
            seg = x[int(start * rate) : int(end * rate)]
            if last and seg.size < LAST_SEGMENT_MIN:
                seg = np.concatenate([seg, np.zeros(LAST_SEGMENT_MIN - seg.size, np.float32)])
        else:
            end = x.size / rate if last else timestamps[i + 1]
            lo = max(0, int(start * rate))
            seg = x[lo : max(lo, int(end * rate))]
            if seg.size == 0:
                continue
        out.append(seg)
    return out


def audio_rows(samples: int) -> int:
    """The LLM rows the reference gives a segment of ``samples`` at 16 kHz
    (``get_audio_placeholder``): ceil(n/160) mel frames, (f-1)//2+1 after the stride-2
    convolution, (c-5)//5+1 after pooling by 5; 0 for 1280 samples or fewer."""
    f = -(-int(samples) // 160)
    c = (f - 1) // 2 + 1
    return max(0, (c - 5) // 5 + 1)


def grid_shape(sizes: list[tuple[int, int]], line: int = 6) -> tuple[int, int]:
    """(rows, columns) minicpmo-utils' ``concat_images`` tiles images of these (width, height)
    sizes into, with cells of the largest width and height: 4 -> 2x2; 2 and 3 -> one row or one
    column, whichever canvas is nearer square (2 on a tie: a row when the images are on average at
    least as wide as high); otherwise one row."""
    n = len(sizes)
    cw, ch = max(w for w, _ in sizes), max(h for _, h in sizes)
    if n == 4:
        return 2, 2
    if n not in (2, 3):
        return 1, n
    candidates = [(1, n), (n, 1)]
    d = [abs((c * cw + (c - 1) * line) / max(1, r * ch + (r - 1) * line) - 1.0) for r, c in candidates]
    if n == 2 and d[0] == d[1]:
        return (1, 2) if float(np.mean([w / max(1, h) for w, h in sizes])) >= 1.0 else (2, 1)
    return candidates[int(np.argmin(d))]


def tile_frames(frames: list[np.ndarray], line: int = 6) -> np.ndarray:
    """minicpmo-utils' ``concat_images``: cells of the largest frame's size, each frame scaled into
    its cell (PIL bicubic, aspect kept, centred on white), 6 px black lines between cells."""
    from PIL import Image

    if not frames:
        raise checks.InvalidArgumentError("no frames to tile")
    ims = [Image.fromarray(np.ascontiguousarray(f)) for f in frames]
    cw, ch = max(im.width for im in ims), max(im.height for im in ims)
    rows, cols = grid_shape([im.size for im in ims], line)
    canvas = Image.new("RGB", (cols * cw + (cols - 1) * line, rows * ch + (rows - 1) * line), (0, 0, 0))
    for i, im in enumerate(ims[: rows * cols]):
        r, c = divmod(i, cols)
        s = min(cw / im.width, ch / im.height)
        nw, nh = max(1, int(round(im.width * s))), max(1, int(round(im.height * s)))
        cell = Image.new("RGB", (cw, ch), (255, 255, 255))
        cell.paste(im.convert("RGB").resize((nw, nh), Image.Resampling.BICUBIC), ((cw - nw) // 2, (ch - nh) // 2))
        canvas.paste(cell, (c * (cw + line), r * (ch + line)))
    return np.asarray(canvas, dtype=np.uint8)


# -- decoding ---------------------------------------------------------------------------------


def probe(path: str, *, timeout: float | None = None) -> VideoInfo:
    """A video file's frame count (packets of its first video stream, as decord indexes them),
    average frame rate and whether it has an audio track, from one ffprobe run (demuxing only,
    no decoding)."""
    import json

    from .media import FFMPEG_TIMEOUT, demuxer_args, run_ffmpeg

    args = [
        "-v",
        "error",
        *demuxer_args(path),
        "-count_packets",
        "-show_entries",
        "stream=index,codec_type,avg_frame_rate,r_frame_rate,nb_read_packets",
        "-of",
        "json",
        path,
    ]
    out = run_ffmpeg(args, timeout=timeout or FFMPEG_TIMEOUT, tool="ffprobe")
    try:
        streams = json.loads(out.decode("utf-8", "replace")).get("streams", [])
    except ValueError:
        raise MediaError("ffprobe gave no readable stream list") from None
    video = [s for s in streams if s.get("codec_type") == "video"]
    if not video:
        raise MediaError("the input has no video stream")
    v = video[0]
    fps = _rate(v.get("avg_frame_rate")) or _rate(v.get("r_frame_rate"))
    frames = int(v.get("nb_read_packets") or 0)
    if frames < 1 or not fps:
        raise MediaError(f"the video stream has no decodable frames ({frames} packets, frame rate {fps})")
    return VideoInfo(frames, fps, any(s.get("codec_type") == "audio" for s in streams))


def _rate(text) -> float:
    """An ffprobe rate "num/den" as a float (0 when absent or 0/0)."""
    try:
        num, _, den = str(text).partition("/")
        return float(num) / float(den or 1) if float(den or 1) else 0.0
    except ValueError:
        return 0.0


def decode_frames(path: str, indices, *, timeout: float, transform=None) -> list:
    """The frames of ``indices`` (repeats allowed), RGB (h, w, 3) uint8 with the longest side
    capped at media.MAX_SIDE, in the order asked: the video is decoded once and only the frames
    asked for are kept; ``transform(frame)`` is applied to each distinct frame as it arrives (so a
    caller can shrink it before the next one is decoded)."""
    from .media import MAX_SIDE, demuxer_args, stream_ffmpeg_frames

    wanted = sorted(set(int(i) for i in indices))
    if not wanted:
        return []
    pick = "+".join(f"eq(n,{i})" for i in wanted)
    vf = f"select='{pick}',scale='min({MAX_SIDE},iw)':'min({MAX_SIDE},ih)':force_original_aspect_ratio=decrease"
    head = ["-nostdin", "-hide_banner", "-loglevel", "error", *demuxer_args(path), "-i", path, "-map", "0:v:0"]
    tail = ["-f", "image2pipe", "-vcodec", "ppm", "-pix_fmt", "rgb24", "pipe:1"]
    got: dict = {}
    # -fps_mode passthrough (ffmpeg >= 5.1; -vsync 0 before) keeps the picked frames apart, where
    # the image pipe's constant-rate default would repeat frames to fill the gaps.
    for sync in (["-fps_mode", "passthrough"], ["-vsync", "0"]):
        frames = stream_ffmpeg_frames([*head, "-vf", vf, *sync, *tail], timeout=timeout)
        try:
            for i, frame in zip(wanted, frames):  # stops after the last frame asked for
                got[i] = transform(frame) if transform is not None else frame
            break
        except MediaError as e:
            if "fps_mode" not in e.stderr or got:
                raise
        finally:
            frames.close()
    missing = [i for i in wanted if i not in got]
    if missing:
        raise MediaError(
            f"the video gave {len(got)} of the {len(wanted)} frames asked for (frame {missing[0]} is missing): "
            "it is shorter than its index says or damaged"
        )
    return [got[int(i)] for i in indices]


@dataclass
class VideoParts:
    """A video as prompt parts: its frames (RGB uint8, or what the caller's transform made of
    them), the audio segment of each (16 kHz float32; None without audio) and, when stacking, the
    tiled sub-frames of each second (None for a second without any). ``plan`` says which frames
    and times they are."""

    frames: list
    segments: list | None
    stacked: list | None
    plan: FramePlan

    def steps(self) -> list[list[tuple[str, object]]]:
        """[("frame", f), ("audio", a), ("stacked", tiled)] per frame, as the model card
        interleaves them (a stacked image by its frame's position, when there is one)."""
        out = []
        for i, frame in enumerate(self.frames):
            step = [("frame", frame)]
            if self.segments is not None and i < len(self.segments):
                step.append(("audio", self.segments[i]))
            if self.stacked is not None and i < len(self.stacked) and self.stacked[i] is not None:
                step.append(("stacked", self.stacked[i]))
            out.append(step)
        return out


def load_video(src, config: VideoConfig | None = None, *, audio=None, transform=None) -> VideoParts:
    """A video file (path or bytes) as MiniCPM-o's frames and audio segments. ``audio`` is a
    separate audio track (path, bytes or 16 kHz samples) used instead of the video's own, as
    Daily-Omni ships one beside each video; ``transform`` is applied to each main frame as it is
    decoded (stacked sub-frames stay whole until tiled)."""
    from .media import FFMPEG_TIMEOUT, _as_path, load_audio

    config = config or VideoConfig()
    if isinstance(src, np.ndarray):
        raise MediaError("a video must be a file (path or bytes), not an array")
    with _as_path(src) as path:
        info = probe(path)
        plan = plan_frames(info, config.max_frames, config.frame_rule, config.stack_frames)
        timeout = FFMPEG_TIMEOUT + plan.duration  # the whole video is decoded once
        frames = decode_frames(path, plan.indices, timeout=timeout, transform=transform)
        stacked = None
        if plan.stacked:
            subs = [i for group in plan.stacked for i in group]
            pictures = iter(decode_frames(path, subs, timeout=timeout))
            stacked = [tile_frames([next(pictures) for _ in group]) if group else None for group in plan.stacked]
        segments = None
        if config.audio and (audio is not None or info.has_audio):
            samples = load_audio(audio if audio is not None else path, None)
            segments = cut_segments(samples, plan.timestamps, plan.duration, config.frame_rule)
    if config.frame_rule == "evalkit" and segments is not None:  # frames and segments cut to one count
        n = min(len(frames), len(segments))
        frames, segments = frames[:n], segments[:n]
        plan = FramePlan(plan.indices[:n], plan.timestamps[:n], plan.duration, plan.stacked)
    return VideoParts(frames, segments, stacked, plan)
