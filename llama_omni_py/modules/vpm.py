"""Image or video frame -> LLM embeddings with the VPM (docs/model-files.md): an overview and up to
``max_slice_nums`` slices, 64 embeddings each (llama_omni_py.vision cuts them; the rules and the
default are :class:`~llama_omni_py.vision.VisionConfig`'s, docs/media-and-encoders.md#image-slicing).
Blocks of one size -- the slices of an image, the overview too when it has their size, a
video's frames -- go through the encoder together, in one graph evaluation.

A video frame is one overview (frames are not sliced); which frames a video gives, and the
audio between them, is llama_omni_py.video's.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import checks
from .._native import core
from ..device.backends import resolve_device
from ..errors import ConfigError
from ..media import load_frame
from ..modelset import spec as ms
from ..vision import MAX_SLICE_NUMS, SlicedImage, VisionConfig, normalize, slice_image

BATCH = 16  # images per graph evaluation at most (the reference's vision_batch_size)


@dataclass(frozen=True)
class EncodedImage:
    """One image's embedding blocks, each (64, llm_embd): the overview, then its slices row by
    row; ``grid`` is (columns, rows), None without slices."""

    blocks: tuple
    grid: tuple[int, int] | None = None

    @property
    def overview(self) -> np.ndarray:
        return self.blocks[0]

    @property
    def slices(self) -> tuple:
        return self.blocks[1:]

    @property
    def rows(self) -> int:
        """LLM embedding rows of all blocks."""
        return sum(int(b.shape[0]) for b in self.blocks)


class ImageEncoder:
    def __init__(
        self,
        model_dir: str | Path,
        device: str = "cpu",
        threads: int = 1,
        exact: bool = False,
        flash_attn_dims: list[int] | None = None,
        vision: VisionConfig | None = None,
    ):
        """flash_attn_dims: head sizes that use fused attention (None: those the device supports);
        vision: the slicing rules and default (None: ``VisionConfig()``)."""
        threads = checks.threads("threads", threads) or 1
        if vision is not None and not isinstance(vision, VisionConfig):
            raise ConfigError("vision", f"must be a VisionConfig, got {type(vision).__name__}")
        self.vision = vision or VisionConfig()
        path = Path(model_dir)
        if path.is_dir():
            path = path / ms.VPM_FILE
        self.vpm = core.Vpm(str(path), resolve_device(device), threads, exact, flash_attn_dims)

    def slice(self, image, max_slice_nums: int | None = None) -> SlicedImage:
        """The uint8 overview and slices of an image (path, bytes or (h, w, 3) uint8 array);
        ``max_slice_nums`` None: the configured one."""
        n = (
            self.vision.slices
            if max_slice_nums is None
            else checks.int_in("max_slice_nums", max_slice_nums, 0, MAX_SLICE_NUMS, config=False)
        )
        return slice_image(self.load(image), n, self.vision.rule, self.vpm.dims.max_side)

    def load(self, image) -> np.ndarray:
        """Path, bytes or (h, w, 3) uint8 array -> (h, w, 3) uint8 RGB, a JPEG decoded by the
        configured decoder (VisionConfig.jpeg_decoder)."""
        return load_frame(image, jpeg_decoder=self.vision.jpeg)

    def overview(self, image: np.ndarray) -> np.ndarray:
        """(h, w, 3) uint8 RGB -> its uint8 overview (no slices), as the rules resize it."""
        return slice_image(image, 0, self.vision.rule, self.vpm.dims.max_side).overview

    def preprocess(self, image: np.ndarray) -> np.ndarray:
        """(h, w, 3) uint8 RGB -> the normalised (3, H, W) float32 overview (no slices)."""
        return self.normalize(self.overview(image))

    def normalize(self, image: np.ndarray) -> np.ndarray:
        """(h, w, 3) uint8 -> (3, h, w) float32 with the file's mean and std."""
        return normalize(image, self.vpm.dims.mean, self.vpm.dims.std)

    def encode_pixels(self, images: list[np.ndarray], prepare=None) -> list[np.ndarray]:
        """Normalised (3, H, W) images -> their (64, llm_embd) blocks, in order; images of one size
        are encoded together (at most ``BATCH`` per evaluation). ``prepare`` turns each item into
        such an image just before its batch (a video's uint8 overviews are normalised ``BATCH`` at
        a time, not all at once); the sizes are then the items' (h, w, 3)."""
        if prepare is not None:
            shapes = [(x.shape[2], x.shape[0], x.shape[1]) for x in images]
        else:
            shapes = [x.shape for x in images]
        prepare = prepare or (lambda x: x)
        out: list = [None] * len(images)
        by_shape: dict[tuple, list[int]] = {}
        for i, shape in enumerate(shapes):
            by_shape.setdefault(shape, []).append(i)
        for idx in by_shape.values():
            for start in range(0, len(idx), BATCH):
                part = idx[start : start + BATCH]
                if len(part) == 1:
                    out[part[0]] = self.vpm.encode(prepare(images[part[0]]))
                    continue
                blocks = self.vpm.encode(np.stack([prepare(images[i]) for i in part]))
                for i, block in zip(part, blocks):
                    out[i] = block
        return out

    def encode(self, image) -> np.ndarray:
        """Path, bytes or (h, w, 3) uint8 array of an image (or a video's frame) -> the overview's
        (64, llm_embd) embeddings, without slices."""
        return self.vpm.encode(self.preprocess(self.load(image)))

    def encode_sliced(self, image, max_slice_nums: int | None = None) -> EncodedImage:
        """An image's overview and slices -> their embedding blocks (``max_slice_nums`` None: the
        configured one; 0 or 1: the overview only, see VisionConfig)."""
        s = self.slice(image, max_slice_nums)
        blocks = self.encode_pixels([self.normalize(x) for x in (s.overview, *s.slices)])
        return EncodedImage(tuple(blocks), s.plan.grid)

    def encode_overviews(self, overviews: list[np.ndarray]) -> list[np.ndarray]:
        """uint8 overviews (:meth:`overview` of video frames) -> one (64, llm_embd) block each,
        in batches of one size, normalised a batch at a time."""
        return self.encode_pixels(list(overviews), self.normalize)
