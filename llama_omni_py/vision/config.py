"""How images are prepared for the vision encoder and laid out in the prompt."""

from __future__ import annotations

from dataclasses import dataclass, replace

from .. import checks
from ..errors import ConfigError, InvalidArgumentError
from .slicing import MAX_SLICE_NUMS, RULES

# The rules' own defaults: MiniCPM-o's processor slices up to 9 and writes image ids;
# llama.cpp-omni slices nothing unless asked (max_slice_nums 0) and writes no ids.
DEFAULT_SLICES = {"reference": MAX_SLICE_NUMS, "llama.cpp-omni": 0}
DEFAULT_RULES = "llama.cpp-omni"  # the default fidelity (fidelity.py)
JPEG_DECODERS = ("stb_image", "pillow")
DEFAULT_JPEG = {"reference": "pillow", "llama.cpp-omni": "stb_image"}  # PIL's Image.open; its stb_image


@dataclass(frozen=True)
class VisionConfig:
    """Image preprocessing (docs/media-and-encoders.md#image-slicing).

    ``rules``: "reference" (MiniCPM-o's image processor: its grid arithmetic, PIL's antialiased
    bicubic, the processor's prompt layout) or "llama.cpp-omni" (its vision.cpp: float32 grid
    arithmetic, its own bicubic for the overview and bilinear for the slices, no antialiasing);
    None: the session's fidelity (docs/fidelity.md), llama.cpp-omni's for an encoder on its own.
    ``max_slice_nums``: at most this many slices besides the overview, 0..9; None: the rules'
    default -- 9 for the reference (the model is trained and served with slices: fine detail such
    as text in a photo needs them), 0 for llama.cpp-omni (its default, one overview per image).
    Slices cost one vision-encoder pass and 64 prompt rows each. ``image_id``: write
    ``<image_id>N</image_id>`` before each image (reference layout); None: the rules' default
    (the reference's processor does, llama.cpp-omni does not). ``jpeg_decoder``: "stb_image"
    (llama.cpp-omni's decoder, through the libstb package) or "pillow" (libjpeg, as the
    reference's PIL); None: the rules' default."""

    rules: str | None = None
    max_slice_nums: int | None = None
    image_id: bool | None = None
    jpeg_decoder: str | None = None

    def __post_init__(self):
        if self.rules is not None:
            checks.choice("rules", self.rules, RULES)
        if self.max_slice_nums is not None:
            checks.int_in("max_slice_nums", self.max_slice_nums, 0, MAX_SLICE_NUMS)
        if self.image_id is not None and not isinstance(self.image_id, bool):
            raise ConfigError("image_id", f"must be None, True or False, got {self.image_id!r}")
        if self.jpeg_decoder is not None:
            checks.choice("jpeg_decoder", self.jpeg_decoder, JPEG_DECODERS)

    def resolved(self, fidelity: str) -> VisionConfig:
        """These settings with ``rules`` taken from ``fidelity`` when they are None."""
        return self if self.rules is not None else replace(self, rules=fidelity)

    @property
    def rule(self) -> str:
        """The rules in force (None: llama.cpp-omni's, the default fidelity)."""
        return self.rules or DEFAULT_RULES

    @property
    def slices(self) -> int:
        """max_slice_nums, resolved."""
        return DEFAULT_SLICES[self.rule] if self.max_slice_nums is None else self.max_slice_nums

    @property
    def use_image_id(self) -> bool:
        return self.rule == "reference" if self.image_id is None else self.image_id

    @property
    def jpeg(self) -> str:
        """The JPEG decoder in force."""
        return DEFAULT_JPEG[self.rule] if self.jpeg_decoder is None else self.jpeg_decoder

    @property
    def layout(self) -> str:
        """The turn-based prompt layout of these rules (vision.placeholder)."""
        return self.rule


def slice_counts(value, images: int, what: str = "max_slice_nums"):
    """A request's max_slice_nums: None, an int in 0..9, or a list with one per image (returned
    as a tuple); InvalidArgumentError otherwise."""
    if value is None or checks.is_int(value):
        return value if value is None else checks.int_in(what, value, 0, MAX_SLICE_NUMS, config=False)
    if not isinstance(value, (list, tuple)) or len(value) != images:
        raise InvalidArgumentError(
            f"{what} must be an integer in 0..{MAX_SLICE_NUMS} or a list with one per image ({images} given), "
            f"got {value!r}"
        )
    return tuple(checks.int_in(f"{what}[{i}]", v, 0, MAX_SLICE_NUMS, config=False) for i, v in enumerate(value))


def slices_of(counts, index: int) -> int | None:
    """Image ``index``'s entry of :func:`slice_counts`' result (None: the default)."""
    return counts[index] if isinstance(counts, tuple) else counts
