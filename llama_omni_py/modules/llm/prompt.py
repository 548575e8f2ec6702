"""MiniCPM-o 4.5 turn-based speech prompting (docs/speech-path.md).

Special tokens are resolved by name from the loaded vocabulary, never by hard-coded id, so the
same code serves the real vocabulary (ids 151643..) and the tiny test one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..._lazy import lazy
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
LAYOUTS = (*PROMPT_STYLES, EVAL_CLI_STYLE)
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
    segment of a video."""
    if style == EVAL_CLI_STYLE:
        return "\n"
    if style == "llama.cpp-omni":
        return "\n" if message.video else ""
    return "" if message.omni else "\n"


def legacy_message(user_text: str, user_audio: Sequence = (), user_images: Sequence = ()) -> EncodedMessage:
    """The keyword layout: images (an ndarray is a video frame), then audio, then the text."""
    parts = [("frame" if isinstance(im, np.ndarray) else "image", im) for im in user_images]
    parts += [("audio", a) for a in user_audio]
    if user_text:
        parts.append(("text", user_text))
    return EncodedMessage(tuple(parts))


def turn_based_prompt(
    model,
    user_text: str = "",
    reference_audio: np.ndarray | None = None,
    user_audio: Sequence[np.ndarray] = (),
    user_images: Sequence = (),
    *,
    user: EncodedMessage | None = None,
    system_prompt: str | None | bool = None,
    history: Sequence[tuple] = (),
    tts_template: bool = True,
    style: str = "llama.cpp-omni",
    image_layout: str | None = None,
    image_ids: bool = True,
) -> Prompt:
    """System prompt (voice-clone wording with the reference-audio slot; its role text is
    `system_prompt` when given, and False leaves the system turn out), earlier turns of `history`
    ((role, text, EncodedAudio or EncodedMessage), role user or assistant), the user turn and
    the assistant prefix: the speech one (ends in <|tts_bos|>) when `tts_template`, else the plain
    one. The user turn is ``user`` (its parts in order), or -- the keyword form -- the images,
    then the audio, then `user_text`. Embedding blocks must be (n, n_embd) of the LLM.

    `style` is whose prompt (docs/fidelity.md): "llama.cpp-omni" lays a single turn out token
    for token as its turn-based pipeline does (the voice slot even without a voice, its second user
    header, its shorter role text when the turn has an image); "reference" as the reference's chat
    template and processor do; "llama.cpp-omni-eval" as llama.cpp-omni's evaluation CLIs do. A
    message's parts are joined as :func:`join_of` says.

    An image is an :class:`~llama_omni_py.modules.vpm.EncodedImage` (overview and slices, laid out as
    `image_layout` says (None: as `style`), numbered with <image_id> when `image_ids` and the
    layout has them); a frame one (n, n_embd) block (<image>..</image>, no id)."""
    if style not in LAYOUTS:
        raise InvalidArgumentError(f"style must be one of {LAYOUTS}, got {style!r}")
    if user is None:
        if not isinstance(user_text, str):
            raise InvalidArgumentError("text must be a string")
        user = legacy_message(user_text, user_audio, user_images)
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

    def tok(s: str, special: bool = True):
        return ("tokens", list(model.tokenize(s, special)))

    n_embd = model.info.n_embd_inp

    def block(b) -> tuple:
        emb = np.asarray(b, np.float32)
        if emb.ndim != 2 or emb.shape[1] != n_embd or emb.shape[0] == 0 or not np.isfinite(emb).all():
            raise InvalidArgumentError(f"an embedding block must be finite (n, {n_embd}), got {emb.shape}")
        return ("embeddings", emb)

    numbered = [0]  # <image_id>s count the prompt's images

    def body(message: EncodedMessage) -> list:
        """A message's parts in order, joined; runs of text (and the newlines between them) are
        tokenized together, as client text, so a client cannot write control tokens."""
        join, out, text = join_of(message, style), [], []
        for i, (kind, x) in enumerate(message.parts):
            if i:
                text.append(join)
            if kind == "text":
                text.append(x)
                continue
            if "".join(text):
                out.append(tok("".join(text), special=False))
            text = []
            if kind == "frame":
                out += [tok("<image>"), block(x), tok("</image>")]
            elif kind == "audio":
                rows = np.asarray(x)
                out += [tok("<|audio_start|>"), *([block(rows)] if rows.shape[0] else []), tok("<|audio_end|>")]
            else:
                layout = placeholder_parts(x.grid, image_layout or style, numbered[0] if image_ids else None)
                numbered[0] += 1
                out += [block(x.blocks[p]) if isinstance(p, int) else tok(p) for p in layout]
        if "".join(text):
            out.append(tok("".join(text), special=False))
        return out

    cli = style == EVAL_CLI_STYLE
    lco = style == "llama.cpp-omni" or cli
    seg: list = []
    if system_prompt is not False:
        # client text never becomes control tokens
        role = [tok(system_prompt, special=False)] if system_prompt is not None else []
        if not role:
            role = [tok(ROLE_CHAT + ("" if lco and user.has_images else ROLE_IDENTITY))]
        if lco:  # the voice slot is there even when empty
            seg = [tok(f"<|im_start|>system\n{VOICE_PREFIX}\n<|audio_start|>")]
            seg += [block(reference_audio)] if reference_audio is not None else []
            seg += [tok("<|audio_end|>"), *role]
        elif reference_audio is not None:
            seg = [tok(f"<|im_start|>system\n{VOICE_PREFIX}\n<|audio_start|>"), block(reference_audio)]
            seg += [tok("<|audio_end|>\n"), *role]
        else:
            seg = [tok(f"<|im_start|>system\n{NO_VOICE}\n"), *role]
        seg.append(tok("<|im_end|>\n"))
        if lco and not cli:  # its turn-based server writes the first user header twice (docs/fidelity.md)
            seg.append(tok("<|im_start|>user\n"))
    for who, content in history:  # earlier turns, then the user turn opens
        if isinstance(content, EncodedAudio):
            content = EncodedMessage((("audio", content.embeddings),))
        elif isinstance(content, str):
            content = EncodedMessage((("text", content),))
        seg += [tok(f"<|im_start|>{who}\n"), *body(content), tok("<|im_end|>\n")]
    seg.append(tok("<|im_start|>user\n"))
    seg += body(user)
    if tts_template:
        seg.append(tok(ASSISTANT_SPEECH_PREFIX))
    else:  # llama.cpp-omni's server opens a plain assistant turn, without the empty thinking block
        seg.append(tok(ASSISTANT_PLAIN_PREFIX if lco and not cli else ASSISTANT_TEXT_PREFIX))
    return Prompt(seg)


__getattr__, _ = lazy(__name__, {}, old={"simplex_speech_prompt": (__name__, "turn_based_prompt")})
