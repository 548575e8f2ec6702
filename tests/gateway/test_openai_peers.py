"""Peers' clients against our OpenAI API, as they are: requests laid out the way vLLM-Omni's
``vllm bench serve --omni`` client (its ``openai-chat-omni`` backend) lays out its Daily-Omni,
Video-MME and Seed-TTS requests get through unchanged, and its way of reading the stream (text
from chunks marked ``modality: "text"``, a WAV file per ``"audio"`` chunk, ``usage.prompt_tokens``)
finds the reply. The counts come back in ``usage.prompt_tokens_details``: 64 image rows per frame
(one overview each), 10 audio rows per second of each clip.

The rest needs no server: ``file://`` media only under the allowed directory (no ``..`` or link
leads out of it), ``chat_template_kwargs`` and ``mm_processor_kwargs`` honoured or refused by
name, the audio limit counting clips and not a video's own track, and the serve flags that set
them."""

from __future__ import annotations

import base64
import dataclasses
import io
import json
import os
import socket
import subprocess
import urllib.error
import urllib.request
import wave

import numpy as np
import pytest
from server_client import ENGINE, REPLY, TIMEOUT, running_gateway
from video_files import video

from llama_omni_py.config import ReplyConfig
from llama_omni_py.server.gateway import openai_request as O
from llama_omni_py.server.gateway.config import GatewayConfig
from llama_omni_py.server.worker_options import WorkerOptions

MODEL = "MiniCPM-o-4.5"
ROWS_PER_FRAME = 64  # one overview per frame (max_slice_nums 1)
ROWS_PER_SECOND = 10
OUTPUT_LEN = 12  # the client's --output-len: max_tokens of every request
# what vLLM-Omni's packs put in mm_processor_kwargs: the video pack, and the frame packs
VIDEO_PACK = {"mm_processor_kwargs": {"use_audio_in_video": False}}
FRAME_PACK = {"mm_processor_kwargs": {"use_audio_in_video": False, "max_slice_nums": 1, "use_image_id": False}}
# what its users pass as --extra-body for MiniCPM-o's evaluations
TEXT_EXTRA = {"modalities": ["text"], "chat_template_kwargs": {"enable_thinking": False}}
SPEECH_EXTRA = {
    "modalities": ["text", "audio"],
    "chat_template_kwargs": {"enable_thinking": False, "use_tts_template": True},
}
QUESTION = (
    "Which sound is heard while the pattern moves?\nA. a tone\nB. a voice\nC. silence\nD. music\nAnswer with a letter."
)


# -- media as the client makes it ----------------------------------------------------------------
def wav_int16(samples: np.ndarray, rate: int = 16000) -> bytes:
    """A mono 16-bit WAV file, the way the client writes its audio segments."""
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes((np.clip(samples, -1, 1) * 32767).astype("<i2").tobytes())
    return buf.getvalue()


def tone(seconds: float, hz: float = 330.0) -> np.ndarray:
    t = np.arange(int(seconds * 16000)) / 16000
    return (0.3 * np.sin(2 * np.pi * hz * t)).astype(np.float32)


def jpeg_frames(clip, out_dir, count: int) -> list:
    """``count`` JPEG frames spread over ``clip`` (one a second for a clip of ``count`` seconds)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    probe = ["ffprobe", "-v", "error", "-show_entries", "format=duration", "-of", "csv=p=0", str(clip)]
    duration = float(subprocess.run(probe, capture_output=True, text=True, check=True).stdout)
    rate = f"{count}/{duration}"
    args = ["ffmpeg", "-v", "error", "-y", "-i", str(clip), "-vf", f"fps={rate}", "-frames:v", str(count)]
    subprocess.run([*args, "-q:v", "4", str(out_dir / "frame_%04d.jpg")], check=True)
    frames = sorted(out_dir.glob("frame_*.jpg"))
    assert len(frames) == count, frames
    return frames


def file_part(kind: str, path) -> dict:
    return {"type": f"{kind}_url", f"{kind}_url": {"url": path.resolve().as_uri()}}


def data_part(kind: str, mime: str, data: bytes) -> dict:
    return {"type": f"{kind}_url", f"{kind}_url": {"url": f"data:{mime};base64,{base64.b64encode(data).decode()}"}}


def interleaved(frames: list, segments: list) -> list:
    """The frame packs' content: each frame, then its second of audio (when there is audio)."""
    out = []
    for i, frame in enumerate(frames):
        out.append(file_part("image", frame))
        if segments:
            out.append(file_part("audio", segments[i]))
    return out


# -- the client's request and its reading of the stream --------------------------------------------
def omni_request(messages: list, *extras: dict, output_len: int = OUTPUT_LEN, stream: bool = True) -> dict:
    """The backend's payload: its fixed fields, then the extra body (the pack's
    mm_processor_kwargs merged into the user's --extra-body)."""
    body = {"model": MODEL, "messages": messages, "temperature": 0.0, "max_tokens": output_len, "stream": stream}
    if stream:
        body["stream_options"] = {"include_usage": True}
    for extra in extras:
        body.update(extra)
    return body


def post(url: str, body: dict) -> tuple[int, bytes]:
    req = urllib.request.Request(url + "/v1/chat/completions", json.dumps(body).encode(), method="POST")
    req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT * 4) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


@dataclasses.dataclass
class Read:
    """What the client's stream reader makes of a reply."""

    chunks: list
    text: str = ""
    pcm: bytearray = dataclasses.field(default_factory=bytearray)
    wav_params: set = dataclasses.field(default_factory=set)
    prompt_tokens: int | None = None

    @property
    def usage(self) -> dict:
        return self.chunks[-1]["usage"]


def read_like_the_client(raw: bytes) -> Read:
    """SSE ``data:`` lines; a chunk with choices is text when its modality says "text" (its
    delta.content), audio when it says "audio" (delta.content, else delta.audio.data: a WAV file);
    any chunk's usage gives prompt_tokens."""
    out = Read([])
    for message in raw.decode().split("\n\n"):
        if not message.strip() or message.startswith(":"):
            continue
        data = message.removeprefix("data: ")
        if data == "[DONE]":
            continue
        chunk = json.loads(data)
        out.chunks.append(chunk)
        if chunk.get("choices"):
            delta = chunk["choices"][0].get("delta") or {}
            content = delta.get("content") or (delta.get("audio") or {}).get("data")
            if chunk.get("modality") == "text":
                out.text += content or ""
            elif chunk.get("modality") == "audio" and content:
                with wave.open(io.BytesIO(base64.b64decode(content))) as w:
                    out.wav_params.add((w.getnchannels(), w.getsampwidth(), w.getframerate()))
                    out.pcm += w.readframes(w.getnframes())
        if chunk.get("usage") and chunk["usage"].get("prompt_tokens") is not None:
            out.prompt_tokens = chunk["usage"]["prompt_tokens"]
    return out


def ask(gw, body: dict) -> Read:
    status, raw = post(gw.url, body)
    assert status == 200, raw[:500]
    got = read_like_the_client(raw)
    modalities = [c.get("modality") for c in got.chunks]
    assert modalities[0] == "text" and got.chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    finish = [c for c in got.chunks if c["choices"] and c["choices"][0]["finish_reason"]]
    assert len(finish) == 1 and "modality" not in finish[0]  # as vLLM-Omni's closing chunk
    assert got.chunks[-1]["choices"] == [] and "modality" not in got.chunks[-1]  # the usage chunk
    assert got.prompt_tokens == got.usage["prompt_tokens"] > 0
    return got


def counts(r: Read) -> tuple[int, int]:
    """(frames, audio rows) the server reports: its image rows over 64, its audio rows."""
    details = r.usage["prompt_tokens_details"]
    assert details["image_tokens"] % ROWS_PER_FRAME == 0, details
    return details["image_tokens"] // ROWS_PER_FRAME, details["audio_tokens"]


# -- the server and its media -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def media(tmp_path_factory):
    """The media directory the server may read (--allowed-local-media-path), laid out as the
    benchmarks' files are: a 60 s Daily-Omni item (MP4 with its track, and the WAV beside it), its
    one-second interleave pack, and a Video-MME long video too big for a request body."""
    root = tmp_path_factory.mktemp("media")
    item = root / "Videos" / "item60"
    clip = video(item / "item60_video.mp4", 60.0, size="64x48", fps=2, tone=440.0)
    track = tone(60.0)
    (item / "item60_audio.wav").write_bytes(wav_int16(track))
    pack = item / ".interleave"
    frames = jpeg_frames(clip, pack, 60)
    segments = []
    for i in range(60):
        segments.append(pack / f"audio_{i:04d}.wav")
        segments[-1].write_bytes(wav_int16(track[i * 16000 : (i + 1) * 16000]))
    long_video = video(root / "videomme" / "long.mp4", 2400.0, size="160x120", fps=1, tone=None)
    return {
        "root": root,
        "clip": clip,
        "track": item / "item60_audio.wav",
        "frames": frames,
        "segments": segments,
        "long": long_video,
    }


BODY_LIMIT = 512 << 10  # small, so that the long video (40 minutes) cannot come as a data URL


@pytest.fixture(scope="module")
def gw(tiny_dir, media):
    with running_gateway(
        tiny_dir, workers=1, allowed_local_media_path=str(media["root"]), max_body_bytes=BODY_LIMIT
    ) as g:
        yield g


# -- vLLM-Omni's requests ---------------------------------------------------------------------------
def test_daily_omni_interleave_pack_60s(gw, media):
    """60 frames and 60 one-second clips, in order: 60 overviews and 600 audio rows."""
    content = [*interleaved(media["frames"], media["segments"]), {"type": "text", "text": QUESTION}]
    r = ask(gw, omni_request([{"role": "user", "content": content}], FRAME_PACK, TEXT_EXTRA))
    assert counts(r) == (60, 60 * ROWS_PER_SECOND)
    text_chunks = [c for c in r.chunks if c.get("modality") == "text"]
    assert r.text == "".join(c["choices"][0]["delta"].get("content") or "" for c in text_chunks)
    # the same request whole: the streamed text is all of the reply
    status, raw = post(
        gw.url, omni_request([{"role": "user", "content": content}], FRAME_PACK, TEXT_EXTRA, stream=False)
    )
    assert status == 200, raw[:300]
    whole = json.loads(raw)
    assert whole["choices"][0]["message"]["content"] == r.text
    assert whole["usage"]["prompt_tokens_details"] == r.usage["prompt_tokens_details"]


def test_daily_omni_video_pack_60s(gw, media):
    """The MP4 (frames alone: use_audio_in_video false) and its 60 s WAV as a clip of its own,
    behind the benchmark's system turn: 60 frames; the clip clamped to 29.9 s (299 rows) under
    llama.cpp-omni's rules, the test workers' fidelity."""
    system = {"role": "system", "content": [{"type": "text", "text": "You watch and listen, then answer."}]}
    content = [
        file_part("video", media["clip"]),
        file_part("audio", media["track"]),
        {"type": "text", "text": QUESTION},
    ]
    r = ask(gw, omni_request([system, {"role": "user", "content": content}], VIDEO_PACK, TEXT_EXTRA))
    assert counts(r) == (60, 299)
    # with the video's own track instead of the WAV: each second's audio after its frame, whole
    content = [file_part("video", media["clip"]), {"type": "text", "text": QUESTION}]
    r = ask(gw, omni_request([system, {"role": "user", "content": content}], TEXT_EXTRA))
    assert counts(r) == (60, 60 * ROWS_PER_SECOND)


def test_videomme_frames_pack(gw, media):
    """Video-MME's default pack: 96 frames of a long video as image parts, no audio."""
    frames = jpeg_frames(media["long"], media["root"] / "videomme" / ".frames96", 96)
    content = [*interleaved(frames, []), {"type": "text", "text": QUESTION}]
    r = ask(gw, omni_request([{"role": "user", "content": content}], FRAME_PACK, TEXT_EXTRA))
    assert counts(r) == (96, 0)


def test_videomme_long_video_as_a_file_url(gw, media):
    """A long video too big for a request body goes as a file:// URL: the worker's frame rule
    takes its 64 frames (96 when the request asks, as Video-MME's protocol does)."""
    assert media["long"].stat().st_size > BODY_LIMIT
    content = [data_part("video", "video/mp4", media["long"].read_bytes()), {"type": "text", "text": QUESTION}]
    size = len(json.dumps(omni_request([{"role": "user", "content": content}], FRAME_PACK, TEXT_EXTRA)))
    head = f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: {size}\r\n\r\n"
    with socket.create_connection(("127.0.0.1", gw.port), timeout=TIMEOUT) as s:  # refused before the body
        s.sendall(head.encode())
        answer = b""
        while chunk := s.recv(1 << 16):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 413") and b"request_too_large" in answer, answer[:300]
    content[0] = file_part("video", media["long"])
    r = ask(gw, omni_request([{"role": "user", "content": content}], FRAME_PACK, TEXT_EXTRA))
    assert counts(r) == (64, 0)
    frames96 = {"mm_processor_kwargs": {**FRAME_PACK["mm_processor_kwargs"], "max_frames": 96}}
    r = ask(gw, omni_request([{"role": "user", "content": content}], frames96, TEXT_EXTRA))
    assert counts(r) == (96, 0)


def test_seed_tts_request_streams_wav_chunks(gw):
    """Seed-TTS through chat completions: the speech fields on the body, audio asked by
    modalities alone. Its audio comes as WAV files (one per chunk, all alike: mono 16-bit 24 kHz)
    in chunks marked "audio", its text in chunks marked "text"."""
    messages = [
        {"role": "system", "content": [{"type": "text", "text": "Read the user's text aloud in the reference voice."}]},
        {"role": "user", "content": [{"type": "text", "text": "The quick brown fox jumps over the lazy dog."}]},
    ]
    speech = {
        "ref_audio": f"data:audio/wav;base64,{base64.b64encode(wav_int16(tone(2.0, 220.0))).decode()}",
        "ref_text": "a steady tone",
        "task_type": "Base",
        "language": "English",
        "max_new_tokens": 20,
    }
    r = ask(gw, omni_request(messages, SPEECH_EXTRA, speech, output_len=20))
    assert r.wav_params == {(1, 2, 24000)} and len(r.pcm) > 0
    codes = r.usage["completion_tokens_details"]["audio_tokens"]  # 25 speech codes a second
    assert abs(len(r.pcm) // 2 - codes * 960) <= 3 * 960, (len(r.pcm), codes)  # all of it came
    audio_chunks = [c for c in r.chunks if c.get("modality") == "audio"]
    assert all(set(c["choices"][0]["delta"]) == {"role", "content"} for c in audio_chunks)


# -- file:// media: only under the allowed directory --------------------------------------------------
def image_request(url: str) -> dict:
    return {
        "model": MODEL,
        "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}]}],
    }


def parse(body: dict, **config):
    return O.parse(body, MODEL, lambda _id: None, ("wav", "pcm16"), GatewayConfig(**config) if config else None)


@pytest.fixture
def tree(tmp_path):
    """allowed/ with a picture, and a picture outside it."""
    from PIL import Image

    allowed, outside = tmp_path / "allowed", tmp_path / "outside"
    for d in (allowed, outside):
        d.mkdir()
    buf = io.BytesIO()
    Image.fromarray(np.full((48, 64, 3), 90, np.uint8)).save(buf, "JPEG")
    (allowed / "in side.jpg").write_bytes(buf.getvalue())
    (outside / "secret.jpg").write_bytes(buf.getvalue())
    return allowed, outside


def refused(body: dict, code: str, **config) -> O.OpenAIError:
    with pytest.raises(O.OpenAIError) as info:
        parse(body, **config)
    assert info.value.code == code, info.value.message
    return info.value


def test_file_urls_are_refused_without_an_allowed_directory(tree):
    allowed, _ = tree
    e = refused(image_request((allowed / "in side.jpg").as_uri()), "local_media_not_allowed")
    assert "--allowed-local-media-path" in e.message and e.param == "messages[0].content[0].image_url.url"


def test_a_file_inside_the_allowed_directory_is_read(tree):
    allowed, _ = tree
    r = parse(image_request((allowed / "in side.jpg").as_uri()), allowed_local_media_path=str(allowed))
    assert r.inp["messages"][0]["content"][0]["type"] == "image"
    link = allowed / "alias.jpg"  # a link whose target stays inside
    link.symlink_to(allowed / "in side.jpg")
    assert parse(image_request(link.as_uri()), allowed_local_media_path=str(allowed)).inp["image"]


def test_dot_dot_cannot_lead_out(tree):
    allowed, _ = tree
    url = "file://" + str(allowed) + "/../outside/secret.jpg"
    e = refused(image_request(url), "local_media_not_allowed", allowed_local_media_path=str(allowed))
    assert "outside" in e.message and "secret" not in e.message


def test_a_link_cannot_lead_out(tree):
    allowed, outside = tree
    (allowed / "innocent.jpg").symlink_to(outside / "secret.jpg")
    refused(
        image_request((allowed / "innocent.jpg").as_uri()),
        "local_media_not_allowed",
        allowed_local_media_path=str(allowed),
    )
    (allowed / "sub").symlink_to(outside, target_is_directory=True)  # a linked directory
    refused(
        image_request((allowed / "sub" / "secret.jpg").as_uri()),
        "local_media_not_allowed",
        allowed_local_media_path=str(allowed),
    )
    # the allowed directory named through a link of its own is still that directory
    alias = allowed.parent / "alias"
    alias.symlink_to(allowed, target_is_directory=True)
    assert parse(image_request((allowed / "in side.jpg").as_uri()), allowed_local_media_path=str(alias)).inp["image"]


def test_other_file_urls_are_refused(tree):
    allowed, _ = tree
    rules = {"allowed_local_media_path": str(allowed)}
    refused(image_request("file://host" + str(allowed / "in side.jpg")), "invalid_value", **rules)
    refused(image_request(allowed.as_uri()), "local_media_not_allowed", **rules)  # the directory itself
    refused(image_request((allowed / "nothing.jpg").as_uri()), "invalid_value", **rules)
    os.mkfifo(allowed / "pipe")
    e = refused(image_request((allowed / "pipe").as_uri()), "invalid_value", **rules)
    assert "regular file" in e.message
    e = refused(
        image_request((allowed / "in side.jpg").as_uri()), "request_too_large", max_local_media_bytes=100, **rules
    )
    assert e.status == 413 and "--max-local-media-mb" in e.message and "MiB" in e.message


# -- chat_template_kwargs and mm_processor_kwargs ---------------------------------------------------
def text_body(**extra) -> dict:
    return {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], **extra}


def test_chat_template_kwargs():
    assert parse(text_body(chat_template_kwargs={"enable_thinking": False})).inp.get("use_tts_template") is None
    assert parse(text_body(chat_template_kwargs={"use_tts_template": True})).inp["use_tts_template"] is True
    e = refused(text_body(chat_template_kwargs={"enable_thinking": True}), "unsupported_parameter")
    assert "thinking is not supported yet" in e.message and e.param == "chat_template_kwargs.enable_thinking"
    e = refused(text_body(chat_template_kwargs={"add_vision_id": True}), "unsupported_parameter")
    assert e.param == "chat_template_kwargs.add_vision_id" and "add_vision_id" in e.message
    refused(text_body(chat_template_kwargs={"use_tts_template": "yes"}), "invalid_value")


@pytest.fixture(scope="module")
def small_clip(tmp_path_factory):
    """A 3 s MP4 with a tone for its track."""
    return video(tmp_path_factory.mktemp("clip") / "clip.mp4", 3.0, size="64x48", fps=2, tone=440.0).read_bytes()


def test_mm_processor_kwargs(tree, small_clip):
    allowed, _ = tree
    picture = {"type": "image_url", "image_url": {"url": (allowed / "in side.jpg").as_uri()}}
    low = {"type": "image_url", "image_url": {"url": (allowed / "in side.jpg").as_uri(), "detail": "low"}}
    rules = {"allowed_local_media_path": str(allowed)}
    body = text_body(messages=[{"role": "user", "content": [picture, low]}])
    assert parse(body, **rules).inp["image"] == {"max_slice_nums": [9, 1]}  # the processor's own 9, and detail's
    body["mm_processor_kwargs"] = {"max_slice_nums": 1, "use_image_id": False}
    assert parse(body, **rules).inp["image"] == {"max_slice_nums": [1, 1]}
    body["mm_processor_kwargs"] = {"use_image_id": True}
    e = refused(body, "unsupported_parameter", **rules)
    assert e.param == "mm_processor_kwargs.use_image_id"
    assert parse(body, image_ids=True, **rules).inp["image"]  # workers that write image ids
    for key, value in (("fps", 2), ("max_pixels", 1000)):
        e = refused(text_body(mm_processor_kwargs={key: value}), "unsupported_parameter")
        assert e.param == f"mm_processor_kwargs.{key}"
    refused(text_body(mm_processor_kwargs={"max_slice_nums": 10}), "invalid_value")
    clip = data_part("video", "video/mp4", small_clip)
    kw = {"use_audio_in_video": False, "max_frames": 96, "stack_frames": 2}
    item = parse(text_body(messages=[{"role": "user", "content": [clip]}], mm_processor_kwargs=kw)).inp
    assert {k: item["messages"][0]["content"][0][k] for k in kw if k != "use_audio_in_video"} == {
        "max_frames": 96,
        "stack_frames": 2,
    }
    assert item["messages"][0]["content"][0]["use_audio"] is False


# -- limits ------------------------------------------------------------------------------------------
def test_audio_limit_counts_clips_not_a_videos_track(small_clip):
    clip = lambda s: data_part("audio", "audio/wav", wav_int16(tone(s)))  # noqa: E731
    body = text_body(messages=[{"role": "user", "content": [clip(2.0), clip(2.0)]}])
    e = refused(body, "audio_too_long", max_audio_seconds=3.0)
    assert "4.0 s" in e.message and "3 s" in e.message and "--max-audio-seconds" in e.message
    assert parse(body, max_audio_seconds=4.0).audio_tokens == 2 * 2 * ROWS_PER_SECOND
    long_clip = text_body(messages=[{"role": "user", "content": [clip(60.0)]}])
    assert parse(long_clip).inp  # the default takes a 60 s clip
    with_track = text_body(messages=[{"role": "user", "content": [data_part("video", "video/mp4", small_clip)]}])
    assert parse(with_track, max_audio_seconds=1.0).inp  # its 3 s track is no clip


def test_speech_fields():
    ref = lambda s: f"data:audio/wav;base64,{base64.b64encode(wav_int16(tone(s))).decode()}"  # noqa: E731
    inp = parse(text_body(ref_audio=ref(2.0), ref_text="x", language="Chinese", max_tokens=50, max_new_tokens=9)).inp
    assert (
        len(base64.b64decode(inp["tts"]["ref_audio_data"])) == 2 * 16000 * 4
        and inp["generation"]["max_new_tokens"] == 9
    )
    e = refused(text_body(ref_audio=ref(31.0)), "audio_too_long")
    assert "31.0 s" in e.message and "30 s" in e.message
    assert refused(text_body(task_type="VoiceDesign"), "unsupported_parameter").param == "task_type"
    assert parse(text_body(modalities=["text", "audio"])).omni_audio  # no audio object: vLLM-Omni's layout


def test_serve_flags_set_the_media_rules(monkeypatch, tmp_path):
    """``serve --allowed-local-media-path DIR --max-audio-seconds N --fidelity reference``: the
    gateway's rules, and workers that take what it forwards and encode long clips whole."""
    from llama_omni_py import cli
    from llama_omni_py.server import gateway
    from llama_omni_py.server.gateway import workers

    seen = {}
    monkeypatch.setattr(gateway, "run_gateway", lambda cfg, sources: seen.update(cfg=cfg))
    monkeypatch.setattr(workers, "LocalWorkers", lambda devices, argv, **kw: seen.update(argv=argv))
    monkeypatch.setattr(workers, "devices_for", lambda n, device: ["cpu"])
    args = [
        "serve",
        "--allowed-local-media-path",
        str(tmp_path),
        "--max-audio-seconds",
        "90",
        "--fidelity",
        "reference",
    ]
    parsed = cli.build_parser().parse_args(args)
    assert parsed.func(parsed) == 0
    cfg = seen["cfg"]
    assert (cfg.allowed_local_media_path, cfg.max_audio_seconds, cfg.image_ids) == (str(tmp_path), 90.0, True)
    assert cfg.max_body_bytes == 256 << 20 and cfg.max_local_media_bytes == 2048 << 20
    argv = seen["argv"]
    assert float(argv[argv.index("--max-message-mb") + 1]) >= 256 + 2048 * 4 / 3
    options = WorkerOptions.from_args(parsed)
    assert options.configs()[0].audio_mode_rule == "window"
    assert WorkerOptions().configs()[0].audio_mode_rule == "clamp"
    assert GatewayConfig().max_audio_seconds >= 60 and WorkerOptions().max_audio_seconds >= 60


@pytest.fixture(scope="module")
def reference_gw(tiny_dir, media):
    """One worker with the engine a ``--fidelity reference`` worker gets."""
    engine = dataclasses.replace(WorkerOptions(fidelity="reference").configs()[0], **ENGINE)
    with running_gateway(
        tiny_dir,
        workers=1,
        worker_overrides={"engine": engine, "reply": ReplyConfig(**REPLY)},
        allowed_local_media_path=str(media["root"]),
        image_ids=True,
    ) as g:
        yield g


def test_a_long_clip_is_heard_whole_under_the_reference_rules(reference_gw, media):
    """The video pack's 60 s WAV under the reference's rules: two 30 s chunks, 600 rows."""
    content = [
        file_part("video", media["clip"]),
        file_part("audio", media["track"]),
        {"type": "text", "text": QUESTION},
    ]
    r = ask(reference_gw, omni_request([{"role": "user", "content": content}], VIDEO_PACK, TEXT_EXTRA))
    assert counts(r) == (60, 60 * ROWS_PER_SECOND)
