"""An image as the vision encoder takes it: resized and cut by a :class:`SlicePlan` with the
resize kernels of the chosen rules, then normalised."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .resize import resize_antialiased_bicubic, resize_lagrange_bicubic, resize_truncating_bilinear
from .slicing import SlicePlan, plan_slices

# (overview kernel, refine kernel) of each rule set
KERNELS = {
    "reference": (resize_antialiased_bicubic, resize_antialiased_bicubic),
    "llama.cpp-omni": (resize_lagrange_bicubic, resize_truncating_bilinear),
}


@dataclass(frozen=True)
class SlicedImage:
    """(h, w, 3) uint8 overview and slices (row by row) of one image, and the plan that cut them."""

    plan: SlicePlan
    overview: np.ndarray
    slices: tuple = ()


def slice_image(image: np.ndarray, max_slice_nums: int, rules: str = "reference", max_side: int | None = None):
    """The overview and slices of an (h, w, 3) uint8 RGB image. Both are resized from the
    original (the refined image is not resized from the overview)."""
    h, w = image.shape[:2]
    extra = {} if max_side is None else {"max_side": max_side}
    plan = plan_slices(w, h, max_slice_nums, rules, **extra)
    resize_overview, resize_refine = KERNELS[rules]
    overview = resize_overview(image, *plan.overview)
    if plan.grid is None:
        return SlicedImage(plan, overview)
    refined = resize_refine(image, *plan.refine)
    slices = tuple(np.ascontiguousarray(refined[y : y + sh, x : x + sw]) for x, y, sw, sh in plan.boxes())
    return SlicedImage(plan, overview, slices)


def normalize(image: np.ndarray, mean, std) -> np.ndarray:
    """(h, w, 3) uint8 -> (3, h, w) float32: x / 255, then (x - mean) / std per channel."""
    x = image.astype(np.float32) / np.float32(255.0)
    x = (x - np.asarray(mean, np.float32)) / np.asarray(std, np.float32)
    return np.ascontiguousarray(x.transpose(2, 0, 1))
