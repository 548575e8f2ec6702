"""llava-uhd slicing as MiniCPM-o sees images: an overview of about 448 x 448 pixels' area plus
up to ``max_slice_nums`` slices cut from a refined copy of the image, laid out on a grid.

Two rule sets (docs/media-and-encoders.md, "Where llama.cpp-omni and the reference differ"):

* ``reference`` -- MiniCPM-o's image processor (``MiniCPMVImageProcessor``): a grid when the
  area passes 448² (the closest log aspect ratio among ``n-1``, ``n``, ``n+1`` slices, ``n`` the
  area in 448² units, at most ``max_slice_nums``), sides snapped to multiples of 14 with Python's
  round-half-to-even, an unsliced image scaled up or down to 448² area, a sliced one's overview
  only scaled down; 1 (or 0) means no slices.
* ``llama.cpp-omni`` -- its vision.cpp: the same formulas in float32 with round-half-away, but
  an image is sliced when a *side* passes 448 (also when its area is below 448²), such an image's
  overview is never scaled up, and 0 means no slices (1 gives one whole-image slice when a side
  passes 448).

Sides are further capped at ``max_side`` patches (both rule sets would go on: a 1 x 100000 image
would make a 7000-patch row) -- the one deliberate deviation, for images thinner than about 64:1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

RULES = ("reference", "llama.cpp-omni")
MAX_SLICE_NUMS = 9  # the processor's max_slice_nums (preprocessor_config.json)
SCALE = 448  # scale_resolution: a slice's area is about SCALE²
PATCH = 14
MAX_SIDE_PATCHES = 280  # 4 x the 70 x 70 position tables; see the module docstring


@dataclass(frozen=True)
class SlicePlan:
    """Sizes are (width, height) in pixels, the grid (columns, rows); no grid: the overview only."""

    overview: tuple[int, int]
    grid: tuple[int, int] | None = None
    refine: tuple[int, int] | None = None  # the resized image the slices are cut from

    @property
    def slices(self) -> int:
        return self.grid[0] * self.grid[1] if self.grid else 0

    @property
    def cell(self) -> tuple[int, int] | None:
        """One slice's size."""
        if self.grid is None:
            return None
        return self.refine[0] // self.grid[0], self.refine[1] // self.grid[1]

    def boxes(self) -> list[tuple[int, int, int, int]]:
        """(x, y, width, height) of each slice in the refined image, row by row."""
        if self.grid is None:
            return []
        w, h = self.cell
        return [(c * w, r * h, w, h) for r in range(self.grid[1]) for c in range(self.grid[0])]


# -- the reference's arithmetic (Python floats, round half to even) ---------------------------
def _snap(length: float, step: int) -> int:
    return max(round(length / step) * step, step)


def _best_resize(width: float, height: float, upscale: bool) -> tuple[int, int]:
    if width * height > SCALE * SCALE or upscale:
        r = width / height
        height = int(SCALE / math.sqrt(r))
        width = int(height * r)
    return _snap(width, PATCH), _snap(height, PATCH)


def _closest_grid(log_ratio: float, counts: list[int], error) -> tuple[int, int]:
    """The grid (m, n/m) over the candidate slice counts whose error is smallest; the first one
    found wins a tie, and [1, 1] when there is none."""
    best, least = (1, 1), math.inf
    for n in counts:
        for m in range(1, n + 1):
            if n % m == 0:
                e = error(log_ratio, m, n // m)
                if e < least:
                    best, least = (m, n // m), e
    return best


def _candidates(multiple: int, max_slices: int) -> list[int]:
    return [i for i in (multiple - 1, multiple, multiple + 1) if i != 1 and i <= max_slices]


def _reference_plan(width: int, height: int, max_slices: int) -> SlicePlan:
    multiple = min(math.ceil(width * height / (SCALE * SCALE)), max_slices)
    if multiple <= 1:
        return SlicePlan(_best_resize(width, height, True))
    grid = _closest_grid(
        math.log(width / height), _candidates(multiple, max_slices), lambda lr, a, b: abs(lr - math.log(a / b))
    )
    cell = _best_resize(_snap(width, grid[0]) / grid[0], _snap(height, grid[1]) / grid[1], True)
    return SlicePlan(_best_resize(width, height, False), grid, (cell[0] * grid[0], cell[1] * grid[1]))


# -- llama.cpp-omni's arithmetic (float32, round half away from zero) -------------------------
_f32 = np.float32


def _round_away(x) -> float:
    return math.copysign(math.floor(abs(float(x)) + 0.5), float(x))


def _snap32(length: int, step: int) -> int:
    return max(int(_round_away(_f32(length) / _f32(step)) * step), step)


def _best_resize32(width: int, height: int, upscale: bool) -> tuple[int, int]:
    if width * height > SCALE * SCALE or upscale:
        r = _f32(width) / _f32(height)
        height = int(_f32(SCALE) / np.sqrt(r))
        width = int(_f32(height) * r)
    return _snap32(width, PATCH), _snap32(height, PATCH)


def _lco_plan(width: int, height: int, max_slices: int) -> SlicePlan:
    sliced = width > SCALE or height > SCALE
    overview = _best_resize32(width, height, not sliced)
    if not sliced or max_slices == 0:
        return SlicePlan(overview)
    ratio = _f32(width) * _f32(height) / _f32(SCALE * SCALE)
    multiple = int(min(math.ceil(ratio), max_slices))
    log_ratio = _f32(math.log(_f32(width) / _f32(height)))
    grid = _closest_grid(
        log_ratio, _candidates(multiple, max_slices), lambda lr, a, b: _f32(abs(float(lr) - math.log(a / b)))
    )
    cell = _best_resize32(_snap32(width, grid[0]) // grid[0], _snap32(height, grid[1]) // grid[1], True)
    return SlicePlan(overview, grid, (cell[0] * grid[0], cell[1] * grid[1]))


def _capped(size: tuple[int, int], max_side: int) -> tuple[int, int]:
    """``size`` scaled down so no side passes ``max_side`` patches (multiples of the patch)."""
    longest = max(size)
    if longest <= max_side * PATCH:
        return size
    scale = max_side * PATCH / longest
    return tuple(min(_snap(s * scale, PATCH), max_side * PATCH) for s in size)


def plan_slices(
    width: int, height: int, max_slice_nums: int, rules: str = "reference", max_side: int = MAX_SIDE_PATCHES
) -> SlicePlan:
    """The overview size, grid and refined size of a ``width`` x ``height`` image."""
    if width < 1 or height < 1:
        raise ValueError(f"an image must have pixels, got {width} x {height}")
    plan = (_reference_plan if rules == "reference" else _lco_plan)(width, height, max_slice_nums)
    overview = _capped(plan.overview, max_side)
    if plan.grid is None:
        return SlicePlan(overview)
    cell = _capped(plan.cell, max_side)
    return SlicePlan(overview, plan.grid, (cell[0] * plan.grid[0], cell[1] * plan.grid[1]))
