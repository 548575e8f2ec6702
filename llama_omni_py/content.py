"""A message's content as an ordered list of parts, as MiniCPM-o's own ``msgs`` content list
takes it: text, images, audio, video and audio already encoded, in the order the user gives them
(docs/media-and-encoders.md#content-in-order).

    session.stream(content=["Listen, then answer.", omni.Audio("q.wav"), omni.Video("clip.mp4")])

A part is a ``str`` (text), an :class:`Image`, :class:`Audio` or :class:`Video`, an
:class:`EncodedAudio`, or -- the reference's own convention -- a PIL image,
an (h, w, 3) uint8 array (an image) or a 1-D float array (16 kHz audio). The keyword form
``stream(text, image=, video=, audio=)`` is shorthand for [images..., videos..., audio..., text].
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from . import checks
from .errors import InvalidArgumentError
from .video import FRAME_RULES, MAX_FRAMES, MAX_STACK_FRAMES, VideoConfig

MAX_PARTS = 4096  # parts in one message at most (a 1024-frame video expands to ~3000)


@dataclass(frozen=True, eq=False)
class EncodedAudio:
    """Audio already through the audio encoder: its (n, n_embd) LLM embedding rows. Given as the
    content of a history turn or as a request's audio it goes into the prompt as it is, so a
    conversation encodes each utterance once (and the prompt cache recognises it next turn)."""

    embeddings: np.ndarray
    encode_ms: float = 0.0


@dataclass(frozen=True)
class Image:
    """An image: a path, bytes or (h, w, 3) uint8 array; ``max_slice_nums`` its slices (None:
    the request's or the session's)."""

    source: object
    max_slice_nums: int | None = None

    def __post_init__(self):
        if self.max_slice_nums is not None:
            checks.int_in("max_slice_nums", self.max_slice_nums, 0, 9, config=False)


@dataclass(frozen=True)
class Audio:
    """Audio: a path, bytes or 16 kHz float samples."""

    source: object


@dataclass(frozen=True)
class Video:
    """A video file (path or bytes), watched as frames interleaved with their audio
    (:class:`~llama_omni_py.video.VideoConfig`). ``audio``: a separate audio track to use instead
    of the video's own (path, bytes or 16 kHz samples). The other fields override the request's
    or the session's ``VideoConfig`` for this video (None: keep)."""

    source: object
    audio: object = None
    max_frames: int | None = None
    frame_rule: str | None = None
    stack_frames: int | None = None
    use_audio: bool | None = None

    def __post_init__(self):
        if isinstance(self.source, np.ndarray):
            raise InvalidArgumentError("a video must be a file (path or bytes), not an array")
        if self.max_frames is not None:
            checks.int_in("max_frames", self.max_frames, 1, MAX_FRAMES, config=False)
        if self.frame_rule is not None:
            checks.choice("frame_rule", self.frame_rule, FRAME_RULES, config=False)
        if self.stack_frames is not None:
            checks.int_in("stack_frames", self.stack_frames, 1, MAX_STACK_FRAMES, config=False)
        if self.use_audio is not None and not isinstance(self.use_audio, bool):
            raise InvalidArgumentError(f"use_audio must be True or False, got {self.use_audio!r}")

    def config(self, base: VideoConfig) -> VideoConfig:
        """``base`` with this video's overrides."""
        changes = {
            k: v
            for k, v in (
                ("max_frames", self.max_frames),
                ("frame_rule", self.frame_rule),
                ("stack_frames", self.stack_frames),
                ("audio", self.use_audio),
            )
            if v is not None
        }
        try:
            return replace(base, **changes) if changes else base
        except Exception as e:  # a combination the config refuses (stacking under evalkit)
            raise InvalidArgumentError(str(e)) from None


PART_TYPES = (str, Image, Audio, Video, EncodedAudio)


def part(item) -> object:
    """One content item as a part (a str, Image, Audio, Video or EncodedAudio), or an
    InvalidArgumentError naming what it is."""
    if isinstance(item, PART_TYPES):
        if isinstance(item, str):
            checks.text(item, "content text")
        return item
    if isinstance(item, np.ndarray):
        if item.ndim == 3 and item.shape[2] == 3 and item.dtype == np.uint8:
            return Image(item)
        if item.ndim == 1 and np.issubdtype(item.dtype, np.floating):
            return Audio(item)
        raise InvalidArgumentError(
            f"an array part must be an (h, w, 3) uint8 image or 1-D float audio, got {item.dtype} {item.shape}"
        )
    if type(item).__module__.startswith("PIL.") and hasattr(item, "convert"):  # a PIL image
        return Image(np.asarray(item.convert("RGB"), dtype=np.uint8))
    raise InvalidArgumentError(
        "a content part must be text, omni.Image, omni.Audio, omni.Video, EncodedAudio, a PIL image or a numpy "
        f"array, got {type(item).__name__}"
    )


def parts(content, what: str = "content") -> tuple:
    """A content list (or one item) as a tuple of parts."""
    items = list(content) if isinstance(content, (list, tuple)) else [content]
    if len(items) > MAX_PARTS:
        raise InvalidArgumentError(f"{what} has {len(items)} parts; at most {MAX_PARTS}")
    return tuple(part(x) for x in items)


def _items(x) -> list:
    """An input that may be one source or a list of them (None: none)."""
    return [] if x is None else list(x) if isinstance(x, (list, tuple)) else [x]


def shorthand(text=None, audio=None, image=None, video=None, *, video_audio=None, slices=None) -> tuple:
    """The keyword form as parts: images, then videos, then audio, then the text. ``slices``:
    one max_slice_nums per image (or None); ``video_audio``: the separate track of each video."""
    images = _items(image)
    per_image = slices if isinstance(slices, (list, tuple)) else [slices] * len(images)
    videos = _items(video)
    tracks = _items(video_audio)
    if tracks and len(tracks) != len(videos):
        raise InvalidArgumentError(f"video_audio gives {len(tracks)} tracks for {len(videos)} videos")
    out = [Image(src, n) for src, n in zip(images, per_image)]
    out += [v if isinstance(v, Video) else Video(v, tracks[i] if tracks else None) for i, v in enumerate(videos)]
    out += [a if isinstance(a, (Audio, EncodedAudio)) else Audio(a) for a in _items(audio)]
    if text:
        out.append(text)
    return parts(out)
