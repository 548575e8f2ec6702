"""Parts in order on the wire: an OpenAI chat completion with text, audio_url, image_url and
video_url parts, and the backend protocol's items it becomes, give the same prompt as the Python
call with the same content; video items' options and their errors."""

import base64
import io

import numpy as np
import pytest
import soundfile as sf
from video_files import video

import llama_omni_py as omni
from llama_omni_py.errors import ProtocolError
from llama_omni_py.orchestration.inputs import Request, build_prompt
from llama_omni_py.server.gateway import openai_request as O
from llama_omni_py.server.pcm import pcm_b64
from llama_omni_py.server.worker.backend import protocol as P

MODEL = "MiniCPM-o-4.5"


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    return video(tmp_path_factory.mktemp("wire") / "clip.mp4", 2.5).read_bytes()


@pytest.fixture(scope="module")
def session(tiny_dir):
    cfg = omni.EngineConfig(fidelity="reference", threads=1, token2wav=omni.Token2WavConfig(threads=1))
    with omni.OmniSession(tiny_dir, "cpu", cfg, reply=omni.ReplyConfig(max_new_tokens=4)) as s:
        yield s


def _tone():
    return (0.25 * np.sin(np.arange(16000) / 16000 * 2 * np.pi * 300)).astype(np.float32)


def _wav(x) -> bytes:
    buf = io.BytesIO()
    sf.write(buf, x, 16000, format="WAV", subtype="FLOAT")
    return buf.getvalue()


def _jpeg() -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(np.full((48, 64, 3), 140, np.uint8)).save(buf, "JPEG", quality=95)
    return buf.getvalue()


def _url(kind: str, mime: str, data: bytes) -> dict:
    return {"type": f"{kind}_url", f"{kind}_url": {"url": f"data:{mime};base64,{base64.b64encode(data).decode()}"}}


def _flat(prompt) -> list:
    out = []
    for kind, x in prompt.segments:
        out += list(x) if kind == "tokens" else np.asarray(x).round(4).tolist()
    return out


def _prompt(session, r: Request):
    return _flat(
        build_prompt(
            session.llm.model,
            r,
            session.inputs.encode(r),
            style=session.reply.prompt_rule(session.engine_config.fidelity),
        )
    )


def _backend_turn(inp: dict) -> P.Turn:
    init = P.parse_init({"type": "session.init", "payload": {"mode": "turn_based"}})
    return P.parse_turn({"type": "input.append", "input": inp}, init, 30.0, None)


def test_openai_parts_in_order_give_the_python_prompt(session, clip):
    tone, jpeg = _tone(), _jpeg()
    body = {
        "model": MODEL,
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "First this:"},
                    _url("video", "video/mp4", clip),
                    {"type": "text", "text": "then hear:"},
                    _url("audio", "audio/wav", _wav(tone)),
                    _url("image", "image/jpeg", jpeg),
                    {"type": "text", "text": "What changed?"},
                ],
            }
        ],
    }
    completion = O.parse(body, MODEL, lambda _id: None, ("wav",))
    turn = _backend_turn(completion.inp)
    assert [type(p).__name__ for p in turn.content] == ["str", "Video", "str", "Audio", "Image", "str"]
    wire = Request(tuple(turn.content), seed=0, tts_template=False, speech=False)
    content = ["First this:", omni.Video(clip), "then hear:", omni.Audio(tone), omni.Image(jpeg), "What changed?"]
    direct = Request(tuple(content), seed=0, tts_template=False, speech=False)
    assert _prompt(session, wire) == _prompt(session, direct)


def test_backend_video_items_take_their_options(clip):
    b64 = base64.b64encode(clip).decode()
    track = pcm_b64(np.zeros(16000 * 3, np.float32))
    item = {"type": "video", "data": b64, "max_frames": 2, "audio": track}
    inp = {"messages": [{"role": "user", "content": [item, {"type": "text", "text": "Hi"}]}]}
    turn = _backend_turn(inp)
    video = turn.content[0]
    assert isinstance(video, omni.Video) and video.max_frames == 2 and video.audio.size == 48000
    for bad in ({"max_frames": 0}, {"max_frames": 2000}, {"stack_frames": 11}, {"max_frames": "3"}):
        item = {"type": "video", "data": b64, **bad}
        with pytest.raises(ProtocolError, match=next(iter(bad))) as info:
            _backend_turn({"messages": [{"role": "user", "content": [item]}]})
        assert info.value.code == "invalid_input"
    with pytest.raises(ProtocolError, match="not an MP4"):
        item = {"type": "video", "data": base64.b64encode(b"not a video at all").decode()}
        _backend_turn({"messages": [{"role": "user", "content": [item]}]})


def test_openai_media_urls_must_be_data_urls_of_their_kind(clip):
    def parse(part):
        body = {"model": MODEL, "messages": [{"role": "user", "content": [part]}]}
        return O.parse(body, MODEL, lambda _id: None, ("wav",))

    with pytest.raises(O.OpenAIError, match="data URL") as info:
        parse({"type": "video_url", "video_url": {"url": "https://example.com/v.mp4"}})
    assert info.value.status == 400 and info.value.param.endswith("video_url.url")
    with pytest.raises(O.OpenAIError, match="data URL"):
        parse(_url("video", "image/png", clip))  # the MIME type names another kind
    with pytest.raises(O.OpenAIError, match="not an MP4"):
        parse(_url("video", "video/mp4", b"\x00" * 64))
    with pytest.raises(O.OpenAIError, match="could not be decoded"):
        parse(_url("audio", "audio/wav", b"RIFF....WAVEjunk"))


def test_a_video_can_be_its_frames_alone(clip):
    body = {
        "model": MODEL,
        "messages": [
            {"role": "user", "content": [{**_url("video", "video/mp4", clip)}, {"type": "text", "text": "Q"}]}
        ],
    }
    body["messages"][0]["content"][0]["video_url"]["use_audio"] = False
    turn = _backend_turn(O.parse(body, MODEL, lambda _id: None, ("wav",)).inp)
    assert turn.content[0].use_audio is False
    body["messages"][0]["content"][0]["video_url"]["use_audio"] = "no"
    with pytest.raises(O.OpenAIError, match="use_audio"):
        O.parse(body, MODEL, lambda _id: None, ("wav",))
