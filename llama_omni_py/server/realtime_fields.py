"""Which fields of the Realtime API's session and response objects this server serves, which it
takes only at the values that change nothing, and which it refuses (docs/serving.md, "OpenAI
Realtime API"). A field that would change the answer and is not served is refused with an error
naming it, never accepted without effect; so is a field the GA API does not define (a beta-era
name gets its GA place in the message). Refusals are ProtocolErrors with ``param`` set."""

from __future__ import annotations

import json

from ..errors import ProtocolError


def _null(v) -> bool:
    return v is None


def _empty(v) -> bool:
    return v is None or v == []


NO_OP_SESSION = {  # field -> the values that change nothing here
    "tools": _empty,
    "tool_choice": lambda v: v in (None, "auto", "none"),
    "include": _empty,
    "prompt": _null,
    "tracing": _null,
    "truncation": lambda v: v in (None, "auto"),  # the oldest turns leave a full context, as "auto"
    "parallel_tool_calls": lambda v: v is None or isinstance(v, bool),
    "reasoning": _null,
}
SESSION_SERVED = frozenset({"type", "instructions", "output_modalities", "max_output_tokens", "audio", "model"})
AUDIO_INPUT = (frozenset({"format", "turn_detection"}), {"noise_reduction": _null, "transcription": _null})
AUDIO_OUTPUT = (frozenset({"format", "voice"}), {"speed": lambda v: v is None or v == 1.0})
RESPONSE_SERVED = frozenset(
    {"output_modalities", "max_output_tokens", "instructions", "metadata", "audio", "conversation"}
)
NO_OP_RESPONSE = {
    "tools": _empty,
    "tool_choice": NO_OP_SESSION["tool_choice"],
    "prompt": _null,
    "input": _null,  # out-of-band input is not served
}
BETA_NAMES = {  # the beta API's session fields and where the GA session has them
    "modalities": "session.output_modalities",
    "turn_detection": "session.audio.input.turn_detection",
    "input_audio_format": "session.audio.input.format",
    "output_audio_format": "session.audio.output.format",
    "input_audio_transcription": "session.audio.input.transcription",
    "input_audio_noise_reduction": "session.audio.input.noise_reduction",
    "voice": "session.audio.output.voice",
    "speed": "session.audio.output.speed",
    "max_response_output_tokens": "session.max_output_tokens",
    "temperature": None,
}


def refusal(message: str, code: str, param: str | None) -> ProtocolError:
    e = ProtocolError(message, code)
    e.param = param
    return e


def _check(obj: dict, where: str, served: frozenset, no_op: dict, beta: dict | None = None) -> None:
    for key, value in obj.items():
        name = f"{where}.{key}"
        if key in served:
            continue
        if key in no_op:
            if not no_op[key](value):
                why = f"{name} is not served by this server (got {json.dumps(value)[:60]}); leave it out"
                raise refusal(why, "unsupported_parameter", name)
            continue
        if beta is not None and key in beta:
            ga = beta[key]
            where_now = f"the GA session takes {ga}" if ga else "the GA session has no such field"
            raise refusal(f"{name} is the beta API's name: {where_now}", "unknown_parameter", name)
        raise refusal(f"{name} is not a field of the Realtime API's {where.split('.')[0]}", "unknown_parameter", name)


def _check_audio(audio, where: str) -> None:
    if audio is None:
        return
    if not isinstance(audio, dict):
        raise refusal(f"{where} must be an object", "invalid_value", where)
    _check(audio, where, frozenset({"input", "output"}), {})
    for part, (served, no_op) in (("input", AUDIO_INPUT), ("output", AUDIO_OUTPUT)):
        value = audio.get(part)
        if value is not None and not isinstance(value, dict):
            raise refusal(f"{where}.{part} must be an object", "invalid_value", f"{where}.{part}")
        _check(value or {}, f"{where}.{part}", served, no_op)


def check_session(s: dict) -> None:
    """Every field of a session.update's ``session`` is served or at a no-op value."""
    _check(s, "session", SESSION_SERVED, NO_OP_SESSION, BETA_NAMES)
    if s.get("model") is not None and not isinstance(s["model"], str):
        raise refusal("session.model must be a string", "invalid_value", "session.model")
    _check_audio(s.get("audio"), "session.audio")


def check_response(r: dict) -> None:
    """Every field of a response.create's ``response`` is served or at a no-op value."""
    _check(r, "response", RESPONSE_SERVED, NO_OP_RESPONSE)
    if r.get("conversation", "auto") not in (None, "auto"):
        raise refusal(
            "response.conversation: out-of-band responses are not served; use 'auto'",
            "unsupported_parameter",
            "response.conversation",
        )
    if r.get("instructions") is not None and not isinstance(r["instructions"], str):
        raise refusal("response.instructions must be a string", "invalid_value", "response.instructions")
    _check_audio(r.get("audio"), "response.audio")
    if isinstance(r.get("audio"), dict) and (r["audio"].get("input") is not None):
        raise refusal("response.audio takes only output", "unknown_parameter", "response.audio.input")
