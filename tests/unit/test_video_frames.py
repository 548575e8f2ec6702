"""Which frames a video gives and the audio of each: against minicpmo-utils 1.0.7's own
get_video_frame_audio_segments (decord + librosa) on the same files, and against a restatement of
the evaluation kit's rule (OmniEvalKit o_e_Kit/utils/utils.py _sample_video_frame_indices and its
segmenting)."""

import math

import numpy as np
import pytest
from minicpmo import utils as mu  # scripts/install-reference.sh installs it, with decord and librosa
from video_files import ffmpeg, video

import llama_omni_py as omni
from llama_omni_py import video as V

# (seconds, fps): short, exactly at the cap, and the long branch (the 0.1 s grid)
CLIPS = [(7.5, 30), (64, 25), (200, 24)]


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    d = tmp_path_factory.mktemp("videos")
    out = {}
    for seconds, fps in CLIPS:
        path = video(d / f"v{seconds}.mp4", seconds, fps=fps, tone=300, tone_rate=44100)
        side = d / f"v{seconds}_audio.wav"  # Daily-Omni's layout: a separate track beside the video
        ffmpeg("-f", "lavfi", "-i", f"sine=frequency=500:duration={seconds}:sample_rate=22050", str(side))
        out[seconds] = (path, side)
    out["silent"] = (video(d / "silent.mp4", 3, size="64x48", tone=None), None)
    return out


def _minicpmo_utils(path, side):
    """minicpmo-utils' result with the frame indices it asked decord for."""
    asked = []

    class Recording(mu.VideoReader):
        def get_batch(self, idx):
            asked.append(list(idx))
            return super().get_batch(idx)

    real = mu.VideoReader
    mu.VideoReader = Recording
    try:
        frames, segments, _ = mu.get_video_frame_audio_segments(
            str(path), audio_path=None if side is None else str(side)
        )
    finally:
        mu.VideoReader = real
    return asked[0], frames, segments


@pytest.mark.slow
@pytest.mark.parametrize("seconds", [c[0] for c in CLIPS])
@pytest.mark.parametrize("separate", [False, True], ids=["own-track", "separate-track"])
def test_frames_and_segments_equal_minicpmo_utils(clips, seconds, separate):
    path, side = clips[seconds]
    side = side if separate else None
    indices, frames, segments = _minicpmo_utils(path, side)
    ours = V.load_video(path, audio=side)
    assert list(ours.plan.indices) == indices
    assert len(ours.frames) == len(frames) == (math.ceil(seconds) if seconds <= 64 else 64)
    for a, b in zip(frames, ours.frames):
        assert np.array_equal(np.asarray(a), b)  # the same decoded pixels
    # segment boundaries exactly; samples within the two resamplers' difference
    assert [s.size for s in ours.segments] == [len(s) for s in segments]
    for a, b in zip(segments, ours.segments):
        if len(a):
            assert np.abs(a - b).max() <= 1e-2
            assert np.sqrt(np.mean((a - b) ** 2)) <= 1e-2 * max(np.sqrt(np.mean(a**2)), 1e-3)


@pytest.mark.parametrize("seconds", [c[0] for c in CLIPS])
def test_timestamps_follow_the_rules(clips, seconds):
    path, _ = clips[seconds]
    info = V.probe(str(path))
    plan = V.plan_frames(info)
    if seconds <= 64:  # one per started second
        assert plan.timestamps == tuple(float(i) for i in range(math.ceil(seconds)))
    else:  # 64 points of the 0.1 s grid, both ends
        grid = [round(i * 0.1, 1) for i in range(int(info.duration / 0.1))]
        assert plan.timestamps[0] == 0.0 and plan.timestamps[-1] == grid[-1] and len(plan.timestamps) == 64
    seg = V.cut_segments(np.zeros(int(info.duration * 16000), np.float32), plan.timestamps, plan.duration)
    starts = np.cumsum([0] + [s.size for s in seg[:-1]])
    assert list(starts) == [int(t * 16000) for t in plan.timestamps]


def _evalkit_restated(frames: int, fps: float, max_frames: int):
    """The evaluation kit's sampling, written out plainly."""
    duration = frames / fps
    if duration > max_frames:
        ts = [round(i * 0.1, 1) for i in range(int(duration / 0.1))]
        idx = [min(int(t * fps), frames - 1) for t in ts]
        if len(idx) > max_frames:
            gap = len(idx) / max_frames
            pick = [int(i * gap + gap / 2) for i in range(max_frames)]
            idx, ts = [idx[p] for p in pick], [ts[p] for p in pick]
        return idx, ts
    n = max(1, int(duration))
    return [int(i * fps) for i in range(n)], [float(i) for i in range(n)]


@pytest.mark.parametrize(
    "frames, fps, cap",
    [
        (225, 30, 64),
        (1600, 25, 64),
        (4800, 24, 64),
        (3000, 29.97, 96),
        (90000, 30, 96),
        (12, 25, 64),
        (7, 5, 64),
        (301, 5, 16),
    ],
)
def test_evalkit_rule_matches_its_restatement(frames, fps, cap):
    plan = V.plan_frames(V.VideoInfo(frames, fps), cap, "evalkit")
    idx, ts = _evalkit_restated(frames, fps, cap)
    assert list(plan.indices) == idx and list(plan.timestamps) == ts


def test_evalkit_segments_end_with_the_audio_and_drop_empty_ones():
    x = np.arange(16000 * 5, dtype=np.float32)  # 5 s of audio under a 7 s video
    seg = V.cut_segments(x, [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0], 7.0, "evalkit")
    assert [s.size for s in seg] == [16000] * 5  # 5-6 s and 6-7 s are empty: dropped
    mu_rule = V.cut_segments(x, [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0], 7.0)
    assert [s.size for s in mu_rule] == [16000] * 5 + [0, 1600]  # kept; the last padded


def test_linspace_and_midpoint_sampling_differ():
    info = V.VideoInfo(200 * 24, 24.0)
    a, b = V.plan_frames(info, 64), V.plan_frames(info, 64, "evalkit")
    assert a.timestamps[0] == 0.0 and a.timestamps[-1] == 199.9  # both ends
    assert b.timestamps[0] > 0.0 and b.timestamps[-1] < 199.9  # segment middles


def test_stacked_subframes_follow_minicpmo_utils(clips):
    path, _ = clips[7.5]
    asked = []

    class Recording(mu.VideoReader):
        def get_batch(self, idx):
            asked.append(list(idx))
            return super().get_batch(idx)

    real, mu.VideoReader = mu.VideoReader, Recording
    try:
        _, _, stacked = mu.get_video_frame_audio_segments(str(path), stack_frames=3)
    finally:
        mu.VideoReader = real
    ours = V.load_video(path, omni.VideoConfig(stack_frames=3))
    assert [i for g in ours.plan.stacked for i in g] == asked[1]
    assert len(ours.stacked) == len(stacked) == 8
    for a, b in zip(stacked, ours.stacked):
        assert (a is None) == (b is None)
        if a is not None:
            assert np.array_equal(np.asarray(a), b)  # the same tiled grid image, pixel for pixel


@pytest.mark.parametrize(
    "sizes, shape",
    [
        ([(96, 64)], (1, 1)),
        ([(96, 64)] * 2, (2, 1)),  # stacked: nearer square than side by side
        ([(40, 300)] * 2, (1, 2)),  # tall cells side by side
        ([(96, 64)] * 3, (3, 1)),
        ([(40, 300)] * 3, (1, 3)),
        ([(96, 64)] * 4, (2, 2)),
        ([(96, 64)] * 5, (1, 5)),
    ],
)
def test_grid_shapes(sizes, shape):
    assert V.grid_shape(sizes) == shape


def test_a_video_without_audio_gives_frames_only(clips):
    path, _ = clips["silent"]
    parts = V.load_video(path)
    assert len(parts.frames) == 3 and parts.segments is None
    assert all(kind == "frame" for step in parts.steps() for kind, _ in step)
