"""Images as MiniCPM-o sees them: llava-uhd slicing (an overview and up to 9 slices), the resize
kernels of the reference and of llama.cpp-omni, and the prompt layout of an image's embedding
blocks (docs/media-and-encoders.md#image-slicing).

Owns: slicing (the plans), resize (both rule sets' kernels), images (slice an image), placeholder
(the prompt layout), config (VisionConfig). Pure Python: imports only the base layer.
"""

from .config import DEFAULT_SLICES, VisionConfig, slice_counts, slices_of
from .images import SlicedImage, normalize, slice_image
from .placeholder import LAYOUTS, placeholder_parts
from .slicing import MAX_SLICE_NUMS, RULES, SlicePlan, plan_slices

__all__ = [
    "DEFAULT_SLICES",
    "LAYOUTS",
    "MAX_SLICE_NUMS",
    "RULES",
    "SlicePlan",
    "SlicedImage",
    "VisionConfig",
    "normalize",
    "placeholder_parts",
    "plan_slices",
    "slice_counts",
    "slice_image",
    "slices_of",
]
