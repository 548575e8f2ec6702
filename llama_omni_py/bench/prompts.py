"""The fixed benchmark prompt set. Audio and image inputs are generated, not downloaded, so the
same bytes reach the encoders on every host (a linear chirp and gradient/checker images: 448x448,
one overview; 1344x1008, a page-sized photo the reference slices into an overview and 3 x 2
slices)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..constants import INPUT_SAMPLE_RATE
from ..errors import ConfigError

AUDIO_RATE = INPUT_SAMPLE_RATE


def chirp(seconds: float = 2.0, f0: float = 200.0, f1: float = 2000.0, amplitude: float = 0.3) -> np.ndarray:
    """A linear sweep f0 -> f1 at 16 kHz, float32, with 10 ms fades (no clicks at the edges)."""
    t = np.arange(int(seconds * AUDIO_RATE)) / AUDIO_RATE
    x = amplitude * np.sin(2 * np.pi * (f0 * t + (f1 - f0) / (2 * seconds) * t * t))
    fade = min(len(x) // 2, AUDIO_RATE // 100)
    ramp = np.linspace(0.0, 1.0, fade)
    x[:fade] *= ramp
    x[len(x) - fade :] *= ramp[::-1]
    return x.astype(np.float32)


def pattern_image(width: int = 448, height: int | None = None) -> np.ndarray:
    """RGB uint8 (height, width, 3; square by default): horizontal and vertical gradients in R
    and G, a 56-px checkerboard in B."""
    height = width if height is None else height
    x, y = np.arange(width), np.arange(height)
    r = np.broadcast_to(x[None, :] * 255 // (width - 1), (height, width))
    g = np.broadcast_to(y[:, None] * 255 // (height - 1), (height, width))
    b = ((y[:, None] // 56 + x[None, :] // 56) % 2) * 255
    return np.stack([r, g, np.broadcast_to(b, (height, width))], axis=-1).astype(np.uint8)


@dataclass(frozen=True)
class BenchPrompt:
    name: str
    text: str | None
    kind: str  # "text", "audio" or "image": which input it exercises
    image_size: tuple[int, int] = (448, 448)  # (width, height) of an image prompt's picture
    max_slice_nums: int | None = None  # slices asked for (None: the session's default)

    def inputs(self) -> dict:
        """Keyword arguments for ``OmniSession.stream``."""
        if self.kind == "audio":
            return {"text": self.text, "audio": chirp()}
        if self.kind == "image":
            sliced = {} if self.max_slice_nums is None else {"max_slice_nums": self.max_slice_nums}
            return {"text": self.text, "image": pattern_image(*self.image_size), **sliced}
        return {"text": self.text}


PROMPTS = {
    "story": BenchPrompt("story", "Please tell me a short story about a lighthouse keeper and a storm.", "text"),
    "weather": BenchPrompt("weather", "What should I wear today if it is cold and raining?", "text"),
    "audio": BenchPrompt("audio", None, "audio"),  # a spoken question: the 2 s chirp alone
    "image": BenchPrompt("image", "What is in this picture?", "image"),
    # up to 9 slices, as the model's processor: an overview and 3 x 2 slices, 7 vision encoder
    # passes under either image rule set (--prompts page)
    "page": BenchPrompt("page", "What does this page show?", "image", (1344, 1008), max_slice_nums=9),
}
DEFAULT_PROMPTS = ("story", "audio", "image")


def select(names) -> list[BenchPrompt]:
    names = list(names)
    unknown = [n for n in names if n not in PROMPTS]
    if unknown or not names:
        raise ConfigError("prompts", f"unknown prompt(s) {unknown or names}; choose from {sorted(PROMPTS)}")
    return [PROMPTS[n] for n in names]
