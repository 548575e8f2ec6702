"""The MiniCPM-o demo backend protocol as this server speaks it (docs/server-protocol.md): message
kinds, parsing and validation of uplink messages into dataclasses, downlink event builders. Every
violation raises ProtocolError whose ``code`` is the session.closed reason.

Strict by default: only the schema's type names and shapes. ``compat=True`` (``--compat``) also
takes the older aliases and shapes: ``init``/``backend.init``, ``push``/``input``/``backend.push``,
a close message on the WebSocket, a flat init (no ``payload``, or the mode as a string), a push
without ``input`` (``data`` or the message itself), and PNG images."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np

from ....constants import INPUT_SAMPLE_RATE, OUTPUT_SAMPLE_RATE
from ....content import Audio, Image, Video
from ....errors import ProtocolError
from ....results import Timings
from ....video import MAX_FRAMES, MAX_STACK_FRAMES
from ....vision import MAX_SLICE_NUMS
from ... import jsonio
from ...pcm import MAX_REF_AUDIO_SECONDS, b64_bytes, float_pcm

INIT_TYPES = ("session.init",)
PUSH_TYPES = ("input.append",)
COMPAT_INIT_TYPES = ("init", "backend.init")
COMPAT_PUSH_TYPES = ("push", "input", "backend.push")
COMPAT_CLOSE_TYPES = ("session.close", "close", "backend.close")  # strict: close is HTTP only (§3.3)
MODES = ("turn_based", "full_duplex")
INPUT_RATE = INPUT_SAMPLE_RATE  # input audio: float32 mono
OUTPUT_RATE = OUTPUT_SAMPLE_RATE  # output audio: float32 mono
AUDIO_DELTA = OUTPUT_RATE  # samples per audio delta (about one second)


@dataclass
class InitRequest:
    mode: str
    system_prompt: str | None = None
    ref_audio: np.ndarray | None = None  # LLM reference audio (16 kHz float32)
    tts_ref_audio: np.ndarray | None = None  # TTS voice reference: validated, see docs (Token2Wav voice is the set's)
    use_tts: bool = True
    config: dict = field(default_factory=dict)


@dataclass
class Turn:
    """One turn_based push: the last user message's parts in order (text; content.Audio of
    16 kHz float32, content.Image of JPEG bytes, content.Video of MP4 bytes with its options) plus
    earlier turns' text."""

    content: list = field(default_factory=list)
    history: list = field(default_factory=list)  # (role, text)
    system_prompt: str | None = None
    streaming: bool = True
    max_new_tokens: int | None = None
    speech: bool = True
    tts_template: bool = True
    ref_audio: np.ndarray | None = None
    sampling: dict = field(default_factory=dict)  # LLM sampling overrides (temperature, top_p, top_k)
    seed: int | None = None  # None: the session's seed
    max_slice_nums: object = None  # int, or a tuple with one per image; None: the session's

    @property
    def text(self) -> str:
        return "".join(p for p in self.content if isinstance(p, str))

    @property
    def images(self) -> list:
        return [p for p in self.content if isinstance(p, Image)]


def decode(raw) -> dict:
    if isinstance(raw, (bytes, bytearray)):
        raise ProtocolError("binary frames are not part of the protocol; send JSON text", "invalid_json")
    try:
        msg = jsonio.loads(raw, "the message")
    except jsonio.BadJson as e:
        raise ProtocolError(str(e), "invalid_json") from None
    if not isinstance(msg.get("type"), str):
        raise ProtocolError("a message must be a JSON object with a string 'type'", "invalid_json")
    return msg


def kind(msg: dict, compat: bool = False) -> str:
    """'init', 'push', 'close' (compat only) or 'unknown'."""
    t = msg["type"]
    if t in INIT_TYPES or (compat and t in COMPAT_INIT_TYPES):
        return "init"
    if t in PUSH_TYPES or (compat and t in COMPAT_PUSH_TYPES):
        return "push"
    if compat and t in COMPAT_CLOSE_TYPES:
        return "close"
    return "unknown"


def _bool(d: dict, key: str, default: bool) -> bool:
    v = d.get(key, default)
    if not isinstance(v, bool):
        raise ProtocolError(f"'{key}' must be a boolean, got {v!r}", "invalid_input")
    return v


def object_field(d: dict, key: str, where: str = "") -> dict:
    """``d[key]`` when it is an object, {} when absent; ProtocolError naming ``where + key``
    otherwise."""
    v = d.get(key)
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise ProtocolError(f"{where}{key} must be an object", "invalid_input")
    return v


def parse_init(msg: dict, compat: bool = False) -> InitRequest:
    p = msg.get("payload")
    if compat and isinstance(p, str):
        p = {"mode": p}  # an old client's payload: "turn_based"
    elif compat and p is None:
        p = msg  # a flat init
    if not isinstance(p, dict):
        got = "missing" if p is None else f"a {type(p).__name__} ({json.dumps(p)[:40]})"
        raise ProtocolError(
            f'session.init needs a payload object, got {got}; send {{"payload": {{"mode": "turn_based"}}}}',
            "invalid_input",
        )
    if "mode" not in p and not compat:
        raise ProtocolError("payload.mode is required: turn_based (or full_duplex)", "invalid_mode")
    mode = p.get("mode", "full_duplex")  # compat: the reference backend's default
    if mode not in MODES:
        raise ProtocolError(f"payload.mode must be one of {MODES}, got {mode!r}", "invalid_mode")
    system = p.get("system_prompt")
    if system is not None and not isinstance(system, str):
        raise ProtocolError("payload.system_prompt must be a string", "invalid_input")
    voice = object_field(p, "voice")
    ref = voice.get("ref_audio", voice.get("ref_audio_base64"))
    tts_ref = voice.get("tts_ref_audio", voice.get("tts_ref_audio_base64"))
    code = "voice_audio_decode_failed"
    ref = float_pcm(ref, "voice.ref_audio", code, MAX_REF_AUDIO_SECONDS) if ref is not None else None
    tts_ref = float_pcm(tts_ref, "voice.tts_ref_audio", code, MAX_REF_AUDIO_SECONDS) if tts_ref is not None else ref
    return InitRequest(mode, system or None, ref, tts_ref, _bool(p, "use_tts", True), object_field(p, "config"))


def _content_items(content, where: str) -> list:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list):
        raise ProtocolError(f"{where}.content must be a string or a list of items", "invalid_input")
    for i, item in enumerate(content):
        if not isinstance(item, dict) or item.get("type") not in ("text", "audio", "image", "video"):
            raise ProtocolError(
                f"{where}.content[{i}] must be an item of type text, audio, image or video", "invalid_input"
            )
    return content


def _text_of(items: list, where: str) -> str:
    out = []
    for i, item in enumerate(items):
        if item["type"] == "text":
            if not isinstance(item.get("text"), str):
                raise ProtocolError(f"{where}.content[{i}].text must be a string", "invalid_input")
            out.append(item["text"])
    return "".join(out)


def _media(turn: Turn, items: list, where: str, max_audio_s: float, compat: bool) -> None:
    """The user message's items, in order, as parts of ``turn.content``."""
    audio_s = 0.0
    for i, item in enumerate(items):
        at, t = f"{where}.content[{i}]", item["type"]
        if t == "text":
            turn.content.append(item["text"])
        elif t == "audio":
            x = float_pcm(item.get("data"), f"{at}.data", "invalid_audio", max_audio_s - audio_s)
            if x.size < INPUT_RATE // 10:
                raise ProtocolError(
                    f"{at}.data is {x.size} samples; the audio encoder needs at least 0.1 s "
                    f"({INPUT_RATE // 10} samples at {INPUT_RATE} Hz)",
                    "invalid_audio",
                )
            audio_s += x.size / INPUT_RATE
            turn.content.append(Audio(x))
        elif t == "image":
            data = b64_bytes(item.get("data"), f"{at}.data", "invalid_media")
            png = data[:8] == b"\x89PNG\r\n\x1a\n"
            if not (data[:3] == b"\xff\xd8\xff" or (compat and png)):
                what = "a PNG: images must be JPEG (PNG only with --compat)" if png else "not a JPEG image"
                raise ProtocolError(f"{at}.data is {what}", "invalid_media")
            turn.content.append(Image(data))
        elif t == "video":
            turn.content.append(_video(item, at))


def _video(item: dict, at: str) -> Video:
    """A video item: MP4 bytes, watched as frames with their audio; ``audio`` (raw float32 PCM, as
    every audio item) a separate track for it, ``use_audio`` false for its frames alone,
    ``max_frames`` and ``stack_frames`` its options."""
    data = b64_bytes(item.get("data"), f"{at}.data", "invalid_media")
    if data[4:8] != b"ftyp":
        raise ProtocolError(f"{at}.data is not an MP4 file", "invalid_media")
    options = {}
    for key, hi in (("max_frames", MAX_FRAMES), ("stack_frames", MAX_STACK_FRAMES)):
        n = item.get(key)
        if n is not None and not (isinstance(n, int) and not isinstance(n, bool) and 1 <= n <= hi):
            raise ProtocolError(f"{at}.{key} must be an integer in 1..{hi}, got {json.dumps(n)[:20]}", "invalid_input")
        options[key] = n
    track = item.get("audio")
    if track is not None:
        track = float_pcm(track, f"{at}.audio", "invalid_audio")
    use_audio = item.get("use_audio")
    if use_audio is not None and not isinstance(use_audio, bool):
        raise ProtocolError(f"{at}.use_audio must be true or false", "invalid_input")
    return Video(data, track, use_audio=use_audio, **options)


def parse_turn(
    msg: dict, init: InitRequest, max_audio_s: float, max_new_tokens_cap: int | None, compat: bool = False
) -> Turn:
    """A turn_based push. Earlier messages give (role, text) history; a system message replaces
    the init's system prompt; the last message must be the user's and holds the inputs."""
    inp = msg.get("input", msg.get("data", msg)) if compat else msg.get("input")
    if not isinstance(inp, dict):
        got = "missing" if inp is None else f"a {type(inp).__name__}"
        raise ProtocolError(f"input.append needs an 'input' object, got {got}", "invalid_input")
    if "messages" not in inp and ("audio" in inp or "video_frames" in inp):
        raise ProtocolError("a full_duplex input (audio/video_frames) in a turn_based session", "mode_mismatch")
    messages = inp.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ProtocolError("input.messages must be a non-empty list", "empty_messages")
    turn = Turn(system_prompt=init.system_prompt, ref_audio=init.ref_audio)
    for i, m in enumerate(messages):
        where = f"input.messages[{i}]"
        if not isinstance(m, dict) or m.get("role") not in ("system", "user", "assistant"):
            raise ProtocolError(f"{where} must have role system, user or assistant", "invalid_input")
        items = _content_items(m.get("content"), where)
        if m["role"] == "system":
            turn.system_prompt = _text_of(items, where)
        elif i < len(messages) - 1:
            turn.history.append((m["role"], _text_of(items, where)))  # earlier turns: text only
        elif m["role"] != "user":
            raise ProtocolError("the last message must be the user's", "invalid_input")
        else:
            _text_of(items, where)  # every text item is a string
            _media(turn, items, where, max_audio_s, compat)
    if not (turn.text.strip() or any(not isinstance(p, str) for p in turn.content)):
        raise ProtocolError("the user message has no text, audio, image or video", "empty_messages")
    turn.streaming = _bool(inp, "streaming", True)
    gen = object_field(inp, "generation")
    n = gen.get("max_new_tokens")
    if n is not None:
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ProtocolError("generation.max_new_tokens must be a positive integer", "invalid_input")
        turn.max_new_tokens = min(n, max_new_tokens_cap) if max_new_tokens_cap else n
    elif max_new_tokens_cap:
        turn.max_new_tokens = max_new_tokens_cap
    _sampling(turn, gen)
    tts = object_field(inp, "tts")
    turn.speech = _bool(tts, "enabled", init.use_tts)
    turn.tts_template = _bool(inp, "use_tts_template", False) or turn.speech  # the spec: template OR enabled
    if tts.get("ref_audio_data") is not None:
        turn.ref_audio = float_pcm(
            tts["ref_audio_data"], "tts.ref_audio_data", "voice_audio_decode_failed", MAX_REF_AUDIO_SECONDS
        )
    turn.max_slice_nums = check_max_slice_nums(
        object_field(inp, "image").get("max_slice_nums"), len(turn.images), "image.max_slice_nums"
    )
    return turn


def check_max_slice_nums(value, n_images: int, what: str):
    """max_slice_nums is an int in 1..9 (1: the overview only), or a list with one per image (the
    backend protocol's rule for both modes): returned as an int or a tuple, None when absent;
    ProtocolError otherwise. The wire's 1 becomes 0, the overview alone under both image rule
    sets (llama.cpp-omni's own rules would cut one whole-image slice for 1)."""
    if value is None:
        return None
    ok = lambda v: isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= MAX_SLICE_NUMS  # noqa: E731
    engine = lambda v: 0 if v == 1 else v  # noqa: E731
    if ok(value):
        return engine(value)
    if isinstance(value, list) and len(value) == n_images and all(map(ok, value)):
        return tuple(map(engine, value))
    raise ProtocolError(
        f"{what} must be an integer in 1..{MAX_SLICE_NUMS} or a list with one per image ({n_images}), got "
        f"{json.dumps(value)[:40]}",
        "invalid_input",
    )


def _sampling(turn: Turn, gen: dict) -> None:
    """generation.temperature / top_p / top_k / seed: this turn's LLM sampling (an extension of
    the schema's generation object, which names max_new_tokens and length_penalty)."""
    from ....config import LlmSampling
    from ....errors import ConfigError

    for key, types in (("temperature", (int, float)), ("top_p", (int, float)), ("top_k", (int,))):
        v = gen.get(key)
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, types):
            raise ProtocolError(f"generation.{key} must be a number, got {v!r}", "invalid_input")
        turn.sampling[key] = v
    try:
        LlmSampling(**turn.sampling)  # the ranges the engine accepts
    except ConfigError as e:
        raise ProtocolError(f"generation.{e}", "invalid_input") from None
    seed = gen.get("seed")
    if seed is not None:
        if isinstance(seed, bool) or not isinstance(seed, int) or not -1 <= seed < 2**32:
            raise ProtocolError("generation.seed must be an integer in -1..2**32-1 (-1: random)", "invalid_input")
        turn.seed = seed


# -- downlink ---------------------------------------------------------------------------------
def audio_pieces(samples: np.ndarray, size: int = AUDIO_DELTA):
    for i in range(0, samples.size, size):
        yield samples[i : i + size]


def event(type_: str, **fields) -> dict:
    """A downlink event; the writer stamps server_send_ts when it sends it."""
    return {"type": type_, **{k: v for k, v in fields.items() if v is not None or k == "audio"}}


def closed(session_id: str | None, reason: str, message: str | None = None, metrics: dict | None = None) -> dict:
    ev = event("session.closed", session_id=session_id, reason=reason, metrics=metrics)
    if message:
        ev["diagnostic"] = {"message": message[:2000]}
    return ev


def timings_metrics(t: Timings, wall_clock_ms: float) -> dict:
    """A finished turn's Timings as the backend protocol reports them: the one mapping from
    Timings to this protocol's metrics."""
    r = lambda v: round(v or 0.0, 1)  # noqa: E731
    m = {
        "prefill_ms": r(t.prefill_ms),
        "generate_ms": round(max(0.0, wall_clock_ms - r(t.prefill_ms)), 1),
        "cost_llm_ms": r(t.llm_ms),
        "cost_tts_ms": r(t.tts_ms),
        "cost_token2wav_ms": r(t.token2wav_ms),
        "cost_apm_ms": r(t.apm_ms),
        "cost_vpm_ms": r(t.vpm_ms),
        "n_tokens": t.n_tokens,
        "n_tts_tokens": t.n_tts_tokens,
        "prompt_tokens": t.prompt_tokens,
        "kv_cache_length": t.prompt_tokens + t.n_tokens,
        "vision_slices": t.vision_slices,
        "vision_tokens": t.vision_tokens,
        "video_frames": t.video_frames,
        "audio_segments": t.audio_segments,
        "audio_tokens": t.audio_tokens,
        "seed": t.seed,
    }
    # time to first audio, step by step (ms after the turn started in the engine)
    for value, name in ((t.first_text_s, "first_text_ms"), (t.first_codes_s, "first_codes_ms")):
        if value is not None:
            m[name] = round(value * 1000, 1)
    return m
