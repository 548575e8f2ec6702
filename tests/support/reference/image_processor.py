"""Restatements of the two image preprocessors the parity tests compare against, written the way
their sources are organised (scalar, one step at a time) rather than the way ours is (vectorised):

* :class:`ReferenceSlicer` -- MiniCPM-o 4.5's ``MiniCPMVImageProcessor`` (processing_minicpmo.py
  of the model's remote code; preprocessor_config.json: max_slice_nums 9, scale_resolution 448,
  patch_size 14, use_image_id true, image_feature_size 64, slice_mode true): PIL does the
  resizing and cropping, Python floats and ``round`` the arithmetic, torch ``unfold`` the patch
  layout.
* :class:`LcoSlicer` -- llama.cpp-omni's ``llava_uhd`` (tools/omni/vision.cpp at 0788f99):
  float32 arithmetic, ``std::round``, and its two resize loops pixel by pixel.
"""

from __future__ import annotations

import math

import numpy as np

SCALE, PATCH, QUERIES = 448, 14, 64


class ReferenceSlicer:
    def __init__(self, max_slice_nums: int = 9, use_image_id: bool = True):
        self.max_slice_nums, self.use_image_id = max_slice_nums, use_image_id

    @staticmethod
    def ensure_divide(length, patch):
        return max(round(length / patch) * patch, patch)

    def find_best_resize(self, size, allow_upscale=False):
        w, h = size
        if w * h > SCALE * SCALE or allow_upscale:
            r = w / h
            h = int(SCALE / math.sqrt(r))
            w = int(h * r)
        return self.ensure_divide(w, PATCH), self.ensure_divide(h, PATCH)

    def get_refine_size(self, size, grid):
        refine_w = self.ensure_divide(size[0], grid[0])
        refine_h = self.ensure_divide(size[1], grid[1])
        cw, ch = self.find_best_resize((refine_w / grid[0], refine_h / grid[1]), allow_upscale=True)
        return cw * grid[0], ch * grid[1]

    def get_sliced_grid(self, size, max_slice_nums):
        log_ratio = math.log(size[0] / size[1])
        multiple = min(math.ceil(size[0] * size[1] / (SCALE * SCALE)), max_slice_nums)
        if multiple <= 1:
            return None
        counts = [n for n in (multiple - 1, multiple, multiple + 1) if n != 1 and n <= max_slice_nums]
        grids = [[m, n // m] for n in counts for m in range(1, n + 1) if n % m == 0]
        best, least = [1, 1], float("inf")
        for g in grids:
            err = abs(log_ratio - math.log(g[0] / g[1]))
            if err < least:
                best, least = g, err
        return best

    def slice(self, image, max_slice_nums=None):
        """PIL image -> (overview, slices row by row, grid)."""
        from PIL import Image

        n = self.max_slice_nums if max_slice_nums is None else max_slice_nums
        grid = self.get_sliced_grid(image.size, n)
        bicubic = Image.Resampling.BICUBIC
        if grid is None:
            return image.resize(self.find_best_resize(image.size, allow_upscale=True), resample=bicubic), [], None
        overview = image.copy().resize(self.find_best_resize(image.size), resample=bicubic)
        refine = image.resize(self.get_refine_size(image.size, grid), resample=bicubic)
        cw, ch = int(refine.size[0] / grid[0]), int(refine.size[1] / grid[1])
        width, height = refine.size
        slices = [refine.crop((x, y, x + cw, y + ch)) for y in range(0, height, ch) for x in range(0, width, cw)]
        return overview, slices, grid

    def placeholder(self, size, image_idx=0, max_slice_nums=None):
        """The prompt text of one image: 64 <unk> per block."""
        n = self.max_slice_nums if max_slice_nums is None else max_slice_nums
        unk = "<unk>" * QUERIES
        text = (f"<image_id>{image_idx}</image_id>" if self.use_image_id else "") + "<image>" + unk + "</image>"
        grid = self.get_sliced_grid(size, n)
        if grid is not None:
            row = ("<slice>" + unk + "</slice>") * grid[0]
            text += "\n".join([row] * grid[1])
        return text

    @staticmethod
    def pixel_values(image) -> np.ndarray:
        """A PIL slice -> the (3, 14, L * 14) float32 strip the vision model takes."""
        from transformers.image_transforms import normalize

        x = normalize(np.asarray(image).astype(np.float32) / 255, mean=[0.5] * 3, std=[0.5] * 3)
        return ReferenceSlicer.strip(np.ascontiguousarray(x.transpose(2, 0, 1)))

    @staticmethod
    def strip(x: np.ndarray) -> np.ndarray:
        """(3, H, W) -> (3, 14, L * 14): patch l (raster order) in columns [14 l, 14 l + 14)."""
        import torch

        p = torch.nn.functional.unfold(torch.from_numpy(x), (PATCH, PATCH), stride=(PATCH, PATCH))
        return p.reshape(3, PATCH, PATCH, -1).permute(0, 1, 3, 2).reshape(3, PATCH, -1).numpy()


def _f32(x) -> np.float32:
    return np.float32(x)


def _round_away(x: float) -> float:
    return math.floor(x + 0.5) if x >= 0 else -math.floor(-x + 0.5)


class LcoSlicer:
    """llama.cpp-omni's slice instructions and resize loops, one scalar at a time."""

    @staticmethod
    def ensure_divide(length, patch):
        return max(int(_round_away(float(_f32(length) / _f32(patch))) * patch), patch)

    def best_resize(self, w, h, allow_upscale):
        if w * h > SCALE * SCALE or allow_upscale:
            r = _f32(w) / _f32(h)
            h = int(_f32(SCALE) / np.sqrt(r))
            w = int(_f32(h) * r)
        return self.ensure_divide(w, PATCH), self.ensure_divide(h, PATCH)

    def instructions(self, w, h, max_slice_nums):
        """(overview, grid or None, refine or None)."""
        has_slices = w > SCALE or h > SCALE
        overview = self.best_resize(w, h, not has_slices)
        log_ratio = _f32(math.log(_f32(w) / _f32(h)))
        multiple = int(min(math.ceil(_f32(w) * _f32(h) / _f32(SCALE * SCALE)), max_slice_nums))
        counts = [n for n in (multiple - 1, multiple, multiple + 1) if not (n == 1 or n > max_slice_nums)]
        best, least = (1, 1), _f32(np.inf)
        for n in counts:
            m = 1
            while m <= n:
                if n % m == 0:
                    err = _f32(abs(float(log_ratio) - math.log(1.0 * m / (n // m))))
                    if err < least:
                        best, least = (m, n // m), err
                m += 1
        if not has_slices or max_slice_nums == 0:
            return overview, None, None
        rw, rh = self.ensure_divide(w, best[0]), self.ensure_divide(h, best[1])
        cw, ch = self.best_resize(rw // best[0], rh // best[1], True)
        return overview, best, (cw * best[0], ch * best[1])

    @staticmethod
    def bicubic(img: np.ndarray, tw: int, th: int) -> np.ndarray:
        ny, nx = img.shape[:2]
        out = np.zeros((th, tw, 3), np.uint8)
        tx, ty = _f32(nx) / _f32(tw), _f32(ny) / _f32(th)
        px = lambda yy, xx, k: int(img[min(max(yy, 0), ny - 1), min(max(xx, 0), nx - 1), k])  # noqa: E731

        def poly(p, d):  # p[-1], p[0], p[1], p[2]
            d0, d2, d3 = float(p[0] - p[1]), float(p[2] - p[1]), float(p[3] - p[1])
            a1 = _f32(-1.0 / 3 * d0 + d2 - 1.0 / 6 * d3)
            a2 = _f32(1.0 / 2 * d0 + 1.0 / 2 * d2)
            a3 = _f32(-1.0 / 6 * d0 - 1.0 / 2 * d2 + 1.0 / 6 * d3)
            return _f32(p[1]) + a1 * d + a2 * d * d + a3 * d * d * d

        for i in range(th):
            for j in range(tw):
                x, y = int(tx * _f32(j)), int(ty * _f32(i))
                dx, dy = tx * _f32(j) - _f32(x), ty * _f32(i) - _f32(y)
                for k in range(3):
                    c = [poly([_f32(px(y - 1 + jj, x + m, k)) for m in (-1, 0, 1, 2)], dx) for jj in range(4)]
                    v = float(poly(c, dy))
                    out[i, j, k] = min(max(_round_away(v), 0), 255)
        return out

    @staticmethod
    def bilinear(img: np.ndarray, tw: int, th: int) -> np.ndarray:
        ny, nx = img.shape[:2]
        out = np.zeros((th, tw, 3), np.uint8)
        xr, yr = _f32(nx - 1) / _f32(tw), _f32(ny - 1) / _f32(th)
        lerp = lambda s, e, t: s + (e - s) * t  # noqa: E731
        for y in range(th):
            for x in range(tw):
                fx, fy = xr * _f32(x), yr * _f32(y)
                x0, y0 = int(fx), int(fy)
                tx, ty = fx - _f32(x0), fy - _f32(y0)
                x1, y1 = min(x0 + 1, nx - 1), min(y0 + 1, ny - 1)
                for c in range(3):
                    top = lerp(_f32(img[y0, x0, c]), _f32(img[y0, x1, c]), tx)
                    bottom = lerp(_f32(img[y1, x0, c]), _f32(img[y1, x1, c]), tx)
                    out[y, x, c] = int(lerp(top, bottom, ty))
        return out
