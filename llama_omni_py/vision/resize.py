"""The image resize kernels of the two rule sets (docs/media-and-encoders.md, "Where llama.cpp-omni
and the reference differ"). Each takes and returns (h, w, 3) uint8 RGB.

* :func:`resize_antialiased_bicubic` -- the reference's resize (PIL ``Image.resize`` with
  ``BICUBIC``): Keys cubic a = -0.5, support widened by the scale when shrinking (antialiasing),
  pixel centres at +0.5, horizontal pass then vertical pass, each in 22-bit fixed point and
  rounded to uint8. Bit-exact with Pillow (tested against it).
* :func:`resize_lagrange_bicubic` -- llama.cpp-omni's overview resize: a 4-tap cubic Lagrange
  polynomial at top-left aligned coordinates, no antialiasing, float32, rounded once at the end.
* :func:`resize_truncating_bilinear` -- llama.cpp-omni's refine (slice) resize: bilinear at
  ``(src - 1) / dst`` steps from the top-left, no antialiasing, the result truncated.
"""

from __future__ import annotations

import math

import numpy as np

PRECISION_BITS = 22  # Pillow's fixed-point coefficients for 8-bit images (32 - 8 - 2)


def _keys_cubic(x: np.ndarray, a: float = -0.5) -> np.ndarray:
    """The bicubic filter, written in the same operation order as Pillow's (float64)."""
    x = np.abs(x)
    near = ((a + 2.0) * x - (a + 3.0)) * x * x + 1
    far = (((x - 5) * x + 8) * x - 4) * a
    return np.where(x < 1.0, near, np.where(x < 2.0, far, 0.0))


def _fixed_point_taps(n_in: int, n_out: int) -> tuple[np.ndarray, np.ndarray]:
    """(first input index (n_out,), int64 coefficients (n_out, taps)) of one axis; coefficients
    past an output's window are 0."""
    scale = n_in / n_out
    filter_scale = max(scale, 1.0)
    support = 2.0 * filter_scale
    taps = int(math.ceil(support)) * 2 + 1
    centre = (np.arange(n_out) + 0.5) * scale
    first = np.maximum(np.floor(centre - support + 0.5), 0).astype(np.int64)
    count = np.minimum(np.floor(centre + support + 0.5).astype(np.int64), n_in) - first
    weights = np.zeros((n_out, taps))
    total = np.zeros(n_out)
    for t in range(taps):  # summed in order, as the C loop does
        w = np.where(t < count, _keys_cubic((t + first - centre + 0.5) / filter_scale), 0.0)
        weights[:, t] = w
        total += w
    weights = np.where(total[:, None] != 0.0, weights / np.where(total == 0.0, 1.0, total)[:, None], weights)
    scaled = weights * (1 << PRECISION_BITS)
    fixed = np.trunc(np.where(weights < 0, scaled - 0.5, scaled + 0.5)).astype(np.int64)
    return first, fixed


def _fixed_point_pass(image: np.ndarray, n_out: int, axis: int) -> np.ndarray:
    """One separable pass over ``axis`` (0 rows, 1 columns) of (h, w, 3) uint8."""
    n_in = image.shape[axis]
    first, coeffs = _fixed_point_taps(n_in, n_out)
    # int32 sums as Pillow's (255 x the coefficients' absolute sum stays below 2^31); uint8 rows
    # gathered from a contiguous copy: a few times faster than int64 on a strided view
    src = np.ascontiguousarray(np.moveaxis(np.asarray(image, np.uint8), axis, 0))
    coeffs = coeffs.astype(np.int32)
    acc = np.full((n_out, *src.shape[1:]), 1 << (PRECISION_BITS - 1), np.int32)
    for t in range(coeffs.shape[1]):
        index = np.minimum(first + t, n_in - 1)  # taps past the window weigh 0
        acc += src[index] * coeffs[:, t].reshape(-1, *[1] * (src.ndim - 1))
    out = np.clip(acc >> PRECISION_BITS, 0, 255).astype(np.uint8)
    return np.moveaxis(out, 0, axis)


def resize_antialiased_bicubic(image: np.ndarray, width: int, height: int) -> np.ndarray:
    """The reference's resize: Pillow's ``Image.resize((width, height), BICUBIC)``."""
    h, w = image.shape[:2]
    out = np.asarray(image, np.uint8)
    passes = [(width, 1), (height, 0)] if w != width else [(height, 0)]
    if height < h and w != width and h - height > 2 * (w - width):
        passes.reverse()  # Pillow's rows-first order when the height shrinks much more than the width
    for size, axis in passes:
        if out.shape[axis] != size:
            out = _fixed_point_pass(out, size, axis)
    return np.ascontiguousarray(out)


def _cubic_lagrange(p0, p1, p2, p3, d):
    """The polynomial through p0..p3 (at -1, 0, 1, 2) at ``d`` in [0, 1): coefficients in double
    stored as float32, the polynomial evaluated in float32 left to right."""
    f32, f64 = np.float32, np.float64
    d0 = (p0 - p1).astype(f64)
    d2 = (p2 - p1).astype(f64)
    d3 = (p3 - p1).astype(f64)
    a1 = (-1.0 / 3 * d0 + d2 - 1.0 / 6 * d3).astype(f32)
    a2 = (1.0 / 2 * d0 + 1.0 / 2 * d2).astype(f32)
    a3 = (-1.0 / 6 * d0 - 1.0 / 2 * d2 + 1.0 / 6 * d3).astype(f32)
    a0 = p1.astype(f32)
    return a0 + a1 * d + a2 * d * d + a3 * d * d * d


def _round_half_away(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    return np.sign(x) * np.floor(np.abs(x) + 0.5)


def resize_lagrange_bicubic(image: np.ndarray, width: int, height: int) -> np.ndarray:
    """llama.cpp-omni's overview resize (``bicubic_resize`` in its vision.cpp)."""
    img = np.asarray(image, np.uint8)
    ny, nx = img.shape[:2]
    f32 = np.float32
    tx, ty = f32(nx) / f32(width), f32(ny) / f32(height)
    sx = tx * np.arange(width, dtype=f32)  # float32 products, as in C
    sy = ty * np.arange(height, dtype=f32)
    x, y = sx.astype(np.int64), sy.astype(np.int64)
    dx, dy = (sx - x.astype(f32))[None, :, None], (sy - y.astype(f32))[:, None, None]
    src = img.astype(f32)
    cols = [np.clip(x + k, 0, nx - 1) for k in (-1, 0, 1, 2)]
    rows = []
    for j in (-1, 0, 1, 2):  # each source row interpolated along x first
        r = src[np.clip(y + j, 0, ny - 1)]
        rows.append(_cubic_lagrange(*(r[:, c] for c in cols), dx))
    out = _cubic_lagrange(*rows, dy)
    return np.clip(_round_half_away(out), 0, 255).astype(np.uint8)


def resize_truncating_bilinear(image: np.ndarray, width: int, height: int) -> np.ndarray:
    """llama.cpp-omni's refine resize (``bilinear_resize`` in its vision.cpp). Neighbours past the
    last row or column are clamped (a one-pixel-wide source would read past it there)."""
    img = np.asarray(image, np.uint8)
    ny, nx = img.shape[:2]
    f32 = np.float32
    px = f32(nx - 1) / f32(width) * np.arange(width, dtype=f32)
    py = f32(ny - 1) / f32(height) * np.arange(height, dtype=f32)
    x0, y0 = px.astype(np.int64), py.astype(np.int64)
    tx, ty = (px - x0.astype(f32))[None, :, None], (py - y0.astype(f32))[:, None, None]
    x1, y1 = np.minimum(x0 + 1, nx - 1), np.minimum(y0 + 1, ny - 1)
    src = img.astype(f32)

    def lerp(s, e, t):
        return s + (e - s) * t

    top = lerp(src[y0][:, x0], src[y0][:, x1], tx)
    bottom = lerp(src[y1][:, x0], src[y1][:, x1], tx)
    return lerp(top, bottom, ty).astype(np.uint8)  # truncated, as static_cast<uint8_t>
