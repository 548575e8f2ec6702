"""A request's inputs: checked at the API boundary, media encoded (the audio and image encoders
load on first use), and assembled into the LLM prompt."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from . import checks
from .apm import AudioEncoder
from .config import LlmSampling
from .errors import InvalidArgumentError
from .prompt import ROLES, EncodedAudio, Prompt, simplex_speech_prompt
from .results import MediaStats
from .vision import VisionConfig, slice_counts, slices_of
from .vpm import ImageEncoder


def _items(x) -> list:
    """An input that may be one source or a list of them (None: none)."""
    return [] if x is None else list(x) if isinstance(x, (list, tuple)) else [x]


@dataclass(frozen=True)
class Request:
    """One reply's inputs and options, checked at construction."""

    text: str | None = None
    audio: object = None
    image: object = None
    video: object = None
    voice: object = None
    seed: int = 0
    max_new_tokens: int | None = None
    system_prompt: str | None = None
    history: tuple = ()
    speech: bool = True
    tts_template: bool = True
    stack_frames: int | None = None
    llm: LlmSampling | None = None  # this reply's LLM sampling (None: the session's)
    max_slice_nums: object = None  # int, or one int per image; None: the session's VisionConfig

    def __post_init__(self):
        if self.text is not None:
            checks.text(self.text)
        if self.system_prompt is not None:
            checks.text(self.system_prompt, "system_prompt")
        object.__setattr__(self, "seed", checks.seed(self.seed))
        if self.max_new_tokens is not None:
            checks.int_in("max_new_tokens", self.max_new_tokens, 1, config=False)
        if self.stack_frames is not None:
            checks.int_in("stack_frames", self.stack_frames, 1, 64, config=False)
        history = tuple(self.history)
        for turn in history:
            if not (isinstance(turn, (tuple, list)) and len(turn) == 2 and turn[0] in ROLES):
                raise InvalidArgumentError(f"history items must be (role, text) with role in {ROLES}, got {turn!r}")
            if not isinstance(turn[1], EncodedAudio):
                checks.text(turn[1], "history text")
        object.__setattr__(self, "history", history)
        if self.llm is not None and not isinstance(self.llm, LlmSampling):
            raise InvalidArgumentError(f"llm must be an LlmSampling, got {type(self.llm).__name__}")
        for name in ("speech", "tts_template"):
            if not isinstance(getattr(self, name), bool):
                raise InvalidArgumentError(f"{name} must be True or False, got {getattr(self, name)!r}")
        object.__setattr__(self, "max_slice_nums", slice_counts(self.max_slice_nums, len(_items(self.image))))

    @property
    def has_media(self) -> bool:
        return any(x is not None for x in (self.audio, self.image, self.video, self.voice))


class InputEncoder:
    """Encodes a request's media; the encoders load when the first media input arrives."""

    def __init__(
        self,
        model_dir: Path,
        device: str,
        threads: int,
        audio_mode: str,
        stack_frames: int,
        audio_fidelity: str = "llama.cpp-omni",
        vision: VisionConfig | None = None,
    ):
        self._args = (model_dir, device, threads)
        self._audio_mode, self._stack_frames, self._audio_fidelity = audio_mode, stack_frames, audio_fidelity
        self.vision = vision or VisionConfig()
        self._apm: AudioEncoder | None = None
        self._vpm: ImageEncoder | None = None
        self._loading = threading.Lock()  # an engine's slots may ask at once

    @property
    def threads(self) -> int:
        return self._args[2]

    def encoders(self) -> tuple[AudioEncoder, ImageEncoder]:
        """The audio and image encoders (loaded now if they were not yet)."""
        model_dir, device, threads = self._args
        with self._loading:
            if self._apm is None:
                self._apm = AudioEncoder(model_dir, device, threads, self._audio_mode, fidelity=self._audio_fidelity)
            if self._vpm is None:
                self._vpm = ImageEncoder(model_dir, device, threads, vision=self.vision)
        return self._apm, self._vpm

    def encode(self, r: Request) -> Media:
        """The request's media as LLM embeddings, with what encoding them cost (``stats``)."""
        media = Media()
        if not r.has_media:
            return media
        apm, vpm = self.encoders()
        t0 = time.perf_counter()
        media.voice = apm.encode(r.voice) if r.voice is not None else None
        media.audio = [a.embeddings if isinstance(a, EncodedAudio) else apm.encode(a) for a in _items(r.audio)]
        apm_ms = (time.perf_counter() - t0) * 1000
        t0 = time.perf_counter()
        media.images = [
            vpm.encode_sliced(image, slices_of(r.max_slice_nums, i)) for i, image in enumerate(_items(r.image))
        ]
        frames = self._stack_frames if r.stack_frames is None else r.stack_frames
        for v in _items(r.video):
            media.images += vpm.encode_video(v, frames)
        vpm_ms = (time.perf_counter() - t0) * 1000
        # an image's overview and slices, or a video frame: one encoder input, 64 rows each
        blocks = [b for item in media.images for b in ((item,) if isinstance(item, np.ndarray) else item.blocks)]
        media.stats = MediaStats(apm_ms, vpm_ms, len(blocks), sum(int(b.shape[0]) for b in blocks))
        media.image_layout, media.image_ids = self.vision.layout, self.vision.use_image_id
        return media


@dataclass
class Media:
    """A request's media, encoded: the voice, user audio, images (EncodedImage: overview and
    slices) and video frames (one (64, n_embd) block each), and how the prompt lays images out."""

    voice: np.ndarray | None = None
    audio: list = field(default_factory=list)
    images: list = field(default_factory=list)
    stats: MediaStats = field(default_factory=MediaStats)
    image_layout: str = "reference"
    image_ids: bool = True


def build_prompt(
    llm_model, r: Request, media: Media, history: tuple | None = None, style: str = "llama.cpp-omni"
) -> Prompt:
    """The LLM prompt of ``r`` with its encoded media (``history`` overrides the request's), laid
    out in ``style`` (prompt.simplex_speech_prompt)."""
    return simplex_speech_prompt(
        llm_model,
        r.text or "",
        reference_audio=media.voice,
        user_audio=media.audio,
        user_images=media.images,
        system_prompt=r.system_prompt,
        history=r.history if history is None else history,
        tts_template=r.tts_template,
        style=style,
        image_layout=media.image_layout,
        image_ids=media.image_ids,
    )
