"""Messages of the MiniCPM-o demo's half-duplex mode on the wire (docs/server-protocol.md,
"Half duplex"): ``prepare`` (system prompt or system_content, config {vad, generation, tts,
session}, ref_audio_base64), ``audio_chunk``, ``stop`` in; ``prepared``, ``vad_state``,
``generating``, ``chunk``, ``turn_done``, ``stopped``, ``timeout``, ``error`` out. Every violation
raises ProtocolError naming the field; unknown keys are ignored, as the demo does."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ....config import LlmSampling
from ....constants import OUTPUT_SAMPLE_RATE
from ....errors import ConfigError, ProtocolError
from ....modules.llm.prompt import VOICE_PREFIX
from ....results import SpeechChunk
from ....voice import VadOptions
from ...pcm import MAX_REF_AUDIO_SECONDS, float_pcm, pcm_b64
from ..backend.protocol import object_field

DEFAULT_TIMEOUT_S = 180.0  # no client message for this long ends the session
COLD_START_S = 0.5  # audio within this of `prepared` is dropped (microphone start-up noise)
MAX_CHUNK_SECONDS = 5.0  # one audio_chunk is about 0.5 s; more is a client out of step
# The demo's generation ranges (its GenerationConfig schema), the session timeout's own
GENERATION_RANGES = {"max_new_tokens": (1, 4096), "length_penalty": (0.1, 5.0), "temperature": (0.0, 2.0)}
TIMEOUT_RANGE = (1.0, 3600.0)


@dataclass
class HalfDuplexStart:
    """How a half-duplex session starts."""

    system_prompt: str | None = None
    ref_audio: np.ndarray | None = None
    vad: VadOptions = field(default_factory=VadOptions)
    max_new_tokens: int | None = None
    llm: LlmSampling | None = None
    speech: bool = True
    timeout_s: float = DEFAULT_TIMEOUT_S


def _number(d: dict, key: str, where: str, lo: float, hi: float, integer: bool = False):
    v = d.get(key)
    if v is None:
        return None
    ok = isinstance(v, int) if integer else isinstance(v, (int, float))
    if isinstance(v, bool) or not ok or not lo <= v <= hi:
        kind = "an integer" if integer else "a number"
        raise ProtocolError(f"{where}{key} must be {kind} in [{lo:g}, {hi:g}], got {v!r}", "invalid_input")
    return v


def vad_options(cfg: dict, where: str = "config.vad.") -> VadOptions:
    """VadOptions from a client's vad object (demo names; unknown keys ignored)."""
    names = ("threshold", "min_speech_duration_ms", "min_silence_duration_ms", "speech_pad_ms")
    try:
        return VadOptions(**{k: cfg[k] for k in names if cfg.get(k) is not None})
    except ConfigError as e:
        raise ProtocolError(f"{where}{e}", "invalid_input") from None


def _system_content(items) -> tuple[str | None, np.ndarray | None]:
    """The demo's [text, audio, text]: the first audio is the voice; the text after it (or all the
    text when there is no audio) is the system prompt. A leading text equal to the voice-clone
    instruction our prompt already holds is not repeated. An audio item without data (the demo's
    page sends one until a voice is loaded) is skipped, as the demo's worker does."""
    if not isinstance(items, list):
        raise ProtocolError("system_content must be a list of {type: text|audio} items", "invalid_input")
    before, after, voice = [], [], None
    for i, item in enumerate(items):
        where = f"system_content[{i}]"
        if not isinstance(item, dict) or item.get("type") not in ("text", "audio"):
            raise ProtocolError(f"{where} must be an object of type text or audio", "invalid_input")
        if item["type"] == "audio" and item.get("data") in (None, ""):
            continue
        if item["type"] == "text":
            if not isinstance(item.get("text"), str):
                raise ProtocolError(f"{where}.text must be a string", "invalid_input")
            (before if voice is None else after).append(item["text"])
        elif voice is None:
            voice = float_pcm(item.get("data"), f"{where}.data", "voice_audio_decode_failed", MAX_REF_AUDIO_SECONDS)
    texts = after if voice is not None else before
    if voice is not None:
        texts = [t for t in before if t.strip() != VOICE_PREFIX] + texts
    text = "\n".join(t for t in texts if t.strip())
    return (text or None), voice


def parse_prepare(msg: dict, max_new_tokens_cap: int | None = None) -> HalfDuplexStart:
    start = HalfDuplexStart()
    if msg.get("system_content") is not None:
        start.system_prompt, start.ref_audio = _system_content(msg["system_content"])
    else:
        sp = msg.get("system_prompt")
        if sp is not None and not isinstance(sp, str):
            raise ProtocolError("system_prompt must be a string", "invalid_input")
        start.system_prompt = sp
    if start.ref_audio is None and msg.get("ref_audio_base64") is not None:
        start.ref_audio = float_pcm(msg["ref_audio_base64"], "ref_audio_base64", "voice_audio_decode_failed", 30.0)
    cfg = object_field(msg, "config", "")
    start.vad = vad_options(object_field(cfg, "vad", "config."))
    gen = object_field(cfg, "generation", "config.")
    for name, (lo, hi) in GENERATION_RANGES.items():
        _number(gen, name, "config.generation.", lo, hi, integer=name == "max_new_tokens")
    start.max_new_tokens = gen.get("max_new_tokens")
    if max_new_tokens_cap is not None and start.max_new_tokens is not None:
        start.max_new_tokens = min(start.max_new_tokens, max_new_tokens_cap)
    if gen.get("temperature") is not None:
        start.llm = LlmSampling(temperature=float(gen["temperature"]))
    tts = object_field(cfg, "tts", "config.")
    if tts.get("enabled") is not None:
        if not isinstance(tts["enabled"], bool):
            raise ProtocolError("config.tts.enabled must be true or false", "invalid_input")
        start.speech = tts["enabled"]
    timeout = _number(object_field(cfg, "session", "config."), "timeout_s", "config.session.", *TIMEOUT_RANGE)
    if timeout is not None:
        start.timeout_s = float(timeout)
    return start


def parse_audio_chunk(msg: dict) -> np.ndarray:
    """``audio_chunk.audio_base64``: float32 16 kHz mono (the page sends 0.5 s)."""
    if msg.get("audio_base64") is None:
        raise ProtocolError("Missing audio_base64", "missing_audio")
    return float_pcm(msg["audio_base64"], "audio_base64", "invalid_audio", MAX_CHUNK_SECONDS)


def chunk_event(chunk: SpeechChunk, index: int) -> dict:
    """One streamed piece of a reply, as the demo sends it (null where there is none)."""
    return {
        "type": "chunk",
        "chunk_index": index,
        "text_delta": chunk.text_delta or None,
        "audio_data": pcm_b64(chunk.audio) if chunk.audio.size else None,
        "audio_sample_rate": OUTPUT_SAMPLE_RATE,
        "is_final": chunk.is_final,
        "duration_ms": round(chunk.audio.size / OUTPUT_SAMPLE_RATE * 1000, 1),
    }
