"""Messages of full duplex on the wire, for both faces of a worker (docs/server-protocol.md):

* the demo's duplex protocol on ``/ws/duplex`` (``prepare``, ``audio_chunk``, ``pause``,
  ``resume``, ``stop`` in; ``prepared``, ``result``, ``paused``, ``resumed``, ``stopped``,
  ``timeout``, ``error`` out);
* the backend protocol's ``full_duplex`` mode on ``/backend`` (one ``input.append`` per second,
  ``response.output.delta`` of kind text, audio or listen out).

Every violation raises ProtocolError whose ``code`` names it."""

from __future__ import annotations

import base64
import binascii
import time
from dataclasses import dataclass, field

import numpy as np

from ....config import DuplexConfig
from ....duplex import DuplexResult
from ....errors import ConfigError, ProtocolError
from ....vision import MAX_SLICE_NUMS
from ...pcm import MAX_REF_AUDIO_SECONDS, float_pcm, pcm_b64
from ..backend.protocol import check_max_slice_nums

MAX_UNIT_SECONDS = 5.0  # one push is about a second; more is a client out of step
MAX_FRAMES = 4
# The demo's config names -> DuplexConfig fields (others are accepted and ignored).
CONFIG_FIELDS = {
    "temperature": "temperature",
    "top_k": "top_k",
    "top_p": "top_p",
    "text_repetition_penalty": "repetition_penalty",
    "text_repetition_window_size": "repetition_window",
    "length_penalty": "length_penalty",
    "listen_prob_scale": "listen_prob_scale",
    "force_listen_count": "force_listen_count",
    "max_new_speak_tokens_per_chunk": "max_tokens_per_unit",
    "seed": "seed",
    "max_slice_nums": "max_slice_nums",
}


@dataclass
class DuplexStart:
    """How a duplex session starts: its system prompt, the LLM's reference voice, the config."""

    system_prompt: str | None = None
    ref_audio: np.ndarray | None = None
    config: DuplexConfig = field(default_factory=DuplexConfig)


@dataclass
class UnitInput:
    """One second of a duplex session: audio, the frames that go with it, force_listen."""

    audio: np.ndarray
    frames: list[bytes] = field(default_factory=list)
    force_listen: bool = False
    max_slice_nums: object = None  # int, or a tuple with one per frame; None: the session's


# The demo schema's bounds of every config field it defines (inclusive; None: open). A value out
# of them is refused, also for fields that change nothing here (tts_temperature, chunk_ms).
CONFIG_RANGES = {
    "force_listen_count": (0, None),
    "max_new_speak_tokens_per_chunk": (1, None),
    "temperature": (0.0, 2.0),
    "top_k": (0, None),
    "top_p": (0.0, 1.0),
    "text_repetition_penalty": (1.0, None),
    "text_repetition_window_size": (1, None),
    "length_penalty": (0.1, 5.0),
    "listen_prob_scale": (0.0, None),
    "tts_temperature": (0.0, 2.0),
    "chunk_ms": (100, None),
    "max_slice_nums": (1, MAX_SLICE_NUMS),
}
INTEGER_FIELDS = {
    "force_listen_count",
    "max_new_speak_tokens_per_chunk",
    "top_k",
    "text_repetition_window_size",
    "max_slice_nums",
}


def _check_ranges(cfg: dict, code: str) -> None:
    for name, (lo, hi) in CONFIG_RANGES.items():
        v = cfg.get(name)
        if v is None:
            continue
        integer = name in INTEGER_FIELDS
        if isinstance(v, bool) or not isinstance(v, int if integer else (int, float)):
            raise ProtocolError(f"config.{name} must be {'an integer' if integer else 'a number'}, got {v!r}", code)
        if v < lo or (hi is not None and v > hi):
            bounds = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"
            raise ProtocolError(f"config.{name} must be {bounds}, got {v!r}", code)
    for name in ("sample_rate",):
        if cfg.get(name) is not None and cfg[name] != 16000:
            raise ProtocolError(f"config.{name} must be 16000, got {cfg[name]!r}", code)


def duplex_config(cfg, code: str = "invalid_input") -> DuplexConfig:
    """A DuplexConfig from a client's config object (demo names and ranges; unknown keys ignored)."""
    if cfg is None:
        return DuplexConfig()
    if not isinstance(cfg, dict):
        raise ProtocolError("config must be an object", code)
    _check_ranges(cfg, code)
    values = {CONFIG_FIELDS[k]: v for k, v in cfg.items() if k in CONFIG_FIELDS}
    if cfg.get("decode_mode") is not None:
        if cfg["decode_mode"] not in ("sampling", "greedy"):
            raise ProtocolError("config.decode_mode must be 'sampling' or 'greedy'", code)
        values["greedy"] = cfg["decode_mode"] == "greedy"
    try:
        return DuplexConfig(**values)
    except ConfigError as e:
        raise ProtocolError(f"config.{e.field}: {e}", code) from None


def _voice(d: dict, *keys: str, code: str) -> np.ndarray | None:
    for k in keys:
        if d.get(k) is not None:
            return float_pcm(d[k], k, code, MAX_REF_AUDIO_SECONDS)
    return None


def parse_prepare(msg: dict) -> DuplexStart:
    """The demo's ``prepare``: system_prompt, ref_audio_base64 (the LLM's voice slot), config,
    max_slice_nums (the session's slices per frame; else config.max_slice_nums).
    ``tts_ref_audio_base64`` is accepted: the spoken voice is the model set's prompt cache."""
    sp = msg.get("system_prompt")
    if sp is not None and not isinstance(sp, str):
        raise ProtocolError("system_prompt must be a string", "invalid_input")
    cfg, slices = msg.get("config"), msg.get("max_slice_nums")
    if slices is not None and (cfg is None or isinstance(cfg, dict)):  # another config is refused below
        cfg = {**(cfg or {}), "max_slice_nums": slices}
    return DuplexStart(sp, _voice(msg, "ref_audio_base64", code="voice_audio_decode_failed"), duplex_config(cfg))


def parse_backend_start(payload: dict) -> DuplexStart:
    """``session.init`` payload of mode full_duplex: system_prompt, voice.ref_audio, config."""
    voice = payload.get("voice") or {}
    if not isinstance(voice, dict):
        raise ProtocolError("payload.voice must be an object", "invalid_input")
    sp = payload.get("system_prompt")
    if sp is not None and not isinstance(sp, str):
        raise ProtocolError("payload.system_prompt must be a string", "invalid_input")
    ref = _voice(voice, "ref_audio", "ref_audio_base64", code="voice_audio_decode_failed")
    return DuplexStart(sp, ref, duplex_config(payload.get("config")))


def _frames(value, what: str) -> list[bytes]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(f, str) for f in value):
        raise ProtocolError(f"{what} must be a list of base64 JPEG strings", "invalid_input")
    out = []
    for f in value[:MAX_FRAMES]:
        try:
            data = base64.b64decode(f.split(",", 1)[1] if f.startswith("data:") else f, validate=True)
        except (binascii.Error, ValueError):
            raise ProtocolError(f"{what} holds an item that is not base64", "invalid_media") from None
        if not data.startswith(b"\xff\xd8"):
            raise ProtocolError(f"{what} must hold JPEG images", "invalid_media")
        out.append(data)
    return out


def parse_audio_chunk(msg: dict) -> UnitInput:
    """The demo's ``audio_chunk``: audio_base64 (float32 16 kHz), frame_base64_list, force_listen,
    max_slice_nums (this unit's, else the session's)."""
    if msg.get("audio_base64") is None:
        raise ProtocolError("Missing audio_base64", "missing_audio")
    audio = float_pcm(msg["audio_base64"], "audio_base64", "invalid_audio", MAX_UNIT_SECONDS)
    frames = _frames(msg.get("frame_base64_list"), "frame_base64_list")
    slices = check_max_slice_nums(msg.get("max_slice_nums"), len(frames), "max_slice_nums")
    return UnitInput(audio, frames, bool(msg.get("force_listen")), slices)


def parse_backend_unit(msg: dict) -> UnitInput:
    """A full_duplex ``input.append``: input.audio MUST, video_frames MAY, force_listen MAY."""
    inp = msg.get("input")
    if not isinstance(inp, dict):
        raise ProtocolError("input.append needs an `input` object", "invalid_input")
    if "messages" in inp:
        raise ProtocolError("turn_based messages in a full_duplex session", "mode_mismatch")
    if inp.get("audio") is None:
        raise ProtocolError("a full_duplex input needs `audio` (1 s of float32 16 kHz PCM)", "missing_audio")
    audio = float_pcm(inp["audio"], "input.audio", "invalid_audio", MAX_UNIT_SECONDS)
    frames = _frames(inp.get("video_frames"), "input.video_frames")
    slices = check_max_slice_nums(inp.get("max_slice_nums"), len(frames), "input.max_slice_nums")
    return UnitInput(audio, frames, bool(inp.get("force_listen")), slices)


def unit_metrics(r: DuplexResult) -> dict:
    """One unit's metrics as the demo reports them (milliseconds; None where a stage did not run):
    the one mapping from DuplexTimings to the wire, for /ws/duplex and /backend alike."""
    t = r.timings
    cost = lambda v: round(v, 1) if v else None  # noqa: E731
    spoke = not r.is_listen
    return {
        "cost_llm_ms": cost(t.cost_llm_ms),
        "cost_tts_prep_ms": cost(t.cost_tts_prep_ms),
        "cost_tts_ms": cost(t.cost_tts_ms) if spoke else None,
        "cost_token2wav_ms": cost(t.cost_token2wav_ms) if spoke else None,
        "cost_all_ms": round(t.cost_llm_ms + t.cost_tts_ms + t.cost_token2wav_ms, 1),
        "n_tokens": t.n_tokens,
        "n_tts_tokens": t.n_tts_tokens,
        "wall_clock_ms": round(t.wall_ms, 1),
        "kv_cache_length": t.kv_cache_length,
        "vision_slices": t.vision_slices,
        "vision_tokens": t.vision_tokens,
    }


def result_event(r: DuplexResult) -> dict:
    """The demo's ``result`` message of one unit."""
    return {
        "type": "result",
        "is_listen": r.is_listen,
        "text": r.text,
        "audio_data": pcm_b64(r.audio),
        "end_of_turn": r.end_of_turn,
        "current_time": r.unit,
        **unit_metrics(r),
        "server_send_ts": time.time(),
    }
