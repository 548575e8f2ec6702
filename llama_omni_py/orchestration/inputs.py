"""A request's inputs: checked at the API boundary, media encoded (the audio and image encoders
load on first use), and assembled into the LLM prompt.

A message is a list of parts in order (llama_omni_py.content); each part becomes the reference's
marker in the prompt: an image its placeholder, audio ``<|audio_start|>`` rows ``<|audio_end|>``,
a video its frames each followed by the audio of its span (llama_omni_py.video). How a video's
audio segments are encoded follows ``VideoConfig.segments``: each on its own (llama.cpp-omni's
evaluation CLI) or, merged with the message's other audio, as the reference does.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from .. import checks
from ..config import LlmSampling
from ..content import Audio, EncodedAudio, Image, Video, parts, shorthand
from ..errors import InvalidArgumentError
from ..media import MAX_AUDIO_SECONDS
from ..modules.apm import AudioEncoder
from ..modules.llm.prompt import LAYOUTS, ROLES, EncodedMessage, Prompt, turn_based_prompt
from ..modules.vpm import ImageEncoder
from ..results import MediaStats
from ..video import MAX_FRAMES, MAX_STACK_FRAMES, VideoConfig, load_video
from ..vision import VisionConfig, slice_counts, slices_of


@dataclass(frozen=True)
class Request:
    """One reply's inputs and options, checked at construction. ``content`` is the user
    message's parts in order; ``history`` earlier (role, content) turns, content a str, an
    EncodedAudio or a tuple of parts."""

    content: tuple = ()
    ref_audio: object = None  # reference audio for the system prompt's voice slot
    seed: int = 0
    max_new_tokens: int | None = None
    system_prompt: str | None | bool = None  # None: the default role text; False: no system turn
    history: tuple = ()
    speech: bool = True
    tts_template: bool = True
    llm: LlmSampling | None = None  # this reply's LLM sampling (None: the session's)
    max_slice_nums: object = None  # int, or one int per image; None: the session's VisionConfig
    max_frames: int | None = None  # video overrides for this request (None: the session's VideoConfig)
    stack_frames: int | None = None
    omni: bool | None = None  # the reference's omni mode ("" joins); None: when a video brings audio
    prompt_style: str | None = None  # prompt.LAYOUTS; None: the session's prompt rules
    reply_text: str | None = None  # teacher forcing: the reply is this text, spoken from its hidden states
    prompt: Prompt | None = None  # a prompt built already (an evaluation's own layout); content stays empty

    def __post_init__(self):
        object.__setattr__(self, "content", parts(self.content))
        if self.system_prompt is not None and self.system_prompt is not False:
            checks.text(self.system_prompt, "system_prompt")
        object.__setattr__(self, "seed", checks.seed(self.seed))
        if self.max_new_tokens is not None:
            checks.int_in("max_new_tokens", self.max_new_tokens, 1, config=False)
        history = []
        for turn in self.history:
            if not (isinstance(turn, (tuple, list)) and len(turn) == 2 and turn[0] in ROLES):
                raise InvalidArgumentError(f"history items must be (role, content) with role in {ROLES}, got {turn!r}")
            role, content = turn
            if isinstance(content, (list, tuple)):
                content = parts(content, "a history turn")
            elif not isinstance(content, EncodedAudio):
                checks.text(content, "history text")
            history.append((role, content))
        object.__setattr__(self, "history", tuple(history))
        if self.llm is not None and not isinstance(self.llm, LlmSampling):
            raise InvalidArgumentError(f"llm must be an LlmSampling, got {type(self.llm).__name__}")
        for name in ("speech", "tts_template"):
            if not isinstance(getattr(self, name), bool):
                raise InvalidArgumentError(f"{name} must be True or False, got {getattr(self, name)!r}")
        if self.prompt is not None:
            if not isinstance(self.prompt, Prompt) or not self.prompt.segments:
                raise InvalidArgumentError("prompt must be a non-empty prompt.Prompt")
            if self.content or self.history or self.ref_audio is not None:
                raise InvalidArgumentError(
                    "a prebuilt prompt takes no content, history or reference audio: they are in it"
                )
        if self.reply_text is not None:
            checks.text(self.reply_text, "reply_text")
            if not self.reply_text.strip():
                raise InvalidArgumentError("reply_text must not be empty")
        if self.prompt_style is not None:
            checks.choice("prompt_style", self.prompt_style, LAYOUTS, config=False)
        if self.omni is not None and not isinstance(self.omni, bool):
            raise InvalidArgumentError(f"omni must be True, False or None, got {self.omni!r}")
        images = sum(isinstance(p, Image) for p in self.content)
        object.__setattr__(self, "max_slice_nums", slice_counts(self.max_slice_nums, images))
        if self.max_frames is not None:
            checks.int_in("max_frames", self.max_frames, 1, MAX_FRAMES, config=False)
        if self.stack_frames is not None:
            checks.int_in("stack_frames", self.stack_frames, 1, MAX_STACK_FRAMES, config=False)

    @classmethod
    def of(cls, text=None, *, audio=None, image=None, video=None, video_audio=None, content=None, **options):
        """From the keyword form (images, videos, audio, then the text) or from ``content``."""
        if content is not None:
            if any(x is not None for x in (text, audio, image, video, video_audio)):
                raise InvalidArgumentError("give the inputs either as content= or as text/audio/image/video, not both")
            return cls(content, **options)
        if text is not None:
            checks.text(text)
        return cls(shorthand(text, audio, image, video, video_audio=video_audio), **options)

    @property
    def text(self) -> str:
        return "".join(p for p in self.content if isinstance(p, str))

    @property
    def has_media(self) -> bool:
        every = list(self.content) + [p for _, c in self.history if isinstance(c, tuple) for p in c]
        return self.ref_audio is not None or any(not isinstance(p, str) for p in every)

    def video_config(self, base: VideoConfig) -> VideoConfig:
        """The session's VideoConfig with this request's overrides."""
        changes = {
            k: v for k, v in (("max_frames", self.max_frames), ("stack_frames", self.stack_frames)) if v is not None
        }
        try:
            return replace(base, **changes) if changes else base
        except ValueError as e:  # a combination the config refuses (stacking under the evalkit rule)
            raise InvalidArgumentError(str(e)) from None


class InputEncoder:
    """Encodes a request's media; the encoders load when the first media input arrives."""

    def __init__(
        self,
        model_dir: Path,
        device: str,
        threads: int,
        audio_mode: str,
        audio_fidelity: str = "llama.cpp-omni",
        vision: VisionConfig | None = None,
        video: VideoConfig | None = None,
        resampler: str | None = None,
        audio_history: str = "clip",
        audio_positions: str = "consecutive",
    ):
        """``audio_history="carried"``: a request's clips (voice sample, history turns, the user's
        audio, separately encoded video segments), in prompt order, attend over one encoder
        history, as llama.cpp-omni's never-cleared one would have heard that conversation
        (docs/fidelity.md); requests then take turns on that history."""
        self._args = (model_dir, device, threads)
        self._audio_mode, self._audio_fidelity = audio_mode, audio_fidelity
        self._audio_rules = {"resampler": resampler, "stream_positions": audio_positions}
        self._carry = audio_history == "carried"
        self.vision = vision or VisionConfig()
        self.video = video or VideoConfig()
        self._apm: AudioEncoder | None = None
        self._vpm: ImageEncoder | None = None
        self._carried: AudioEncoder | None = None  # the history "carried" clips share
        self._loading = threading.Lock()  # an engine's slots may ask at once
        self._carrying = threading.Lock()

    @property
    def threads(self) -> int:
        return self._args[2]

    def encoders(self) -> tuple[AudioEncoder, ImageEncoder]:
        """The audio and image encoders (loaded now if they were not yet)."""
        model_dir, device, threads = self._args
        with self._loading:
            if self._apm is None:
                self._apm = AudioEncoder(
                    model_dir, device, threads, self._audio_mode, fidelity=self._audio_fidelity, **self._audio_rules
                )
            if self._vpm is None:
                self._vpm = ImageEncoder(model_dir, device, threads, vision=self.vision)
        return self._apm, self._vpm

    def encode(self, r: Request) -> Media:
        """The request's messages with their media as LLM embeddings, and what encoding them cost
        (``stats``)."""
        if not r.has_media:
            history = tuple((role, _text_message(c) if isinstance(c, tuple) else c) for role, c in r.history)
            return Media(user=_text_message(r.content), history=history)
        if not self._carry:
            return self._encode(r, None)
        with self._carrying:
            if self._carried is None:
                self._carried = self.encoders()[0].new_stream()
            self._carried.reset_stream()
            return self._encode(r, self._carried)

    def _encode(self, r: Request, carried: AudioEncoder | None) -> Media:
        work = _MessageWork(self, r, carried)
        ref = None
        if r.ref_audio is not None:
            t0 = time.perf_counter()
            ref = work.clip(work.apm.load(r.ref_audio, work.clamp))
            work.apm_ms += (time.perf_counter() - t0) * 1000
        history = tuple((role, work.message(c) if isinstance(c, tuple) else c) for role, c in r.history)
        user = work.message(r.content, r.max_slice_nums)
        media = Media(ref_audio=ref, user=user, history=history, stats=work.stats())
        media.image_layout, media.image_ids = self.vision.layout, self.vision.use_image_id
        return media


def _text_message(content: tuple) -> EncodedMessage:
    if any(not isinstance(p, str) for p in content):  # not expected: has_media said no media
        raise InvalidArgumentError("a message with media needs the encoders")
    return EncodedMessage(tuple(("text", p) for p in content))


class _MessageWork:
    """Encodes one request's messages, counting what it costs."""

    def __init__(self, owner: InputEncoder, r: Request, carried: AudioEncoder | None = None):
        self.owner, self.request = owner, r
        self.apm, self.vpm = owner.encoders()
        self.carried = carried  # the shared history under audio_history="carried"
        self.clamp = MAX_AUDIO_SECONDS if owner._audio_mode == "clamp" else None
        self.video = r.video_config(owner.video)
        self.apm_ms = self.vpm_ms = 0.0
        self.blocks = self.frames = self.segments = self.audio_rows = 0
        self.vision_rows = 0

    def stats(self) -> MediaStats:
        return MediaStats(
            self.apm_ms,
            self.vpm_ms,
            self.blocks,
            self.vision_rows,
            self.frames,
            self.segments,
            self.audio_rows,
        )

    def message(self, content: tuple, slices=None) -> EncodedMessage:
        """One message's parts, encoded in order. Images and frames go through the vision encoder
        in batches; audio after them, so that a video's segments can be encoded together."""
        out: list = []
        pending: list = []  # (index in out, samples, is a video segment)
        has_video = omni = False
        image_no = 0
        for p in content:
            if isinstance(p, str):
                out.append(("text", p))
            elif isinstance(p, EncodedAudio):
                out.append(("audio", np.asarray(p.embeddings, np.float32)))
            elif isinstance(p, Audio):
                t0 = time.perf_counter()
                pending.append((len(out), self.apm.load(p.source, self.clamp), False))
                self.apm_ms += (time.perf_counter() - t0) * 1000
                out.append(("audio", None))
            elif isinstance(p, Image):
                n = p.max_slice_nums if p.max_slice_nums is not None else slices_of(slices, image_no)
                image_no += 1
                t0 = time.perf_counter()
                encoded = self.vpm.encode_sliced(p.source, n)
                self.vpm_ms += (time.perf_counter() - t0) * 1000
                self.blocks += len(encoded.blocks)
                self.vision_rows += encoded.rows
                out.append(("image", encoded))
            elif isinstance(p, Video):
                has_video = True
                omni |= self._video(p, out, pending)
        self._audio(
            out, pending, merged=has_video and self.video.segment_encoding(self.owner._audio_fidelity) == "merged"
        )
        auto_omni = omni if self.request.omni is None else self.request.omni
        return EncodedMessage(tuple(out), video=has_video, omni=auto_omni)

    def _video(self, v: Video, out: list, pending: list) -> bool:
        """Appends a video's steps to ``out`` (its segments to ``pending``); whether it brought
        audio."""
        t0 = time.perf_counter()
        clip = load_video(v.source, v.config(self.video), audio=v.audio, transform=self.vpm.overview)
        tiles = [s for s in (clip.stacked or [])[: len(clip.frames)] if s is not None]  # what steps() uses
        pictures = list(clip.frames) + [self.vpm.overview(s) for s in tiles]
        blocks = self.vpm.encode_overviews(pictures)
        main, stacked = blocks[: len(clip.frames)], blocks[len(clip.frames) :]
        self.vpm_ms += (time.perf_counter() - t0) * 1000
        self.blocks += len(pictures)
        self.vision_rows += sum(int(b.shape[0]) for b in main + stacked)
        self.frames += len(pictures)
        extra = iter(stacked)
        for i, step in enumerate(clip.steps()):
            for kind, x in step:
                if kind == "audio":
                    pending.append((len(out), x, True))
                    out.append(("audio", None))
                    self.segments += 1
                else:
                    out.append(("frame", main[i] if kind == "frame" else next(extra)))
        return clip.segments is not None and len(clip.segments) > 0

    def _audio(self, out: list, pending: list, merged: bool) -> None:
        """Fills the audio parts: merged (the reference's rule for a message with a video), or
        each on its own -- a clip as the encoder's mode says, a segment whole (never clamped; an
        empty one is left out, as llama.cpp-omni's evaluation does)."""
        if not pending:
            return
        t0 = time.perf_counter()
        if merged:
            rows = self.apm.encode_as_reference([x for _, x, _ in pending], True, self.video.audio_chunk_seconds)
        else:
            rows = [self._one(x, segment) for _, x, segment in pending]
        for (i, _, _), r in zip(pending, rows):
            out[i] = ("audio", r)
            self.audio_rows += 0 if r is None else int(r.shape[0])
        out[:] = [p for p in out if not (p[0] == "audio" and p[1] is None)]
        self.apm_ms += (time.perf_counter() - t0) * 1000

    def clip(self, samples: np.ndarray) -> np.ndarray:
        """A loaded clip's embeddings: on its own, or after the history of the clips before it."""
        return self.apm.encode(samples) if self.carried is None else self.carried.encode_carried(samples)

    def _one(self, samples: np.ndarray, segment: bool):
        if not segment:
            return self.clip(samples)
        if samples.size == 0:
            return None
        if self.carried is not None:
            return self.carried.encode_carried(samples)
        if self.owner._audio_fidelity == "reference":  # the reference's own rows for a lone segment
            return self.apm.encode_as_reference([samples], False, self.video.audio_chunk_seconds)[0]
        return self.apm.encode_long(samples)


@dataclass
class Media:
    """A request's messages, encoded: the voice, the user message and the history (each message
    an EncodedMessage; plain text and EncodedAudio turns stay as they are), and how the prompt
    lays images out."""

    ref_audio: np.ndarray | None = None
    user: EncodedMessage = field(default_factory=lambda: EncodedMessage(()))
    history: tuple = ()
    stats: MediaStats = field(default_factory=MediaStats)
    image_layout: str = "reference"
    image_ids: bool = True


def build_prompt(
    llm_model, r: Request, media: Media, history: tuple | None = None, style: str = "llama.cpp-omni"
) -> Prompt:
    """The LLM prompt of ``r`` with its encoded media (``history`` overrides the encoded history),
    laid out in ``style`` (prompt.turn_based_prompt)."""
    return turn_based_prompt(
        llm_model,
        reference_audio=media.ref_audio,
        user=media.user,
        system_prompt=r.system_prompt,
        history=media.history if history is None else history,
        tts_template=r.tts_template,
        style=style,
        image_layout=media.image_layout,
        image_ids=media.image_ids,
    )
