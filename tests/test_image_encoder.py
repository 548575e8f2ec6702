"""Image/video frame preprocessing (overview size, bicubic resize) and the ImageEncoder wrapper
on the tiny set with real ffmpeg-decoded inputs."""

import logging
import subprocess

import numpy as np
import pytest

import llama_omni_py as omni
from llama_omni_py import media
from llama_omni_py.vpm import ImageEncoder, overview_size, resize_bicubic


@pytest.mark.parametrize("w,h", [(1, 1), (640, 480), (480, 640), (1920, 1080), (448, 448), (1200, 300)])
def test_overview_keeps_area_and_aspect(w, h):
    ow, oh = overview_size(w, h)
    assert ow % 14 == 0 and oh % 14 == 0 and 14 <= min(ow, oh) and max(ow, oh) <= 980
    assert abs(ow * oh - 448 * 448) <= 0.12 * 448 * 448
    assert abs(ow / oh - w / h) <= 14 / min(ow, oh) * (w / h) + 1e-9


def test_thin_images_fit_the_position_tables():
    assert overview_size(1, 1000) == (14, 980)
    ow, oh = overview_size(3000, 200)  # would be 1736 x 112 uncapped
    assert ow == 980 and abs(oh - 980 * 200 / 3000) <= 14


def test_resize_keeps_constants_and_averages_when_shrinking():
    flat = np.full((37, 53, 3), 91, np.uint8)
    assert (resize_bicubic(flat, 448, 448) == 91).all()
    checker = (np.indices((64, 64)).sum(axis=0) % 2 * 255).astype(np.uint8)[..., None].repeat(3, axis=2)
    small = resize_bicubic(checker, 16, 16)  # antialiased: the 1-px pattern averages out
    assert np.abs(small.astype(int) - 128).max() <= 2
    ramp = np.tile(np.linspace(0, 255, 32), (8, 1)).astype(np.uint8)[..., None].repeat(3, axis=2)
    up = resize_bicubic(ramp, 128, 8)[4, 8:-8, 0].astype(int)
    assert (np.diff(up) >= 0).all()  # a ramp stays monotonic


@pytest.fixture(scope="module")
def encoder(tiny_dir):
    return ImageEncoder(tiny_dir, threads=2)


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    path = tmp_path_factory.mktemp("video") / "clip.mp4"
    subprocess.run(
        [
            media.ffmpeg_binary(),
            "-hide_banner",
            "-loglevel",
            "error",
            "-f",
            "lavfi",
            "-i",
            "testsrc=size=320x240:rate=10:duration=3",
            "-c:v",
            "mpeg4",
            str(path),
        ],
        check=True,
        timeout=120,
    )
    return path


def test_image_and_frame_encode(encoder, clip):
    frame = media.load_frame(clip)
    got = encoder.encode(frame)
    assert got.shape == (encoder.vpm.dims.queries, encoder.vpm.dims.llm_embd) and np.isfinite(got).all()
    assert np.array_equal(encoder.encode(clip), got)  # path in, same frame, same result
    x = encoder.preprocess(frame)
    assert x.shape == (3, 392, 518) and -1.0 <= x.min() and x.max() <= 1.0


def test_tiny_image_is_upscaled(encoder):
    out = encoder.encode(np.full((1, 1, 3), 200, np.uint8))
    assert out.shape[0] == 64 and np.isfinite(out).all()


def test_video_is_one_frame_unless_asked(encoder, clip, caplog):
    with caplog.at_level(logging.WARNING):
        assert len(encoder.encode_video(clip)) == 1
        assert not caplog.records
        blocks = encoder.encode_video(clip, stack_frames=2)
    assert len(blocks) == 2 and not np.array_equal(blocks[0], blocks[1])  # testsrc moves
    assert any("repetition collapse" in r.getMessage() for r in caplog.records)
    with pytest.raises(omni.ConfigError, match="stack_frames"):
        encoder.encode_video(clip, stack_frames=0)


def test_empty_image_is_a_media_error(encoder):
    with pytest.raises(omni.MediaError):
        encoder.encode(np.zeros((0, 5, 3), np.uint8))
    with pytest.raises(omni.MediaError):
        encoder.encode(b"")
