"""Image or video frame -> 64 LLM embeddings with the VPM (docs/model-files.md).

Preprocessing follows MiniCPM-V's overview path without slicing (llama.cpp-omni's default,
``max_slice_nums = 0``): resize to the area of a 448 x 448 image at the original aspect ratio,
sides rounded to multiples of 14 (upscaling allowed, so a 1 x 1 image becomes 448 x 448), bicubic
with antialiasing as PIL does it, then normalise with the file's mean/std. One deviation, for
very thin images: the position tables cover 70 patches per side, so the long side is capped at
980 px (the reference would interpolate new position embeddings instead).

Video gives one frame by default. ``stack_frames > 1`` encodes that many frames one second apart
as separate 64-embedding blocks, with a warning: several frames are known to drive MiniCPM-o into
repetition collapse (docs/ascend.md).
"""

from __future__ import annotations

import logging
import math
from pathlib import Path

import numpy as np

from . import checks
from ._native import core
from .backend import resolve_device
from .errors import ConfigError
from .media import FRAME_TIME, load_frame
from .modelset import spec as ms

log = logging.getLogger(__name__)

SCALE_RESOLUTION = 448
FRAME_SPACING = 1.0  # seconds between stacked video frames


def overview_size(
    width: int, height: int, patch: int = 14, grid: int = 70, scale: int = SCALE_RESOLUTION
) -> tuple[int, int]:
    """(width, height) of the resized overview: area about scale², multiples of `patch`, at most
    `grid` patches per side."""

    def to_patches(n: float) -> int:
        return max(round(n / patch) * patch, patch)

    ratio = width / height
    h = int(scale / math.sqrt(ratio))
    w = int(h * ratio)
    longest = max(w, h)
    if longest > patch * grid:  # keep within the 70 x 70 position tables
        w, h = w * patch * grid / longest, h * patch * grid / longest
    return min(to_patches(w), patch * grid), min(to_patches(h), patch * grid)


def _cubic(t: np.ndarray, a: float = -0.5) -> np.ndarray:
    t = np.abs(t)
    near = ((a + 2) * t - (a + 3)) * t * t + 1
    far = ((a * t - 5 * a) * t + 8 * a) * t - 4 * a
    return np.where(t < 1, near, np.where(t < 2, far, 0.0))


def _resample_matrix(n_in: int, n_out: int) -> np.ndarray:
    """(n_out, n_in) bicubic weights; the kernel widens by the scale when shrinking (antialias)."""
    scale = n_in / n_out
    stretch = max(scale, 1.0)
    centres = (np.arange(n_out) + 0.5) * scale
    w = _cubic((np.arange(n_in)[None, :] + 0.5 - centres[:, None]) / stretch)
    return w / w.sum(axis=1, keepdims=True)


def resize_bicubic(image: np.ndarray, width: int, height: int) -> np.ndarray:
    """(h, w, 3) uint8 -> (height, width, 3) uint8."""
    h, w = image.shape[:2]
    rows = _resample_matrix(h, height).astype(np.float32)
    cols = _resample_matrix(w, width).astype(np.float32)
    x = (rows @ image.astype(np.float32).reshape(h, w * 3)).reshape(height, w, 3)  # BLAS, not einsum
    x = cols @ x  # batched over output rows: (width, w) @ (w, 3)
    return np.clip(np.rint(x), 0, 255).astype(np.uint8)


class ImageEncoder:
    def __init__(
        self,
        model_dir: str | Path,
        device: str = "cpu",
        threads: int = 1,
        exact: bool = False,
        flash_attn_dims: list[int] | None = None,
    ):
        """flash_attn_dims: head sizes that use fused attention (None: those the device supports)."""
        threads = checks.threads("threads", threads) or 1
        path = Path(model_dir)
        if path.is_dir():
            path = path / ms.VPM_FILE
        self.vpm = core.Vpm(str(path), resolve_device(device), threads, exact, flash_attn_dims)

    def preprocess(self, image: np.ndarray) -> np.ndarray:
        """(h, w, 3) uint8 RGB -> normalised (3, H, W) float32 overview."""
        d = self.vpm.dims
        w, h = overview_size(image.shape[1], image.shape[0], d.patch, d.grid)
        x = resize_bicubic(image, w, h).astype(np.float32) / 255.0
        x = (x - np.asarray(d.mean, np.float32)) / np.asarray(d.std, np.float32)
        return np.ascontiguousarray(x.transpose(2, 0, 1))

    def encode(self, image) -> np.ndarray:
        """Path, bytes or (h, w, 3) uint8 array of an image (or a video's frame) -> (64, llm_embd)."""
        return self.vpm.encode(self.preprocess(load_frame(image)))

    def encode_video(self, video, stack_frames: int = 1, at: float = FRAME_TIME) -> list[np.ndarray]:
        """One (64, llm_embd) block per frame; one frame unless asked otherwise."""
        if not isinstance(stack_frames, int) or stack_frames < 1:
            raise ConfigError("stack_frames", f"must be a positive integer, got {stack_frames!r}")
        if stack_frames > 1:
            log.warning(
                "stack_frames=%d: several video frames can drive MiniCPM-o into repetition collapse; "
                "1 is the safe default",
                stack_frames,
            )
        return [
            self.vpm.encode(self.preprocess(load_frame(video, at=at + i * FRAME_SPACING))) for i in range(stack_frames)
        ]
