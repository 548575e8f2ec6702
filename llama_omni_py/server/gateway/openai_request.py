"""``POST /v1/chat/completions`` request bodies: checked field by field and turned into the
backend protocol's turn_based input. Every problem is an OpenAIError (HTTP status, message,
``param``, ``code``) before the request takes a queue place.

Besides OpenAI's fields, the request shapes of vLLM's and vLLM-Omni's clients are taken as they
are: ``chat_template_kwargs``, ``mm_processor_kwargs``, ``audio_url``/``video_url`` parts,
``file://`` media under ``--allowed-local-media-path``, ``top_k``, and the speech fields of
vLLM-Omni's text-to-speech requests (``ref_audio``, ``ref_text``, ``task_type``, ``language``,
``max_new_tokens``). Each key these objects may hold is listed here; any other is refused by
name."""

from __future__ import annotations

import base64
import os
import re
import stat
import urllib.parse
from dataclasses import dataclass

from ... import checks
from ...errors import MediaError
from ...media import load_audio
from ...video import MAX_FRAMES, MAX_STACK_FRAMES
from ...vision import MAX_SLICE_NUMS
from ..pcm import MAX_REF_AUDIO_SECONDS, pcm_b64
from . import audio_codec
from .config import GatewayConfig

MAX_ENCODED_SECONDS = 29.9  # the audio encoder's position table (apm.py, mode "clamp")
INPUT_RATE = 16000
VOICES = (
    "default",
    *("alloy", "ash", "ballad", "coral", "echo", "fable", "nova", "onyx", "sage", "shimmer", "verse", "marin", "cedar"),
)
# Fields of OpenAI's chat-completion request (openai/types/chat/completion_create_params.py) that
# change nothing in one reply from this server: accepted and ignored.
IGNORED = {
    "user",
    "metadata",
    "store",
    "service_tier",
    "parallel_tool_calls",
    "prompt_cache_key",
    "prompt_cache_options",
    "prompt_cache_retention",
    "safety_identifier",
    "verbosity",
    "reasoning_effort",
    "prediction",
}
# vLLM-Omni's text-to-speech request fields (its Seed-TTS requests put them on the body).
SPEECH_FIELDS = {"ref_audio", "ref_text", "task_type", "language", "max_new_tokens"}
# Fields that would change the reply: accepted with their no-op values, refused (400) otherwise
# (_unsupported) when this server cannot do what they ask.
KNOWN = (
    {
        "model",
        "messages",
        "modalities",
        "audio",
        "max_tokens",
        "max_completion_tokens",
        "temperature",
        "top_p",
        "top_k",
        "seed",
        "stream",
        "stream_options",
        "n",
        "frequency_penalty",
        "presence_penalty",
        "logprobs",
        "top_logprobs",
        "logit_bias",
        "tools",
        "tool_choice",
        "functions",
        "function_call",
        "response_format",
        "moderation",
        "web_search_options",
        "stop",
        "ignore_eos",
        "chat_template_kwargs",
        "mm_processor_kwargs",
    }
    | IGNORED
    | SPEECH_FIELDS
)
# chat_template_kwargs this server honours: the MiniCPM-o template's variables it has a meaning for.
TEMPLATE_KWARGS = ("enable_thinking", "use_tts_template")
# mm_processor_kwargs this server honours: MiniCPM-o's processor options and ours for videos.
PROCESSOR_KWARGS = ("use_audio_in_video", "max_slice_nums", "use_image_id", "max_frames", "stack_frames")
MAX_STOPS = 4
# image_url.detail -> max_slice_nums: "low" is the overview alone (64 rows), "high" and "auto"
# the model's full slicing (up to 9 slices besides the overview, as its processor does).
IMAGE_DETAIL = {"low": 1, "high": MAX_SLICE_NUMS, "auto": MAX_SLICE_NUMS}
# an image part without detail or mm_processor_kwargs.max_slice_nums: MiniCPM-o's processor's
# own max_slice_nums (its preprocessor_config.json), which vLLM-Omni's server applies too
DEFAULT_SLICES = MAX_SLICE_NUMS
MIB = 2**20
_DATA_URL = re.compile(r"data:([a-z]+/[A-Za-z0-9.+-]+)?(;[A-Za-z0-9=.+-]+)*;base64,(.*)", re.S)


class OpenAIError(Exception):
    """An OpenAI error object with its HTTP status; ``retry_after`` (seconds) goes out as the
    ``Retry-After`` header of a refusal (429, 503) that a client should retry."""

    def __init__(
        self,
        status: int,
        message: str,
        param: str | None = None,
        code: str | None = None,
        type_=None,
        retry_after: int | None = None,
    ):
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code
        self.retry_after = retry_after
        client = {400: "invalid_request_error", 404: "invalid_request_error", 413: "invalid_request_error"}
        self.type = type_ or {**client, 429: "rate_limit_error"}.get(status, "server_error")

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


def bad(message: str, param: str | None = None, code: str = "invalid_value") -> OpenAIError:
    return OpenAIError(400, message, param, code)


def refuse(message: str, param: str) -> OpenAIError:
    """A field or value this server understands but does not do (400 ``unsupported_parameter``)."""
    return OpenAIError(400, message, param, "unsupported_parameter")


@dataclass
class ChatCompletion:
    model: str
    inp: dict  # the backend input
    stream: bool
    include_usage: bool
    audio_out: bool
    voice: str | None
    audio_format: str | None
    stops: tuple[str, ...] = ()  # the reply is cut before the first of these
    audio_tokens: int = 0  # LLM rows of this turn's input audio (usage.prompt_tokens_details)
    # Audio out asked without an ``audio`` object, as vLLM-Omni's clients do: streamed, the text
    # goes in delta.content and each audio chunk is a WAV file in delta.content (vLLM-Omni's
    # server's layout); whole, the reply is OpenAI's shape in WAV.
    omni_audio: bool = False


@dataclass(frozen=True)
class ProcessorOptions:
    """A request's ``mm_processor_kwargs``, checked (None: not given)."""

    use_audio_in_video: bool | None = None
    max_slice_nums: int | None = None
    max_frames: int | None = None
    stack_frames: int | None = None


def _number(body: dict, key: str, lo: float, hi: float, lo_open: bool = False):
    v = body.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not (lo < v if lo_open else lo <= v) or v > hi:
        raise bad(f"'{key}' must be a number in {'(' if lo_open else '['}{lo:g}, {hi:g}], got {v!r}", key)
    return v


def _int(body: dict, key: str, lo: int, hi: int, where: str = ""):
    v = body.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise bad(f"'{where}{key}' must be an integer in [{lo}, {hi}], got {v!r}", where + key)
    return v


def _flag(d: dict, key: str, where: str = ""):
    v = d.get(key)
    if v is not None and not isinstance(v, bool):
        raise bad(f"'{where}{key}' must be true or false, got {v!r}", where + key)
    return v


def parse(body, model_name: str, audio_transcript, formats: tuple[str, ...], config=None) -> ChatCompletion:
    """``audio_transcript(id)``: the transcript of an earlier reply's audio, or None. ``config``:
    the GatewayConfig whose media rules apply (local files, audio limit, image ids); None: the
    defaults."""
    if not isinstance(body, dict):
        raise bad("the request body must be a JSON object", None, "invalid_request")
    body = {k: v for k, v in body.items() if v is not None}  # SDKs send null for "not given"
    unknown = sorted(set(body) - KNOWN)
    if unknown:
        raise bad(f"Unrecognized request argument supplied: {unknown[0]}", unknown[0], "unknown_parameter")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise bad("'model' is required (see GET /v1/models)", "model", "missing_required_parameter")
    if model != model_name:
        raise OpenAIError(
            404, f"The model '{model}' does not exist; this server serves '{model_name}'", "model", "model_not_found"
        )
    _unsupported(body)
    cfg = config if config is not None else GatewayConfig()
    use_tts_template = _template_options(body)
    media = _Media(cfg, _processor_options(body, cfg))
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise bad("'stream' must be a boolean", "stream")
    audio_out, voice, fmt, omni_audio = _output(body, stream, formats)
    include_usage = _stream_options(body, stream)
    generation = _generation(body)
    stops = _stops(body.get("stop"))
    messages = _messages(body.get("messages"), audio_transcript, media)
    inp = {"messages": messages, "streaming": True, "tts": {"enabled": audio_out}, "generation": generation}
    _speech_fields(body, media, inp)
    if use_tts_template:
        inp["use_tts_template"] = True
    if media.slices:
        inp["image"] = {"max_slice_nums": media.slices}
    return ChatCompletion(
        model, inp, stream, include_usage, audio_out, voice, fmt, stops, media.rows, omni_audio=omni_audio
    )


def _output(body: dict, stream: bool, formats: tuple[str, ...]) -> tuple[bool, str | None, str | None, bool]:
    """(audio out, voice, format, vLLM-Omni's audio layout) from ``modalities`` and ``audio``."""
    modalities = body.get("modalities") or ["text"]
    if (
        not isinstance(modalities, list)
        or not all(isinstance(m, str) for m in modalities)
        or not set(modalities) <= {"text", "audio"}
        or "text" not in modalities
    ):
        raise bad('\'modalities\' must be ["text"] or ["text", "audio"]', "modalities")
    audio = body.get("audio")
    if "audio" not in modalities:
        if audio is not None:
            raise bad("'audio' is given but modalities do not include \"audio\"", "audio")
        return False, None, None, False
    if audio is None:  # vLLM-Omni's clients ask for audio by modalities alone: its server's default, WAV
        return True, "default", "wav", True
    if not isinstance(audio, dict):
        raise bad("'audio' must be an object {voice, format}", "audio")
    voice, fmt = audio.get("voice"), audio.get("format")
    if voice not in VOICES:
        raise bad(f"audio.voice must be one of {list(VOICES)} (one voice: the model set's)", "audio.voice")
    if fmt not in formats:
        raise bad(f"audio.format must be one of {list(formats)}, got {fmt!r}", "audio.format")
    if stream and fmt != "pcm16":
        raise bad('streamed audio is pcm16 only (set audio.format to "pcm16")', "audio.format")
    return True, voice, fmt, False


def _stream_options(body: dict, stream: bool) -> bool:
    options = body.get("stream_options")
    if options is not None and (not stream or not isinstance(options, dict)):
        raise bad("'stream_options' is only allowed with stream: true, as an object", "stream_options")
    include_usage = (options or {}).get("include_usage")  # include_obfuscation: ignored
    if include_usage is not None and not isinstance(include_usage, bool):
        raise bad("'stream_options.include_usage' must be a boolean", "stream_options.include_usage")
    return bool(include_usage)


def _generation(body: dict) -> dict:
    """This turn's LLM sampling and token limit (the smallest of the limits given)."""
    generation: dict = {}
    limits = [_int(body, k, 1, 1 << 20) for k in ("max_completion_tokens", "max_tokens", "max_new_tokens")]
    first = next((n for n in limits[:2] if n is not None), None)  # max_completion_tokens wins, as at OpenAI
    given = [n for n in (first, limits[2]) if n is not None]
    if given:
        generation["max_new_tokens"] = min(given)
    for key, lo, hi, lo_open in (("temperature", 0.0, 2.0, False), ("top_p", 0.0, 1.0, True)):
        v = _number(body, key, lo, hi, lo_open)
        if v is not None:
            generation[key] = v
    top_k = _int(body, "top_k", -1, 1 << 20)
    if top_k is not None:
        generation["top_k"] = max(top_k, 0)  # vLLM's -1 (and 0): no top-k cut
    seed = _int(body, "seed", -(2**63), 2**63 - 1)
    if seed is not None:
        generation["seed"] = seed % 2**32  # the engine's seeds are 32-bit
    return generation


def _stops(stop) -> tuple[str, ...]:
    if stop is None or stop == "":
        return ()
    stops = [stop] if isinstance(stop, str) else stop
    if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops):
        raise bad("'stop' must be a string or an array of non-empty strings", "stop")
    if len(stops) > MAX_STOPS:
        raise bad(f"'stop' takes at most {MAX_STOPS} sequences, got {len(stops)}", "stop")
    return tuple(dict.fromkeys(stops))


def _unsupported(body: dict) -> None:
    """Refuses what would change the reply and is not implemented; their no-op values pass."""
    n = body.get("n", 1)
    if n != 1 or isinstance(n, bool):
        raise bad("only n = 1 is supported", "n")
    for key in ("frequency_penalty", "presence_penalty"):
        if body.get(key, 0) not in (0, 0.0):
            raise refuse(f"'{key}' is not supported (only 0)", key)
    if body.get("logprobs", False) is not False:
        raise refuse("logprobs are not supported", "logprobs")
    if body.get("top_logprobs", 0) != 0:
        raise refuse("top_logprobs are not supported (logprobs are not)", "top_logprobs")
    if body.get("logit_bias", {}) != {}:
        raise refuse("logit_bias is not supported (only {})", "logit_bias")
    tools = body.get("tools", [])
    if tools != []:
        raise refuse("tools are not supported by this model server", "tools")
    if body.get("tool_choice", "none") not in ("none", "auto"):
        raise refuse('tool_choice must be "none" (or "auto" with no tools): tools are not supported', "tool_choice")
    if body.get("functions", []) != []:
        raise refuse("functions are not supported by this model server", "functions")
    if body.get("function_call", "none") not in ("none", "auto"):
        raise refuse('function_call must be "none": functions are not supported', "function_call")
    fmt = body.get("response_format")
    if fmt is not None and fmt != {"type": "text"}:
        raise refuse('only response_format {"type": "text"} is supported', "response_format")
    for key, what in (("moderation", "moderation"), ("web_search_options", "web search")):
        if key in body:
            raise refuse(f"{what} is not supported by this model server", key)
    if body.get("ignore_eos", False) is not False:
        raise refuse("ignore_eos is not supported (only false): a reply ends where the model ends it", "ignore_eos")


def _template_options(body: dict) -> bool | None:
    """``chat_template_kwargs``: ``enable_thinking`` (false: replies never think here, which is what
    MiniCPM-o's evaluations ask) and ``use_tts_template`` (the speech template; with audio out it
    is always on). Returns use_tts_template."""
    kw = body.get("chat_template_kwargs")
    if kw is None:
        return None
    if not isinstance(kw, dict):
        raise bad("'chat_template_kwargs' must be an object", "chat_template_kwargs")
    where = "chat_template_kwargs."
    for key in sorted(kw):
        if key not in TEMPLATE_KWARGS:
            raise refuse(
                f"{where}{key} is not supported: this server takes {' and '.join(TEMPLATE_KWARGS)}", where + key
            )
    if _flag(kw, "enable_thinking", where):
        raise refuse(
            f"{where}enable_thinking: thinking is not supported yet; send false or leave it out (replies do not think)",
            where + "enable_thinking",
        )
    return _flag(kw, "use_tts_template", where)


def _processor_options(body: dict, cfg: GatewayConfig) -> ProcessorOptions:
    """``mm_processor_kwargs``, as MiniCPM-o's processor takes them: ``use_audio_in_video`` (false:
    a video part is its frames alone), ``max_slice_nums`` (1..9: slices of every image part with
    no ``detail``; 1 is the overview alone), ``use_image_id`` (must match the workers' layout),
    and ours for video parts: ``max_frames``, ``stack_frames``."""
    kw = body.get("mm_processor_kwargs")
    if kw is None:
        return ProcessorOptions()
    where = "mm_processor_kwargs."
    if not isinstance(kw, dict):
        raise bad("'mm_processor_kwargs' must be an object", "mm_processor_kwargs")
    kw = {k: v for k, v in kw.items() if v is not None}
    for key in sorted(kw):
        if key not in PROCESSOR_KWARGS:
            raise refuse(f"{where}{key} is not supported: this server takes {', '.join(PROCESSOR_KWARGS)}", where + key)
    ids = _flag(kw, "use_image_id", where)
    if ids is not None and ids != cfg.image_ids:
        laid = "write <image_id> before each image" if cfg.image_ids else "write no <image_id> before images"
        raise refuse(
            f"{where}use_image_id {str(ids).lower()}: this server's workers {laid} (their --fidelity)",
            where + "use_image_id",
        )
    return ProcessorOptions(
        use_audio_in_video=_flag(kw, "use_audio_in_video", where),
        max_slice_nums=_int(kw, "max_slice_nums", 1, MAX_SLICE_NUMS, where),
        max_frames=_int(kw, "max_frames", 1, MAX_FRAMES, where),
        stack_frames=_int(kw, "stack_frames", 1, MAX_STACK_FRAMES, where),
    )


def _speech_fields(body: dict, media: _Media, inp: dict) -> None:
    """vLLM-Omni's text-to-speech fields: ``ref_audio`` (a data URL or a file:// URL, at most 30 s)
    is the voice to speak with; ``task_type`` must be "Base" (cloning that voice); ``ref_text``
    and ``language`` are taken and not used (this model clones from the audio alone and speaks
    the text's language); ``max_new_tokens`` is a token limit (_generation)."""
    for key in ("ref_text", "language", "task_type"):
        if key in body and not isinstance(body[key], str):
            raise bad(f"'{key}' must be a string", key)
    if body.get("task_type", "Base") != "Base":
        raise refuse(
            f"task_type {body['task_type']!r} is not supported: this server speaks with the voice of ref_audio "
            '(task_type "Base")',
            "task_type",
        )
    ref = body.get("ref_audio")
    if ref is None:
        return
    if not isinstance(ref, str):
        raise bad("'ref_audio' must be a data URL or a file:// URL of audio", "ref_audio")
    x = _decoded_audio(media.url_bytes(ref, "ref_audio", "audio"), "ref_audio", "audio")
    if x.size > MAX_REF_AUDIO_SECONDS * INPUT_RATE:
        raise bad(
            f"ref_audio is {x.size / INPUT_RATE:.1f} s; the limit is {MAX_REF_AUDIO_SECONDS:g} s",
            "ref_audio",
            "audio_too_long",
        )
    inp["tts"]["ref_audio_data"] = pcm_b64(x)


class _Media:
    """The media of one request as its parts are read: the rules of the gateway's configuration,
    the local files still allowed, and the counts of the message being read (its audio seconds and
    LLM rows, one max_slice_nums per image)."""

    def __init__(self, cfg: GatewayConfig, options: ProcessorOptions):
        self.cfg, self.options = cfg, options
        root = cfg.allowed_local_media_path
        self.root = os.path.realpath(root) if root else None
        self.local_left = cfg.max_local_media_bytes
        self.start_message()

    def start_message(self) -> None:
        self.audio_s, self.rows, self.slices = 0.0, 0, []

    def add_audio(self, samples: int, param: str) -> None:
        """Counts a clip against the audio limit (a video's own track is not a clip: not counted)."""
        self.audio_s += samples / INPUT_RATE
        limit = self.cfg.max_audio_seconds
        if self.audio_s > limit:
            raise bad(
                f"the message's audio clips come to {self.audio_s:.1f} s; the limit is {limit:g} s "
                "(--max-audio-seconds; a video's own audio track is not counted)",
                param,
                "audio_too_long",
            )
        self.rows += audio_rows(samples)

    def url_bytes(self, url, param: str, kind: str) -> bytes:
        """The bytes a part's URL names: a base64 data URL (of a ``kind`` MIME type when it names
        one), or a file:// URL under the allowed directory. This server fetches no remote URLs."""
        if isinstance(url, str) and url[:5].lower() == "file:":
            return self._local_file(url, param)
        m = _DATA_URL.fullmatch(url) if isinstance(url, str) else None
        if m is None or (m.group(1) and not m.group(1).startswith(kind + "/")):
            raise bad(
                f"{param} must be a data URL (data:{kind}/...;base64,...) or a file:// URL under "
                "--allowed-local-media-path; this server fetches no remote URLs",
                param,
            )
        return _b64(m.group(3), param)

    def _local_file(self, url: str, param: str) -> bytes:
        if self.root is None:
            raise OpenAIError(
                400,
                f"{param} is a file:// URL, but this server reads no local files (start it with "
                "--allowed-local-media-path DIR to read files under DIR)",
                param,
                "local_media_not_allowed",
            )
        parts = urllib.parse.urlsplit(url)
        path = urllib.parse.unquote(parts.path)
        if parts.netloc not in ("", "localhost") or parts.query or parts.fragment or not path.startswith("/"):
            raise bad(f"{param} must be file:///absolute/path (no host, query or fragment)", param)
        if "\x00" in path or not _inside(os.path.realpath(path), self.root):
            raise OpenAIError(
                400,
                f"{param} names a file outside --allowed-local-media-path (its path, with every link and '..' "
                "resolved, must stay inside that directory)",
                param,
                "local_media_not_allowed",
            )
        data = _read_inside(os.path.realpath(path), self.root, self.local_left, self.cfg.max_local_media_bytes, param)
        self.local_left -= len(data)
        return data


def _inside(path: str, root: str) -> bool:
    return path != root and os.path.commonpath([path, root]) == root


def _read_inside(real: str, root: str, left: int, total: int, param: str) -> bytes:
    """A regular file's bytes, opened without following a last link, checked again (by the opened
    descriptor) to lie inside ``root``, and refused beyond ``left`` bytes."""
    try:
        if not stat.S_ISREG(os.stat(real).st_mode):
            raise bad(f"{param} is not a regular file", param)
        flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
        fd = os.open(real, flags)
    except FileNotFoundError:
        raise bad(f"{param}: no such file", param) from None
    except OSError as e:
        raise bad(f"{param} cannot be read ({e.strerror})", param) from None
    with os.fdopen(fd, "rb") as f:
        opened = f"/proc/self/fd/{f.fileno()}"  # where the descriptor really points (Linux)
        if os.path.exists(opened) and not _inside(os.path.realpath(opened), root):
            raise OpenAIError(
                400, f"{param} names a file outside --allowed-local-media-path", param, "local_media_not_allowed"
            )
        size = os.fstat(f.fileno()).st_size
        data = f.read(left + 1) if size <= left else b""
    if size > left or len(data) > left:
        raise OpenAIError(
            413,
            f"{param} is {max(size, len(data)) / MIB:.1f} MiB; the request's local files may come to "
            f"{total / MIB:g} MiB in all (--max-local-media-mb), {left / MIB:.1f} MiB of it left",
            param,
            "request_too_large",
        )
    return data


def _messages(messages, audio_transcript, media: _Media) -> list:
    """The backend's messages. ``media`` ends with the counts of the last user message (the turn's
    input: earlier messages count only with their text)."""
    if not isinstance(messages, list) or not messages:
        raise bad("'messages' must be a non-empty array", "messages", "missing_required_parameter")
    out = []
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(m, dict):
            raise bad(f"{where} must be an object", where)
        role = m.get("role")
        if role in ("system", "developer"):
            out.append({"role": "system", "content": _text_only(m.get("content"), where)})
        elif role == "user":
            media.start_message()
            out.append({"role": "user", "content": _user_content(m.get("content"), where, media)})
        elif role == "assistant":
            out.append({"role": "assistant", "content": _assistant_text(m, where, audio_transcript)})
        else:
            raise bad(f"{where}.role must be system, developer, user or assistant, got {role!r}", f"{where}.role")
    if out[-1]["role"] != "user":
        raise bad("the last message must be the user's", f"messages[{len(out) - 1}].role")
    return out


def _assistant_text(m: dict, where: str, audio_transcript) -> str:
    text = _text_only(m.get("content"), where) if m.get("content") is not None else ""
    audio = m.get("audio")
    if audio is not None and not (isinstance(audio, dict) and isinstance(audio.get("id"), str)):
        raise bad(f"{where}.audio must be {{id}}, the id (a string) of an earlier reply", f"{where}.audio")
    if audio is not None:
        said = audio_transcript(audio["id"])
        if said is None:
            raise bad(f"{where}.audio.id {audio['id']!r} is unknown or expired", f"{where}.audio.id")
        text = text or said
    return text


def _text_only(content, where: str) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, dict) and p.get("type") == "text" for p in content):
        if all(isinstance(p.get("text"), str) for p in content):
            return "".join(p["text"] for p in content)
    raise bad(f"{where}.content must be a string or an array of text parts", f"{where}.content")


def _b64(value, param: str) -> bytes:
    try:
        return checks.base64_bytes(value, param)
    except ValueError as e:
        raise bad(str(e), param) from None


def audio_rows(samples: int) -> int:
    """The LLM embedding rows the audio encoder makes of ``samples`` at 16 kHz: 10 per second
    (a 10 ms mel frame per 160 samples, halved by the encoder's stride, 5 frames pooled to a
    row), at most 29.9 s of them: an estimate, for a reply whose worker sent no count (a worker
    counts the rows its encoder made, and under the reference rules a clip over 30 s is encoded
    whole, in 30 s windows)."""
    frames = min(samples, int(MAX_ENCODED_SECONDS * INPUT_RATE)) // 160
    return (frames + 1) // 2 // 5


def _decoded_audio(data: bytes, param: str, what: str):
    try:
        x = load_audio(data, None)
    except MediaError as e:
        raise bad(f"{param} could not be decoded as {what}: {e}", param) from None
    if x.size < INPUT_RATE // 10:
        raise bad(f"{param} is shorter than 0.1 s", param)
    return x


def _user_content(content, where: str, media: _Media) -> list:
    """The backend's items of a user message, in order (``media`` counts their audio and images)."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list) or not content:
        raise bad(f"{where}.content must be a string or a non-empty array of parts", f"{where}.content")
    items = []
    for j, part in enumerate(content):
        at = f"{where}.content[{j}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text" and isinstance(part.get("text"), str):
            items.append({"type": "text", "text": part["text"]})
        elif kind in ("input_audio", "audio_url") and isinstance(part.get(kind), dict):
            items.append(_audio_item(part, kind, at, media))
        elif kind == "video_url" and isinstance(part.get("video_url"), dict):
            items.append(_video_item(part["video_url"], f"{at}.video_url", media))
        elif kind == "image_url" and isinstance(part.get("image_url"), dict):
            items.append(_image_item(part["image_url"], f"{at}.image_url", media))
        else:
            raise bad(f"{at} must be a text, input_audio, audio_url, image_url or video_url part", f"{at}.type")
    return items


def _audio_item(part: dict, kind: str, at: str, media: _Media) -> dict:
    if kind == "input_audio":
        spec = part["input_audio"]
        if spec.get("format") not in ("wav", "mp3"):
            raise bad(f"{at}.input_audio.format must be wav or mp3", f"{at}.input_audio.format")
        param = f"{at}.input_audio.data"
        x = _decoded_audio(_b64(spec.get("data"), param), param, spec["format"])
    else:  # vLLM's form: a data URL (or a local file) of any audio format ffmpeg reads
        param = f"{at}.audio_url.url"
        x = _decoded_audio(media.url_bytes(part["audio_url"].get("url"), param, "audio"), param, "audio")
    media.add_audio(x.size, f"{at}.{kind}")
    return {"type": "audio", "data": pcm_b64(x)}


def _video_item(spec: dict, at: str, media: _Media) -> dict:
    """An MP4 watched as frames with its own audio (``use_audio`` false in the part, ours, or
    ``mm_processor_kwargs.use_audio_in_video`` false: the frames alone)."""
    data = media.url_bytes(spec.get("url"), f"{at}.url", "video")
    if data[4:8] != b"ftyp":
        raise bad(f"{at} is not an MP4 file", f"{at}.url")
    item = {"type": "video", "data": base64.b64encode(data).decode("ascii")}
    use_audio = spec.get("use_audio")
    if use_audio is not None and not isinstance(use_audio, bool):
        raise bad(f"{at}.use_audio must be true or false", f"{at}.use_audio")
    options = media.options
    use_audio = options.use_audio_in_video if use_audio is None else use_audio
    if use_audio is not None:
        item["use_audio"] = use_audio
    for key in ("max_frames", "stack_frames"):
        if getattr(options, key) is not None:
            item[key] = getattr(options, key)
    return item


def _image_item(spec: dict, at: str, media: _Media) -> dict:
    data = media.url_bytes(spec.get("url"), f"{at}.url", "image")
    detail = spec.get("detail")  # SDKs send null for "not given"
    if detail is not None and detail not in IMAGE_DETAIL:
        raise bad(f"{at}.detail must be low, high or auto, got {detail!r}", f"{at}.detail")
    if detail is not None:
        media.slices.append(IMAGE_DETAIL[detail])
    else:
        media.slices.append(media.options.max_slice_nums or DEFAULT_SLICES)
    try:
        jpeg = audio_codec.to_jpeg(data)
    except MediaError as e:
        raise bad(f"{at} is not an image ffmpeg can read: {e}", f"{at}.url") from None
    return {"type": "image", "data": base64.b64encode(jpeg).decode("ascii")}
