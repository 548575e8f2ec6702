"""llava-uhd slicing (llama_omni_py.vision) against restatements of MiniCPM-o's image processor
(with PIL doing the resizing) and of llama.cpp-omni's slicer: grids, sizes, pixels, the prompt
layout, and the configuration's checks."""

import numpy as np
import PIL
import pytest
from PIL import Image
from reference.image_processor import LcoSlicer, ReferenceSlicer

import llama_omni_py as omni
from llama_omni_py.vision import VisionConfig, normalize, placeholder_parts, plan_slices, slice_image
from llama_omni_py.vision.resize import (
    resize_antialiased_bicubic,
    resize_lagrange_bicubic,
    resize_truncating_bilinear,
)

# (width, height): tiny, 1x1, exactly 448², the page photo, thin, tall, portrait photo,
# a side past 448 with an area under 448² (sliced by llama.cpp-omni only), wide video frames,
# a square that slices 2x2, and an odd size whose snapping hits a .5 tie (Python rounds to even).
SIZES = [
    (5, 3),
    (1, 1),
    (448, 448),
    (1344, 1008),
    (4000, 300),
    (300, 4000),
    (1008, 1344),
    (640, 300),
    (960, 540),
    (1920, 1080),
    (1000, 1000),
    (300, 690),
]


def _image(w: int, h: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


def test_known_grids_of_the_reference():
    # worked through by hand from the processor's formulas
    p = plan_slices(1344, 1008, 9)
    assert (p.overview, p.grid, p.refine, p.cell) == ((518, 392), (3, 2), (1260, 952), (420, 476))
    assert plan_slices(960, 540, 9).grid == (2, 1) and plan_slices(960, 540, 9).refine == (840, 476)
    assert plan_slices(1280, 720, 9).refine == (1470, 812) and plan_slices(1280, 720, 9).grid == (3, 2)
    assert plan_slices(1920, 1080, 9).grid == (4, 2) and plan_slices(1000, 1000, 9).grid == (2, 2)
    assert plan_slices(960, 540, 1).grid is None and plan_slices(960, 540, 1).overview == (602, 336)
    assert plan_slices(1, 1, 9).overview == (448, 448)  # small images are scaled up
    assert plan_slices(300, 690, 9).overview == (294, 672)  # 48.5 patches rounds to even


@pytest.mark.parametrize("max_slice_nums", [1, 2, 4, 9])
@pytest.mark.parametrize("w,h", SIZES)
def test_grid_and_sizes_match_the_processor(w, h, max_slice_nums):
    ref = ReferenceSlicer(max_slice_nums)
    plan = plan_slices(w, h, max_slice_nums)
    grid = ref.get_sliced_grid((w, h), max_slice_nums)
    assert plan.grid == (tuple(grid) if grid else None)
    assert plan.overview == ref.find_best_resize((w, h), allow_upscale=grid is None)
    if grid:
        assert plan.refine == ref.get_refine_size((w, h), grid)
        assert len(plan.boxes()) == grid[0] * grid[1] <= max_slice_nums


def test_grids_match_over_many_sizes():
    rng = np.random.default_rng(0)
    ref = ReferenceSlicer()
    for w, h in rng.integers(1, 4097, (400, 2)):
        w, h = int(w), int(h)
        plan, grid = plan_slices(w, h, 9), ref.get_sliced_grid((w, h), 9)
        assert plan.grid == (tuple(grid) if grid else None), (w, h)
        overview = ref.find_best_resize((w, h), allow_upscale=grid is None)
        refine = ref.get_refine_size((w, h), grid) if grid else None
        if max(overview) > 280 * 14 or (grid and max(refine[0] // grid[0], refine[1] // grid[1]) > 280 * 14):
            assert max(plan.overview) <= 280 * 14  # the cap on very thin images
            continue
        assert (plan.overview, plan.refine) == (overview, refine), (w, h)


@pytest.mark.parametrize("w,h", SIZES)
def test_pixels_match_the_processor(w, h):
    image = _image(w, h)
    ours = slice_image(image, 9)
    overview, slices, grid = ReferenceSlicer().slice(Image.fromarray(image))
    assert np.array_equal(ours.overview, np.asarray(overview))
    assert len(ours.slices) == len(slices)
    for mine, theirs in zip(ours.slices, slices):
        assert np.array_equal(mine, np.asarray(theirs))
    # normalised and laid out as the vision model takes them: the strip of 14 x 14 patches
    for mine, theirs in zip([ours.overview, *ours.slices], [overview, *slices]):
        x = normalize(mine, [0.5] * 3, [0.5] * 3)
        rows, cols = x.shape[1] // 14, x.shape[2] // 14
        strip = x.reshape(3, rows, 14, cols, 14).transpose(0, 2, 1, 3, 4).reshape(3, 14, -1)
        assert np.abs(strip - ReferenceSlicer.pixel_values(theirs)).max() <= 1e-6


def test_resize_is_pillows_bicubic():
    # Pillow 13 runs the vertical pass first when the height shrinks much more than the width;
    # older Pillow always ran the horizontal pass first (then the order is ours only elsewhere).
    rows_first_pillow = int(PIL.__version__.split(".")[0]) >= 13
    rng = np.random.default_rng(5)
    for _ in range(150):
        h, w = (int(v) for v in rng.integers(1, 160, 2))
        height, width = (int(v) for v in rng.integers(1, 240, 2))
        image = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        want = np.asarray(Image.fromarray(image).resize((width, height), Image.Resampling.BICUBIC))
        rows_first = height < h and width != w and h - height > 2 * (w - width)
        if rows_first and not rows_first_pillow:
            continue
        assert np.array_equal(resize_antialiased_bicubic(image, width, height), want), (h, w, height, width)


def test_resize_antialiases_and_keeps_constants():
    flat = np.full((37, 53, 3), 91, np.uint8)
    assert (resize_antialiased_bicubic(flat, 448, 448) == 91).all()
    checker = (np.indices((64, 64)).sum(axis=0) % 2 * 255).astype(np.uint8)[..., None].repeat(3, axis=2)
    assert np.abs(resize_antialiased_bicubic(checker, 16, 16).astype(int) - 128).max() <= 2
    # llama.cpp-omni's overview kernel does not antialias: the pattern aliases
    assert np.abs(resize_lagrange_bicubic(checker, 16, 16).astype(int) - 128).max() >= 100


@pytest.mark.parametrize("w,h", SIZES + [(500, 300), (449, 100), (100, 449)])
@pytest.mark.parametrize("max_slice_nums", [0, 1, 2, 9])
def test_llama_cpp_omni_rules_match_its_slicer(w, h, max_slice_nums):
    overview, grid, refine = LcoSlicer().instructions(w, h, max_slice_nums)
    plan = plan_slices(w, h, max_slice_nums, "llama.cpp-omni")
    assert (plan.overview, plan.grid, plan.refine) == (overview, grid, refine)


def test_llama_cpp_omni_differs_where_documented():
    # a side past 448 with a small area: sliced, and its overview not scaled up
    assert plan_slices(640, 300, 9, "llama.cpp-omni").grid == (2, 1)
    assert plan_slices(640, 300, 9).grid is None
    assert plan_slices(500, 300, 9, "llama.cpp-omni").overview == (504, 294)
    assert plan_slices(500, 300, 9).overview == (574, 350)
    assert plan_slices(300, 690, 9, "llama.cpp-omni").overview == (294, 686)  # 48.5 rounds away from 0
    # 0 means no slices; 1 with a side past 448 gives one whole-image slice
    assert plan_slices(960, 540, 0, "llama.cpp-omni").grid is None
    one = plan_slices(960, 540, 1, "llama.cpp-omni")
    assert one.grid == (1, 1) and one.refine == (602, 336)


@pytest.mark.parametrize(
    "src,dst", [((23, 17), (41, 29)), ((50, 40), (13, 11)), ((1, 9), (5, 3)), ((30, 30), (30, 30))]
)
def test_llama_cpp_omni_kernels_match_its_loops(src, dst):
    image = _image(*src, seed=sum(src))
    assert np.array_equal(resize_lagrange_bicubic(image, *dst), LcoSlicer.bicubic(image, *dst))
    assert np.array_equal(resize_truncating_bilinear(image, *dst), LcoSlicer.bilinear(image, *dst))


def test_llama_cpp_omni_pixels_use_its_kernels():
    image = _image(960, 540, seed=3)
    s = slice_image(image, 2, "llama.cpp-omni")
    assert np.array_equal(s.overview, resize_lagrange_bicubic(image, 602, 336))
    refined = resize_truncating_bilinear(image, 840, 476)
    assert [x.shape for x in s.slices] == [(476, 420, 3)] * 2
    assert np.array_equal(s.slices[1], refined[:, 420:])


@pytest.mark.parametrize("w,h", SIZES)
@pytest.mark.parametrize("image_id", [0, 3, None])
def test_placeholder_is_the_processors(w, h, image_id):
    grid = plan_slices(w, h, 9).grid
    parts = placeholder_parts(grid, "reference", image_id)
    text = "".join("<unk>" * 64 if isinstance(p, int) else p for p in parts)
    ref = ReferenceSlicer(use_image_id=image_id is not None)
    assert text == ref.placeholder((w, h), image_id or 0)
    blocks = [p for p in parts if isinstance(p, int)]
    assert blocks == list(range(1 + (grid[0] * grid[1] if grid else 0)))


def test_duplex_and_llama_cpp_omni_layouts():
    join = lambda parts: "".join(f"[{p}]" if isinstance(p, int) else p for p in parts)  # noqa: E731
    assert join(placeholder_parts((2, 2), "duplex", 5)) == (
        "<image>[0]</image><slice>[1]</slice><slice>[2]</slice><slice>[3]</slice><slice>[4]</slice>"
    )
    lco = join(placeholder_parts((2, 1), "llama.cpp-omni"))
    assert lco == "<image>[0]</image><slice>[1]</slice><slice>[2]</slice>\n"
    assert join(placeholder_parts(None, "llama.cpp-omni")) == "<image>[0]</image>"
    assert join(placeholder_parts((2, 2), "reference")) == (
        "<image>[0]</image><slice>[1]</slice><slice>[2]</slice>\n<slice>[3]</slice><slice>[4]</slice>"
    )


def test_very_thin_images_are_capped():
    plan = plan_slices(100_000, 1, 9)
    assert max(plan.overview) == 280 * 14 and min(plan.overview) == 14
    plan = plan_slices(1, 100_000, 9, "llama.cpp-omni")
    assert max(plan.overview) <= 280 * 14 and plan.grid is not None and max(plan.cell) <= 280 * 14


def test_vision_config_checks_and_defaults():
    ref = VisionConfig(rules="reference")
    assert ref.slices == 9 and ref.use_image_id and ref.layout == "reference"
    lco = VisionConfig(rules="llama.cpp-omni")
    assert lco.slices == 0 and not lco.use_image_id and lco.layout == "llama.cpp-omni"
    # no rules: the session's fidelity decides; on its own, llama.cpp-omni's (the default fidelity)
    assert VisionConfig().rule == "llama.cpp-omni" and VisionConfig().slices == 0
    assert VisionConfig(max_slice_nums=2).resolved("reference") == VisionConfig(rules="reference", max_slice_nums=2)
    assert lco.resolved("reference") is lco
    assert omni.EngineConfig(fidelity="reference").vision_config.slices == 9
    assert omni.EngineConfig().vision_config.rule == "llama.cpp-omni"
    assert VisionConfig(max_slice_nums=1).slices == 1
    for bad in ({"rules": "pil"}, {"max_slice_nums": 10}, {"max_slice_nums": -1}, {"max_slice_nums": True}):
        with pytest.raises(omni.ConfigError) as e:
            VisionConfig(**bad)
        assert e.value.field == next(iter(bad))
    with pytest.raises(omni.ConfigError, match="image_id"):
        VisionConfig(image_id=1)
