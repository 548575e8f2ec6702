"""MiniCPM-o 4.5 turn-based speech prompting (docs/speech-path.md).

Special tokens are resolved by name from the loaded vocabulary, never by hard-coded id, so the
same code serves the real vocabulary (ids 151643..) and the tiny test one.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from ...content import EncodedAudio
from ...errors import InvalidArgumentError, ModelFileError
from ...vision.placeholder import placeholder_parts

# The voice-cloning system prompt of MiniCPM-o 4.5's speech assistant (Chinese, as both
# llama.cpp-omni and the reference use by default): the instruction before the voice sample, the
# role after it. llama.cpp-omni drops the identity sentence when the session has images.
VOICE_PREFIX = "模仿音频样本的音色并生成新的内容。"
ROLE_CHAT = "你的任务是用这种声音模式来当一个助手。请认真、高质量地回复用户的问题。请用高自然度的方式和用户聊天。"
ROLE_IDENTITY = "你是由面壁智能开发的人工智能助手：面壁小钢炮。"
NO_VOICE = "Use the <reserved_53> voice."  # the reference's system text when there is no voice sample
PROMPT_STYLES = ("llama.cpp-omni", "reference")
# llama.cpp-omni's evaluation CLIs: its system turn, one user header, the thinking block without
# <|tts_bos|> (its decoder runs with TTS off), a newline after every media part.
EVAL_CLI_STYLE = "llama.cpp-omni-eval"
# vLLM-Omni serving MiniCPM-o 4.5 for its benchmarks (vLLM's chat parser, the server run with
# --interleave-mm-strings): the reference's markers, every part in its order joined by "\n".
VLLM_OMNI_STYLE = "vllm-omni"
LAYOUTS = (*PROMPT_STYLES, EVAL_CLI_STYLE, VLLM_OMNI_STYLE)
ASSISTANT_TEXT_PREFIX = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
ASSISTANT_SPEECH_PREFIX = ASSISTANT_TEXT_PREFIX + "<|tts_bos|>"
ASSISTANT_PLAIN_PREFIX = "<|im_end|>\n<|im_start|>assistant\n"  # llama.cpp-omni's without the TTS template
ROLES = ("user", "assistant")

# Tokens the LLM emits that carry no speech: never handed to the TTS (docs/speech-path.md).
_NO_SPEECH = (
    "<think>",
    "</think>",
    "<|tts_eos|>",
    "<|speak|>",
    "<|listen|>",
    "<|chunk_eos|>",
    "<|chunk_tts_eos|>",
    "<|turn_eos|>",
)


@dataclass(frozen=True)
class SpecialTokens:
    tts_bos: int
    tts_eos: int
    im_end: int
    audio_start: int
    audio_end: int
    first_added: int  # ids from here on are added/special tokens (151643 in the real vocab)
    no_speech: frozenset  # ids dropped before the TTS

    @classmethod
    def resolve(cls, model) -> SpecialTokens:
        """From a native LlmModel: every name must be a single vocabulary entry."""

        def find(name: str) -> int:
            tid = model.find_token(name)
            if tid < 0:
                raise ModelFileError(f"the LLM vocabulary has no '{name}' token (not a MiniCPM-o 4.5 LLM?)")
            return tid

        first = find("<|endoftext|>")
        blank = model.tokenize("\n\n", False)  # Qwen's "\n\n" (id 271) is dropped too
        extra = set(blank) if len(blank) == 1 else set()
        return cls(
            find("<|tts_bos|>"),
            find("<|tts_eos|>"),
            find("<|im_end|>"),
            find("<|audio_start|>"),
            find("<|audio_end|>"),
            first,
            frozenset({find(n) for n in _NO_SPEECH} | extra),
        )

    def speaks(self, token: int) -> bool:
        """Whether an LLM token is handed to the TTS."""
        return token < self.first_added and token not in self.no_speech

    @property
    def reference_eos(self) -> frozenset:
        """The tokens the reference's generate() stops at: <|im_end|> and <|endoftext|>."""
        return frozenset({self.im_end, self.first_added})


@dataclass(frozen=True)
class EncodedMessage:
    """A message's content, encoded, in order: ("text", str), ("image", EncodedImage), ("frame",
    (64, n_embd) block: a video frame), ("audio", (n, n_embd) rows; n may be 0). ``video``: it
    holds a video's frames; ``omni``: and its audio -- the reference's omni mode, whose parts are
    joined by "" instead of newlines (docs/media-and-encoders.md#prompt-layout)."""

    parts: tuple
    video: bool = False
    omni: bool = False

    @property
    def has_images(self) -> bool:
        return any(kind in ("image", "frame") for kind, _ in self.parts)

    @property
    def has_media(self) -> bool:
        return any(kind != "text" for kind, _ in self.parts)

    @property
    def text(self) -> str:
        return "".join(x for kind, x in self.parts if kind == "text")


@dataclass
class Prompt:
    """A token sequence with optional embedding slots: segments of ('tokens', list[int]) or
    ('embeddings', ndarray (n, n_embd))."""

    segments: list

    def token_count(self) -> int:
        return sum(len(x) for kind, x in self.segments)


def join_of(message: EncodedMessage, style: str) -> str:
    """What separates a message's parts: the reference joins them with newlines, or with nothing
    in omni mode (``modeling_minicpmo.py`` ``chat``); llama.cpp-omni's turn-based pipeline puts
    them side by side, and its evaluation CLI writes a newline after every frame and audio
    segment of a video. vLLM joins a message's parts with newlines, omni mode or not: with
    --interleave-mm-strings each media placeholder stays where its part was
    (``vllm/entrypoints/chat_utils.py`` ``_get_interleaved_text_prompt``)."""
    if style in (EVAL_CLI_STYLE, VLLM_OMNI_STYLE):
        return "\n"
    if style == "llama.cpp-omni":
        return "\n" if message.video else ""
    return "" if message.omni else "\n"


def _tokens(model, text: str, special: bool = True) -> tuple:
    """``text`` as a token segment; client text is tokenized with ``special`` off, so it never
    becomes control tokens."""
    return ("tokens", list(model.tokenize(text, special)))


def _embeddings(model, block) -> tuple:
    """An embedding segment: a finite (n, n_embd) block of the LLM with n > 0."""
    n_embd = model.info.n_embd_inp
    emb = np.asarray(block, np.float32)
    if emb.ndim != 2 or emb.shape[1] != n_embd or emb.shape[0] == 0 or not np.isfinite(emb).all():
        raise InvalidArgumentError(f"an embedding block must be finite (n, {n_embd}), got {emb.shape}")
    return ("embeddings", emb)


def _media_segments(model, kind: str, media, image_layout: str, image_numbers: Iterator[int] | None) -> list:
    """One media part of a message: a video frame (<image>..</image>, no id), an audio segment
    (<|audio_start|>..<|audio_end|>, the slot left out when it has no rows) or an image, laid out
    as ``image_layout`` says and numbered from ``image_numbers`` (None: no <image_id>)."""
    if kind == "frame":
        return [_tokens(model, "<image>"), _embeddings(model, media), _tokens(model, "</image>")]
    if kind == "audio":
        rows = np.asarray(media)
        slot = [_embeddings(model, rows)] if rows.shape[0] else []
        return [_tokens(model, "<|audio_start|>"), *slot, _tokens(model, "<|audio_end|>")]
    image_id = next(image_numbers) if image_numbers is not None else None
    layout = placeholder_parts(media.grid, image_layout, image_id)
    return [_embeddings(model, media.blocks[p]) if isinstance(p, int) else _tokens(model, p) for p in layout]


def message_body(
    model, message: EncodedMessage, style: str, image_layout: str, image_numbers: Iterator[int] | None
) -> list:
    """A message's parts in order, joined as :func:`join_of` says; runs of text (and the joins
    between them) are tokenized together, as client text, so a client cannot write control
    tokens."""
    join, out, text = join_of(message, style), [], []
    for i, (kind, x) in enumerate(message.parts):
        if i:
            text.append(join)
        if kind == "text":
            text.append(x)
            continue
        if "".join(text):
            out.append(_tokens(model, "".join(text), special=False))
        text = []
        out += _media_segments(model, kind, x, image_layout, image_numbers)
    if "".join(text):
        out.append(_tokens(model, "".join(text), special=False))
    return out


def system_turn(
    model, system_prompt: str | None | bool, reference_audio: np.ndarray | None, style: str, has_images: bool
) -> list:
    """The system turn: the voice-clone instruction with the reference-audio slot, then the role
    text (``system_prompt`` when given, as client text); False: no system turn. llama.cpp-omni
    keeps the voice slot even without a voice and drops the identity sentence when the turn has
    images; the reference writes its no-voice text instead of an empty slot. llama.cpp-omni's
    turn-based server writes the first user header twice (docs/fidelity.md)."""
    if system_prompt is False:
        return []
    lco = style in ("llama.cpp-omni", EVAL_CLI_STYLE)
    if system_prompt is not None:
        role = _tokens(model, system_prompt, special=False)
    else:
        role = _tokens(model, ROLE_CHAT + ("" if lco and has_images else ROLE_IDENTITY))
    voice = [_embeddings(model, reference_audio)] if reference_audio is not None else []
    if lco:
        seg = [_tokens(model, f"<|im_start|>system\n{VOICE_PREFIX}\n<|audio_start|>"), *voice]
        seg += [_tokens(model, "<|audio_end|>"), role]
    elif voice:
        seg = [_tokens(model, f"<|im_start|>system\n{VOICE_PREFIX}\n<|audio_start|>"), *voice]
        seg += [_tokens(model, "<|audio_end|>\n"), role]
    else:
        seg = [_tokens(model, f"<|im_start|>system\n{NO_VOICE}\n"), role]
    seg.append(_tokens(model, "<|im_end|>\n"))
    if style == "llama.cpp-omni":
        seg.append(_tokens(model, "<|im_start|>user\n"))
    return seg


def history_turns(
    model, history: Sequence[tuple], style: str, image_layout: str, image_numbers: Iterator[int] | None
) -> list:
    """Earlier turns, each (role, text, EncodedAudio or EncodedMessage) in its own role's turn."""
    seg: list = []
    for who, content in history:
        if isinstance(content, EncodedAudio):
            content = EncodedMessage((("audio", content.embeddings),))
        elif isinstance(content, str):
            content = EncodedMessage((("text", content),))
        body = message_body(model, content, style, image_layout, image_numbers)
        seg += [_tokens(model, f"<|im_start|>{who}\n"), *body, _tokens(model, "<|im_end|>\n")]
    return seg


def assistant_opening(model, tts_template: bool, style: str) -> tuple:
    """The assistant prefix: the speech one (ends in <|tts_bos|>) when ``tts_template``, else the
    plain one; llama.cpp-omni's server opens a plain assistant turn without the empty thinking
    block."""
    if tts_template:
        return _tokens(model, ASSISTANT_SPEECH_PREFIX)
    return _tokens(model, ASSISTANT_PLAIN_PREFIX if style == "llama.cpp-omni" else ASSISTANT_TEXT_PREFIX)


def _check_arguments(user, system_prompt, history: Sequence[tuple], style: str) -> None:
    if style not in LAYOUTS:
        raise InvalidArgumentError(f"style must be one of {LAYOUTS}, got {style!r}")
    if not isinstance(user, EncodedMessage):
        raise InvalidArgumentError(f"user must be an EncodedMessage, got {type(user).__name__}")
    if system_prompt is not None and not isinstance(system_prompt, str) and system_prompt is not False:
        raise InvalidArgumentError("system_prompt must be a string, None or False")
    for turn in history:
        if not (
            isinstance(turn, (tuple, list))
            and len(turn) == 2
            and turn[0] in ROLES
            and isinstance(turn[1], (str, EncodedAudio, EncodedMessage))
        ):
            raise InvalidArgumentError(f"history items must be (role, text) with role in {ROLES}, got {turn!r}")
    if not user.text.strip() and not user.has_media:
        raise InvalidArgumentError("empty input: give text, audio or an image")


def turn_based_prompt(
    model,
    *,
    reference_audio: np.ndarray | None = None,
    user: EncodedMessage,
    system_prompt: str | None | bool = None,
    history: Sequence[tuple] = (),
    tts_template: bool = True,
    style: str = "llama.cpp-omni",
    image_layout: str | None = None,
    image_ids: bool = True,
) -> Prompt:
    """System prompt (voice-clone wording with the reference-audio slot; its role text is
    `system_prompt` when given, and False leaves the system turn out), earlier turns of `history`
    ((role, text, EncodedAudio or EncodedMessage), role user or assistant), the user turn
    (``user``, its parts in order) and the assistant prefix: the speech one (ends in <|tts_bos|>)
    when `tts_template`, else the plain one. Embedding blocks must be (n, n_embd) of the LLM.

    `style` is whose prompt (docs/fidelity.md): "llama.cpp-omni" lays a single turn out token
    for token as its turn-based pipeline does (the voice slot even without a voice, its second user
    header, its shorter role text when the turn has an image); "reference" as the reference's chat
    template and processor do; "llama.cpp-omni-eval" as llama.cpp-omni's evaluation CLIs do;
    "vllm-omni" as the reference, its parts joined as vLLM-Omni's server joins a chat request's
    content parts. A message's parts are joined as :func:`join_of` says.

    An image is an :class:`~llama_omni_py.modules.vpm.EncodedImage` (overview and slices, laid out as
    `image_layout` says (None: as `style`; the reference's under "vllm-omni"), numbered with
    <image_id> when `image_ids` and the layout has them); a frame one (n, n_embd) block
    (<image>..</image>, no id)."""
    _check_arguments(user, system_prompt, history, style)
    layout = image_layout or ("reference" if style == VLLM_OMNI_STYLE else style)
    image_numbers = itertools.count() if image_ids else None  # <image_id>s count the prompt's images
    seg = system_turn(model, system_prompt, reference_audio, style, user.has_images)
    seg += history_turns(model, history, style, layout, image_numbers)
    seg += [_tokens(model, "<|im_start|>user\n"), *message_body(model, user, style, layout, image_numbers)]
    seg.append(assistant_opening(model, tts_template, style))
    return Prompt(seg)
