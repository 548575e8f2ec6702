"""The vision encoder (our ggml graph) vs transformers' SigLIP layers + the MiniCPM-V resampler
in torch, on the tiny random set; the NaViT position buckets; bad pixel input."""

import numpy as np
import pytest
from reference import vpm as ref

import llama_omni_py as omni
from llama_omni_py._native import core
from llama_omni_py.modelset import spec as ms


@pytest.fixture(scope="module")
def vpm_path(tiny_dir):
    return str(tiny_dir / ms.VPM_FILE)


@pytest.fixture(scope="module")
def pair(vpm_path):
    return ref.ReferenceVpm(vpm_path), core.Vpm(vpm_path, "cpu", 2, True)


@pytest.mark.parametrize("height,width", [(448, 448), (28, 42), (98, 336), (14, 14)])
def test_encoder_matches_reference(pair, height, width):
    r, v = pair
    pixels = np.random.default_rng(height * width).standard_normal((3, height, width)).astype(np.float32)
    got, want = v.encode(pixels), r.encode(pixels)
    assert got.shape == want.shape == (v.dims.queries, v.dims.llm_embd)
    assert np.abs(got - want).max() <= 1e-3 * np.abs(want).max()


def test_sliced_image_matches_the_batched_reference(tiny_dir, pair):
    # MiniCPM-o encodes an image's overview and slices as one padded, masked batch; ours encodes
    # the slices together unpadded and the overview apart: the same 7 x 64 embeddings.
    from llama_omni_py.modules.vpm import ImageEncoder
    from llama_omni_py.vision import VisionConfig

    encoder = ImageEncoder(tiny_dir, threads=2, exact=True, vision=VisionConfig(rules="reference"))
    image = (np.random.default_rng(6).random((1008, 1344, 3)) * 255).astype(np.uint8)
    got = encoder.encode_sliced(image)
    sliced = encoder.slice(image)
    want = pair[0].encode_batch([encoder.normalize(x) for x in (sliced.overview, *sliced.slices)])
    assert got.grid == (3, 2) and len(got.blocks) == len(want) == 7
    for mine, theirs in zip(got.blocks, want):
        assert np.abs(mine - theirs).max() <= 1e-3 * np.abs(theirs).max()


def test_batch_is_the_same_as_one_at_a_time(pair):
    v = pair[1]
    pixels = np.random.default_rng(7).standard_normal((3, 3, 42, 56)).astype(np.float32)
    batch = v.encode(pixels)
    assert batch.shape == (3, v.dims.queries, v.dims.llm_embd)
    for i in range(3):
        one = v.encode(pixels[i])
        assert np.abs(batch[i] - one).max() <= 1e-5 * np.abs(one).max()


def test_past_the_position_tables_matches_the_reference(pair):
    # 116 patches wide (a 4000 x 300 image's overview): stretched SigLIP buckets and sin-cos
    # resampler keys computed for columns the file's 70 x 70 table does not hold
    r, v = pair
    pixels = np.random.default_rng(8).standard_normal((3, 126, 1624)).astype(np.float32)
    got, want = v.encode(pixels), r.encode(pixels)
    assert np.abs(got - want).max() <= 1e-3 * np.abs(want).max()


def test_resampler_positions_are_the_files_table(vpm_path):
    g = core.GgufFile(vpm_path)
    table = np.array(g.read_f32("resampler.pos_embed_k"))
    e, grid = table.shape[1], int(round(table.shape[0] ** 0.5))
    ours = core.resampler_positions(grid, grid, e)
    assert np.abs(ours - table).max() <= 1e-5
    assert np.abs(ours - ref.sincos_positions(grid, grid, e).numpy()).max() <= 1e-5


def test_f16_weights_stay_close(vpm_path, pair):
    pixels = np.random.default_rng(1).standard_normal((3, 56, 70)).astype(np.float32)
    exact = pair[1].encode(pixels)
    fast = core.Vpm(vpm_path, "cpu", 1, False).encode(pixels)
    assert np.abs(fast - exact).max() <= 2e-2 * np.abs(exact).max()


def test_position_buckets_match_navit_up_to_float_ties():
    # Our ids are exact; the NaViT code's float32 arange may round an exact tie i/n == k/70 to
    # the bucket below. Every difference must be such a tie, and off by exactly one bucket.
    g = 70
    for rows, cols in [(32, 32), (50, 23), (70, 70), (1, 10), (45, 64)]:
        ours = np.array(core.bucketed_position_ids(rows, cols, g))
        assert ours.tolist() == ref.exact_position_ids(rows, cols, g).tolist()
        navit = ref.navit_position_ids(rows, cols, g).numpy()
        for idx in np.nonzero(ours != navit)[0]:
            i, j = divmod(int(idx), cols)
            dr, dc = divmod(int(ours[idx]), g), divmod(int(navit[idx]), g)
            ties = ((g * i) % rows == 0, (g * j) % cols == 0)
            assert all(abs(a - b) <= 1 and (a == b or tie) for a, b, tie in zip(dr, dc, ties)), (rows, cols, i, j)


@pytest.mark.parametrize(
    "shape", [(3, 0, 14), (3, 15, 14), (3, 14 * 281, 14), (1, 14, 14), (3, 14), (0, 3, 14, 14), (2, 1, 14, 14)]
)
def test_bad_pixels_raise_typed_errors(pair, shape):
    with pytest.raises(omni.InvalidArgumentError):
        pair[1].encode(np.zeros(shape, np.float32))


def test_agrees_with_upstream_libmtmd(tiny_dir):
    # llama.cpp's own MiniCPM-V path loads the same file; on a 448 x 448 image (no resize, no
    # slices) both must give the same 64 embeddings, up to F16 weights on both sides.
    from reference.mtmd import UpstreamVision

    from llama_omni_py.modules.vpm import ImageEncoder

    image = (np.random.default_rng(3).random((448, 448, 3)) * 255).astype(np.uint8)
    upstream = UpstreamVision(str(next(tiny_dir.glob(ms.LLM_FILE_GLOB))), str(tiny_dir / ms.VPM_FILE))
    try:
        theirs = upstream.encode(image)
    finally:
        upstream.close()
    ours = ImageEncoder(tiny_dir, threads=2).encode(image)
    assert len(theirs) == 1 and theirs[0].shape == ours.shape
    assert np.abs(ours - theirs[0]).max() <= 2e-3 * np.abs(theirs[0]).max()
