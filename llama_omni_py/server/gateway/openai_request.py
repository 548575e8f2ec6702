"""``POST /v1/chat/completions`` request bodies: checked field by field and turned into the
backend protocol's turn_based input. Every problem is an OpenAIError (HTTP status, message,
``param``, ``code``) before the request takes a queue place."""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass

from ... import checks
from ...errors import MediaError
from ...media import load_audio
from ..pcm import pcm_b64
from . import audio_codec

MAX_AUDIO_SECONDS = 30.0
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
# Fields that would change the reply: accepted with their no-op values, refused (400) otherwise
# (_unsupported) when this server cannot do what they ask.
KNOWN = {
    "model",
    "messages",
    "modalities",
    "audio",
    "max_tokens",
    "max_completion_tokens",
    "temperature",
    "top_p",
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
} | IGNORED
MAX_STOPS = 4
# image_url.detail -> max_slice_nums: "low" is the overview alone (64 rows), "high" and "auto"
# the model's full slicing (up to 9 slices besides the overview, as its processor does).
IMAGE_DETAIL = {"low": 1, "high": 9, "auto": 9}
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


def _number(body: dict, key: str, lo: float, hi: float, lo_open: bool = False):
    v = body.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not (lo < v if lo_open else lo <= v) or v > hi:
        raise bad(f"'{key}' must be a number in {'(' if lo_open else '['}{lo:g}, {hi:g}], got {v!r}", key)
    return v


def _int(body: dict, key: str, lo: int, hi: int):
    v = body.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise bad(f"'{key}' must be an integer in [{lo}, {hi}], got {v!r}", key)
    return v


def parse(body, model_name: str, audio_transcript, formats: tuple[str, ...]) -> ChatCompletion:
    """``audio_transcript(id)``: the transcript of an earlier reply's audio, or None."""
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
    modalities = body.get("modalities") or ["text"]
    if (
        not isinstance(modalities, list)
        or not all(isinstance(m, str) for m in modalities)
        or not set(modalities) <= {"text", "audio"}
        or "text" not in modalities
    ):
        raise bad('\'modalities\' must be ["text"] or ["text", "audio"]', "modalities")
    audio_out = "audio" in modalities
    voice = fmt = None
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise bad("'stream' must be a boolean", "stream")
    if audio_out:
        audio = body.get("audio")
        if not isinstance(audio, dict):
            raise bad(
                "'audio' ({voice, format}) is required when modalities include \"audio\"",
                "audio",
                "missing_required_parameter",
            )
        voice, fmt = audio.get("voice"), audio.get("format")
        if voice not in VOICES:
            raise bad(f"audio.voice must be one of {list(VOICES)} (one voice: the model set's)", "audio.voice")
        if fmt not in formats:
            raise bad(f"audio.format must be one of {list(formats)}, got {fmt!r}", "audio.format")
        if stream and fmt != "pcm16":
            raise bad('streamed audio is pcm16 only (set audio.format to "pcm16")', "audio.format")
    elif body.get("audio") is not None:
        raise bad("'audio' is given but modalities do not include \"audio\"", "audio")
    options = body.get("stream_options")
    if options is not None and (not stream or not isinstance(options, dict)):
        raise bad("'stream_options' is only allowed with stream: true, as an object", "stream_options")
    include_usage = (options or {}).get("include_usage")  # include_obfuscation: ignored
    if include_usage is not None and not isinstance(include_usage, bool):
        raise bad("'stream_options.include_usage' must be a boolean", "stream_options.include_usage")
    generation: dict = {}
    tokens = [_int(body, k, 1, 1 << 20) for k in ("max_completion_tokens", "max_tokens")]
    if tokens[0] is not None or tokens[1] is not None:
        generation["max_new_tokens"] = tokens[0] if tokens[0] is not None else tokens[1]
    for key, lo, hi, lo_open in (("temperature", 0.0, 2.0, False), ("top_p", 0.0, 1.0, True)):
        v = _number(body, key, lo, hi, lo_open)
        if v is not None:
            generation[key] = v
    seed = _int(body, "seed", -(2**63), 2**63 - 1)
    if seed is not None:
        generation["seed"] = seed % 2**32  # the engine's seeds are 32-bit
    stops = _stops(body.get("stop"))
    messages, audio_tokens, slices = _messages(body.get("messages"), audio_transcript)
    inp = {"messages": messages, "streaming": True, "tts": {"enabled": audio_out}, "generation": generation}
    if slices:
        inp["image"] = {"max_slice_nums": slices}
    return ChatCompletion(model, inp, stream, bool(include_usage), audio_out, voice, fmt, stops, audio_tokens)


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

    def refuse(key: str, message: str) -> None:
        raise bad(message, key, "unsupported_parameter")

    n = body.get("n", 1)
    if n != 1 or isinstance(n, bool):
        raise bad("only n = 1 is supported", "n")
    for key in ("frequency_penalty", "presence_penalty"):
        if body.get(key, 0) not in (0, 0.0):
            refuse(key, f"'{key}' is not supported (only 0)")
    if body.get("logprobs", False) is not False:
        refuse("logprobs", "logprobs are not supported")
    if body.get("top_logprobs", 0) != 0:
        refuse("top_logprobs", "top_logprobs are not supported (logprobs are not)")
    if body.get("logit_bias", {}) != {}:
        refuse("logit_bias", "logit_bias is not supported (only {})")
    tools = body.get("tools", [])
    if tools != []:
        refuse("tools", "tools are not supported by this model server")
    if body.get("tool_choice", "none") not in ("none", "auto"):
        refuse("tool_choice", 'tool_choice must be "none" (or "auto" with no tools): tools are not supported')
    if body.get("functions", []) != []:
        refuse("functions", "functions are not supported by this model server")
    if body.get("function_call", "none") not in ("none", "auto"):
        refuse("function_call", 'function_call must be "none": functions are not supported')
    fmt = body.get("response_format")
    if fmt is not None and fmt != {"type": "text"}:
        refuse("response_format", 'only response_format {"type": "text"} is supported')
    for key, what in (("moderation", "moderation"), ("web_search_options", "web search")):
        if key in body:
            refuse(key, f"{what} is not supported by this model server")


def _messages(messages, audio_transcript) -> tuple[list, int, list]:
    """The backend's messages, the LLM rows of the last user message's audio and the slices of
    its images (the turn's input: earlier messages count only with their text)."""
    if not isinstance(messages, list) or not messages:
        raise bad("'messages' must be a non-empty array", "messages", "missing_required_parameter")
    out, audio_rows, slices = [], 0, []
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(m, dict):
            raise bad(f"{where} must be an object", where)
        role = m.get("role")
        if role in ("system", "developer"):
            out.append({"role": "system", "content": _text_only(m.get("content"), where)})
        elif role == "user":
            content, audio_rows, slices = _user_content(m.get("content"), where)
            out.append({"role": "user", "content": content})
        elif role == "assistant":
            text = _text_only(m.get("content"), where) if m.get("content") is not None else ""
            audio = m.get("audio")
            if audio is not None and not (isinstance(audio, dict) and isinstance(audio.get("id"), str)):
                raise bad(f"{where}.audio must be {{id}}, the id (a string) of an earlier reply", f"{where}.audio")
            if audio is not None:
                said = audio_transcript(audio["id"])
                if said is None:
                    raise bad(f"{where}.audio.id {audio['id']!r} is unknown or expired", f"{where}.audio.id")
                text = text or said
            out.append({"role": "assistant", "content": text})
        else:
            raise bad(f"{where}.role must be system, developer, user or assistant, got {role!r}", f"{where}.role")
    if out[-1]["role"] != "user":
        raise bad("the last message must be the user's", f"messages[{len(out) - 1}].role")
    return out, audio_rows, slices


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
    row); at most 29.9 s are encoded."""
    frames = min(samples, int(MAX_ENCODED_SECONDS * INPUT_RATE)) // 160
    return (frames + 1) // 2 // 5


def _user_content(content, where: str) -> tuple[list, int, list]:
    """The backend's items, the LLM rows of their audio and each image's max_slice_nums."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}], 0, []
    if not isinstance(content, list) or not content:
        raise bad(f"{where}.content must be a string or a non-empty array of parts", f"{where}.content")
    items, audio_s, rows, slices = [], 0.0, 0, []
    for j, part in enumerate(content):
        at = f"{where}.content[{j}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text" and isinstance(part.get("text"), str):
            items.append({"type": "text", "text": part["text"]})
        elif kind in ("input_audio", "audio_url") and isinstance(part.get(kind), dict):
            if kind == "input_audio":
                spec = part["input_audio"]
                if spec.get("format") not in ("wav", "mp3"):
                    raise bad(f"{at}.input_audio.format must be wav or mp3", f"{at}.input_audio.format")
                data, what, param = _b64(spec.get("data"), f"{at}.input_audio.data"), spec["format"], "data"
            else:  # vLLM's form: a data URL of any audio format ffmpeg reads
                data, what, param = _data_url(part["audio_url"], f"{at}.audio_url", "audio"), "audio", "url"
            try:
                x = load_audio(data, None)
            except MediaError as e:
                raise bad(f"{at}.{kind}.{param} could not be decoded as {what}: {e}", f"{at}.{kind}.{param}") from None
            audio_s += x.size / INPUT_RATE
            if audio_s > MAX_AUDIO_SECONDS:
                raise bad(
                    f"input audio is {audio_s:.1f} s in all; the limit is {MAX_AUDIO_SECONDS:g} s", f"{at}.input_audio"
                )
            if x.size < INPUT_RATE // 10:
                raise bad(f"{at}.input_audio is shorter than 0.1 s", f"{at}.input_audio")
            items.append({"type": "audio", "data": pcm_b64(x)})
            rows += audio_rows(x.size)
        elif kind == "video_url" and isinstance(part.get("video_url"), dict):
            data = _data_url(part["video_url"], f"{at}.video_url", "video")
            if data[4:8] != b"ftyp":
                raise bad(f"{at}.video_url is not an MP4 file", f"{at}.video_url.url")
            item = {"type": "video", "data": base64.b64encode(data).decode("ascii")}
            use_audio = part["video_url"].get("use_audio")  # false: the frames alone (an extension)
            if use_audio is not None:
                if not isinstance(use_audio, bool):
                    raise bad(f"{at}.video_url.use_audio must be true or false", f"{at}.video_url.use_audio")
                item["use_audio"] = use_audio
            items.append(item)
        elif kind == "image_url" and isinstance(part.get("image_url"), dict):
            data = _data_url(part["image_url"], f"{at}.image_url", "image")
            detail = part["image_url"].get("detail") or "auto"  # SDKs send null for "not given"
            if detail not in IMAGE_DETAIL:
                raise bad(f"{at}.image_url.detail must be low, high or auto, got {detail!r}", f"{at}.image_url.detail")
            slices.append(IMAGE_DETAIL[detail])
            try:
                jpeg = audio_codec.to_jpeg(data)
            except MediaError as e:
                raise bad(f"{at}.image_url is not an image ffmpeg can read: {e}", f"{at}.image_url.url") from None
            items.append({"type": "image", "data": base64.b64encode(jpeg).decode("ascii")})
        else:
            raise bad(f"{at} must be a text, input_audio, audio_url, image_url or video_url part", f"{at}.type")
    return items, rows, slices


def _data_url(spec: dict, at: str, kind: str) -> bytes:
    """The bytes of a part's ``url``, which must be a base64 data URL (of a ``kind`` MIME type when
    it names one): this server fetches no remote URLs."""
    url = spec.get("url")
    m = _DATA_URL.fullmatch(url) if isinstance(url, str) else None
    if m is None or (m.group(1) and not m.group(1).startswith(kind + "/")):
        raise bad(
            f"{at}.url must be a data URL (data:{kind}/...;base64,...); this server fetches no remote URLs",
            f"{at}.url",
        )
    return _b64(m.group(3), f"{at}.url")
