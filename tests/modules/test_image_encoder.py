"""The ImageEncoder on the tiny set with real ffmpeg-decoded inputs: overviews, sliced images
(blocks, batching, thin images past the position tables), video frames, bad input. Slicing
itself: tests/unit/test_image_slicing.py."""

import subprocess

import numpy as np
import pytest

import llama_omni_py as omni
from llama_omni_py import media
from llama_omni_py.modules.vpm import ImageEncoder
from llama_omni_py.vision import VisionConfig


@pytest.fixture(scope="module")
def encoder(tiny_dir):
    return ImageEncoder(tiny_dir, threads=2, vision=VisionConfig(rules="reference"))


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


def test_video_frames_encode_in_batches(encoder, clip):
    # a video's overviews go through the encoder together; each block is what it is alone
    frames = [encoder.overview(media.load_frame(clip, at=t)) for t in (0.0, 0.5, 1.0)]
    together = encoder.encode_overviews(frames)
    assert len(together) == 3 and not np.array_equal(together[0], together[2])  # testsrc moves
    for f, block in zip(frames, together):
        alone = encoder.vpm.encode(encoder.normalize(f))
        assert np.abs(block - alone).max() <= 1e-4 * np.abs(alone).max()


def test_empty_image_is_a_media_error(encoder):
    with pytest.raises(omni.MediaError):
        encoder.encode(np.zeros((0, 5, 3), np.uint8))
    with pytest.raises(omni.MediaError):
        encoder.encode(b"")


def test_sliced_image_blocks(encoder):
    image = (np.random.default_rng(2).random((1008, 1344, 3)) * 255).astype(np.uint8)
    got = encoder.encode_sliced(image)
    d = encoder.vpm.dims
    assert got.grid == (3, 2) and len(got.blocks) == 7 and got.rows == 7 * d.queries
    assert all(b.shape == (d.queries, d.llm_embd) and np.isfinite(b).all() for b in got.blocks)
    assert np.array_equal(got.overview, encoder.encode(image))  # the overview is the unsliced encoding
    # the six slices went through the encoder in one evaluation: same as one at a time
    sliced = encoder.slice(image)
    for block, pixels in zip(got.slices, sliced.slices):
        one = encoder.vpm.encode(encoder.normalize(pixels))
        assert np.abs(block - one).max() <= 1e-4 * np.abs(one).max()
    assert len(encoder.encode_sliced(image, 1).blocks) == 1 and encoder.encode_sliced(image, 1).grid is None
    assert encoder.encode_sliced(image, 4).grid == (2, 2)


def test_max_slice_nums_is_checked(encoder):
    image = np.zeros((20, 20, 3), np.uint8)
    for bad in (10, -1, 2.0, True):
        with pytest.raises(omni.InvalidArgumentError, match="max_slice_nums"):
            encoder.encode_sliced(image, bad)


def test_thin_image_past_the_position_tables(encoder):
    image = (np.random.default_rng(4).random((300, 4000, 3)) * 255).astype(np.uint8)
    got = encoder.encode_sliced(image)
    assert got.grid == (7, 1) and all(np.isfinite(b).all() for b in got.blocks)  # overview 116 x 9 patches


def test_llama_cpp_omni_rules_encode_no_slices_by_default(tiny_dir):
    lco = ImageEncoder(tiny_dir, threads=2, vision=VisionConfig(rules="llama.cpp-omni"))
    image = (np.random.default_rng(5).random((540, 960, 3)) * 255).astype(np.uint8)
    assert len(lco.encode_sliced(image).blocks) == 1
    assert lco.encode_sliced(image, 2).grid == (2, 1)
    with pytest.raises(omni.ConfigError, match="vision"):
        ImageEncoder(tiny_dir, vision="reference")
