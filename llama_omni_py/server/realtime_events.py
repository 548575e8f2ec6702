"""The OpenAI Realtime API on the wire (GA event names and shapes, as the official ``openai``
client types them in ``openai.types.realtime``): the session object, the client events this
server reads and the server events it writes. docs/serving.md, "OpenAI Realtime API".

Audio is ``audio/pcm``: 16-bit little-endian mono at 24 kHz both ways. Input is resampled to the
audio encoder's 16 kHz; output is Token2Wav's 24 kHz as is."""

from __future__ import annotations

import base64
import binascii
import uuid
from dataclasses import dataclass, field

import numpy as np

from ..constants import INPUT_SAMPLE_RATE, OUTPUT_SAMPLE_RATE
from ..errors import ConfigError, ProtocolError
from ..media import resample
from ..voice import VadOptions
from .realtime_fields import check_session, refusal

RATE = 24000  # the API's PCM rate, both ways
MAX_EVENT_AUDIO_BYTES = 15 << 20  # one event's base64 audio, as OpenAI allows (about 4 minutes)
MAX_BUFFER_SECONDS = 29.0  # a committed buffer, one audio item (the audio encoder holds 30 s)
MAX_TEXT_BYTES = 64 << 10  # the instructions, one text part of an item (more than a context holds)
# OpenAI's server_vad defaults (threshold, prefix_padding_ms, silence_duration_ms)
DEFAULT_TURN_DETECTION = {
    "type": "server_vad",
    "threshold": 0.5,
    "prefix_padding_ms": 300,
    "silence_duration_ms": 500,
    "create_response": True,
    "interrupt_response": True,
    "idle_timeout_ms": None,
}
VOICE = "default"  # the model set's voice (prompt_cache.gguf); named voices are accepted, not honoured


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:20]}"


@dataclass
class RealtimeConfig:
    """The effective session (what session.created / session.updated report)."""

    model: str
    instructions: str = ""
    output_modalities: list = field(default_factory=lambda: ["audio"])
    turn_detection: dict | None = field(default_factory=lambda: dict(DEFAULT_TURN_DETECTION))
    max_output_tokens: int | str = "inf"
    voice: str = VOICE
    id: str = field(default_factory=lambda: new_id("sess"))

    def vad_options(self) -> VadOptions:
        td = self.turn_detection or DEFAULT_TURN_DETECTION
        return VadOptions(
            threshold=float(td["threshold"]),
            min_silence_duration_ms=int(td["silence_duration_ms"]),
            speech_pad_ms=int(td["prefix_padding_ms"]),
        )

    def session(self) -> dict:
        fmt = {"type": "audio/pcm", "rate": RATE}
        return {
            "type": "realtime",
            "object": "realtime.session",
            "id": self.id,
            "model": self.model,
            "output_modalities": list(self.output_modalities),
            "instructions": self.instructions,
            "audio": {
                "input": {
                    "format": fmt,
                    "transcription": None,
                    "noise_reduction": None,
                    "turn_detection": self.turn_detection,
                },
                "output": {"format": fmt, "voice": self.voice, "speed": 1.0},
            },
            "max_output_tokens": self.max_output_tokens,
            "tools": [],
            "tool_choice": "auto",
        }

    def update(self, s: dict) -> None:
        """Applies a session.update's ``session`` (only the fields present; checked first, so a
        bad update changes nothing)."""
        if not isinstance(s, dict):
            raise ProtocolError("session must be an object", "invalid_value")
        if s.get("type", "realtime") != "realtime":
            raise ProtocolError("session.type must be 'realtime' (no transcription sessions here)", "invalid_value")
        check_session(s)
        new = dict(self.__dict__)
        if "instructions" in s:
            new["instructions"] = text_field(s["instructions"], "session.instructions")
        if "output_modalities" in s:
            m = s["output_modalities"]
            if m not in (["audio"], ["text"]):
                raise ProtocolError("session.output_modalities must be ['audio'] or ['text']", "invalid_value")
            new["output_modalities"] = list(m)
        if "max_output_tokens" in s:
            new["max_output_tokens"] = max_tokens(s["max_output_tokens"], "session.max_output_tokens")
        audio = s.get("audio") or {}
        if not isinstance(audio, dict):
            raise ProtocolError("session.audio must be an object", "invalid_value")
        inp, out = audio.get("input") or {}, audio.get("output") or {}
        for where, part in (("input", inp), ("output", out)):
            audio_format(part.get("format"), f"session.audio.{where}.format")
        if isinstance(out.get("voice"), str):
            new["voice"] = out["voice"]
        if isinstance(inp, dict) and "turn_detection" in inp:
            new["turn_detection"] = turn_detection(inp["turn_detection"])
        for k, v in new.items():
            setattr(self, k, v)
        if self.turn_detection is not None:
            self.vad_options()  # ranges were checked in turn_detection()


def text_field(v, where: str) -> str:
    """A string of at most MAX_TEXT_BYTES (UTF-8)."""
    if not isinstance(v, str):
        raise refusal(f"{where} must be a string", "invalid_value", where)
    if len(v) > MAX_TEXT_BYTES or len(v.encode("utf-8", "surrogatepass")) > MAX_TEXT_BYTES:
        raise refusal(f"{where} is longer than {MAX_TEXT_BYTES >> 10} KiB", "text_too_long", where)
    return v


def audio_format(fmt, where: str) -> None:
    """Only audio/pcm at 24 kHz, both ways (None: unchanged)."""
    if fmt is None:
        return
    if not isinstance(fmt, dict) or fmt.get("type") != "audio/pcm" or fmt.get("rate", RATE) != RATE:
        raise refusal(f"{where}: only audio/pcm at 24000 Hz", "invalid_value", where)


def max_tokens(v, where: str):
    if v == "inf":
        return v
    if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 4096:
        raise ProtocolError(f"{where} must be an integer in [1, 4096] or 'inf'", "invalid_value")
    return v


def turn_detection(td) -> dict | None:
    """A client's turn_detection: null (manual commit) or server_vad with its fields checked."""
    if td is None:
        return None
    if not isinstance(td, dict) or td.get("type") != "server_vad":
        raise ProtocolError(
            "session.audio.input.turn_detection must be null or of type server_vad (semantic_vad is not served)",
            "invalid_value",
        )
    out = {**DEFAULT_TURN_DETECTION, **{k: v for k, v in td.items() if k in DEFAULT_TURN_DETECTION}}
    for k in ("create_response", "interrupt_response"):
        if not isinstance(out[k], bool):
            raise ProtocolError(f"turn_detection.{k} must be true or false", "invalid_value")
    for k in ("threshold", "prefix_padding_ms", "silence_duration_ms"):
        if isinstance(out[k], bool) or not isinstance(out[k], (int, float)):
            raise ProtocolError(f"turn_detection.{k} must be a number", "invalid_value")
    try:
        VadOptions(
            threshold=float(out["threshold"]),
            min_silence_duration_ms=int(out["silence_duration_ms"]),
            speech_pad_ms=int(out["prefix_padding_ms"]),
        )
    except ConfigError as e:
        names = {"threshold": "threshold", "min_silence_duration_ms": "silence_duration_ms"}
        raise ProtocolError(
            f"turn_detection.{names.get(e.field, 'prefix_padding_ms')}: {str(e).split(': ', 1)[1]}", "invalid_value"
        ) from None
    return out


def pcm16_in(value, what: str, max_seconds: float | None = None) -> np.ndarray:
    """Base64 PCM16 at 24 kHz -> float32 at 16 kHz (the audio encoder's rate): at most
    MAX_EVENT_AUDIO_BYTES of base64, and ``max_seconds`` when given (refused by the length alone,
    before anything is decoded)."""
    if not isinstance(value, str):
        raise ProtocolError(f"{what} must be a base64 string of 16-bit PCM", "invalid_value")
    if len(value) > MAX_EVENT_AUDIO_BYTES:
        raise ProtocolError(f"{what} is more than {MAX_EVENT_AUDIO_BYTES >> 20} MiB of base64", "audio_too_long")
    if max_seconds is not None and len(value) * 3 // 4 > max_seconds * RATE * 2 + 4:
        raise ProtocolError(f"{what} is longer than {max_seconds:g} s", "audio_too_long")
    try:
        data = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise ProtocolError(f"{what} is not valid base64", "invalid_value") from None
    if len(data) % 2:
        raise ProtocolError(f"{what} is {len(data)} bytes, not whole 16-bit samples", "invalid_value")
    x = np.frombuffer(data, "<i2").astype(np.float32) / 32768.0
    return resample(x, RATE, INPUT_SAMPLE_RATE)


def pcm16_out(samples: np.ndarray) -> str:
    """Float32 at 24 kHz (Token2Wav's rate, the API's) -> base64 PCM16."""
    assert OUTPUT_SAMPLE_RATE == RATE
    pcm = (np.clip(samples, -1.0, 1.0) * 32767.0).astype("<i2")
    return base64.b64encode(pcm.tobytes()).decode("ascii")


def error(message: str, code: str = "invalid_value", event_id: str | None = None, param=None, kind=None) -> dict:
    return {
        "type": "error",
        "event_id": new_id("event"),
        "error": {
            "type": kind or "invalid_request_error",
            "code": code,
            "message": message,
            "param": param,
            "event_id": event_id,
        },
    }


def user_item(item_id: str, content: list) -> dict:
    return {
        "id": item_id,
        "object": "realtime.item",
        "type": "message",
        "role": "user",
        "status": "completed",
        "content": content,
    }


def assistant_item(item_id: str, status: str, modality: str, text: str | None = None) -> dict:
    if text is None:
        content = []
    elif modality == "audio":
        content = [{"type": "output_audio", "transcript": text}]
    else:
        content = [{"type": "output_text", "text": text}]
    return {
        "id": item_id,
        "object": "realtime.item",
        "type": "message",
        "role": "assistant",
        "status": status,
        "content": content,
    }


def response(rid: str, status: str, cfg: RealtimeConfig, modality: str, output=(), details=None, usage=None) -> dict:
    return {
        "id": rid,
        "object": "realtime.response",
        "conversation_id": "conv_" + cfg.id[5:],
        "status": status,
        "status_details": details,
        "output": list(output),
        "output_modalities": [modality],
        "max_output_tokens": cfg.max_output_tokens,
        "audio": {"output": {"format": {"type": "audio/pcm", "rate": RATE}, "voice": cfg.voice}},
        "usage": usage,
        "metadata": None,
    }


def event(type_: str, **fields) -> dict:
    return {"type": type_, "event_id": new_id("event"), **fields}
