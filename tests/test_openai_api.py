"""The OpenAI-compatible API on the gateway, driven by the official ``openai`` client against a
running server (two in-process workers, tiny set): streaming and whole chat completions with
audio out, audio in, an image in, bad requests, model listing; the audio decodes with soundfile at
24 kHz and its length follows the speech codes generated."""

import asyncio
import base64
import io
import json
import threading

import numpy as np
import openai
import pytest
import soundfile as sf
from server_client import SESSION, ffmpeg_bytes, http, jpeg, running_gateway, running_server, slow_llm, tone, ws_chat

from llama_omni_py.server import ServerConfig
from llama_omni_py.server.engine import Engine
from llama_omni_py.server.gateway import BackgroundGateway, GatewayConfig
from llama_omni_py.server.gateway.workers import StaticWorkers
from llama_omni_py.session import OmniSession, SessionConfig

MODEL = "MiniCPM-o-4.5"
SAMPLES_PER_CODE = 960  # 25 speech codes = 1 s = 24000 samples


@pytest.fixture(scope="module")
def gw(tiny_dir):
    with running_gateway(tiny_dir) as g:
        yield g


@pytest.fixture(scope="module")
def client(gw):
    return openai.OpenAI(base_url=gw.url + "/v1", api_key="none", max_retries=0, timeout=120)


def wav_b64(x, rate=16000) -> str:
    buf = io.BytesIO()
    sf.write(buf, x, rate, format="WAV", subtype="PCM_16")
    return base64.b64encode(buf.getvalue()).decode()


def check_length(samples: int, codes: int) -> None:
    # Token2Wav: 3 silence codes lead, the last window is flushed whole
    assert codes > 0 and abs(samples - codes * SAMPLES_PER_CODE) <= 3 * SAMPLES_PER_CODE, (samples, codes)


def test_models(client):
    models = client.models.list()
    assert [m.id for m in models.data] == [MODEL] and models.data[0].owned_by == "llama-omni-py"
    assert client.models.retrieve(MODEL).id == MODEL
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("gpt-4o")


def _hello(client, audio_format: str):
    return client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello, who are you?"}],
        modalities=["text", "audio"],
        audio={"voice": "alloy", "format": audio_format},
        max_completion_tokens=20,
        temperature=0.7,
        top_p=0.9,
        seed=1,
    )


def test_whole_completion_with_audio_out(client):
    r = _hello(client, "wav")
    msg = r.choices[0].message
    assert r.object == "chat.completion" and r.model == MODEL and r.choices[0].finish_reason in ("stop", "length")
    assert msg.audio.id.startswith("audio_") and msg.audio.expires_at > 0 and msg.audio.transcript == msg.content
    audio, rate = sf.read(io.BytesIO(base64.b64decode(msg.audio.data)))
    assert rate == 24000 and audio.ndim == 1
    check_length(audio.size, r.usage.completion_tokens_details.audio_tokens)
    assert 0 < r.usage.completion_tokens <= 20 and r.usage.prompt_tokens > 0
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    # same seed, same reply; the earlier audio can be named in a follow-up turn
    again = _hello(client, "flac")
    assert again.choices[0].message.content == msg.content
    flac, rate = sf.read(io.BytesIO(base64.b64decode(again.choices[0].message.audio.data)))
    assert rate == 24000 and np.allclose(flac, audio, atol=1e-4)
    follow = client.chat.completions.create(
        model=MODEL,
        messages=[
            {"role": "user", "content": "Hello, who are you?"},
            {"role": "assistant", "audio": {"id": msg.audio.id}},
            {"role": "user", "content": "And then?"},
        ],
        max_tokens=5,
    )
    assert follow.choices[0].message.audio is None and follow.usage.completion_tokens <= 5


def test_streaming_with_audio_and_usage(client):
    stream = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Tell me something."}],
        modalities=["text", "audio"],
        audio={"voice": "default", "format": "pcm16"},
        max_tokens=20,
        stream=True,
        stream_options={"include_usage": True},
    )
    pcm, text, transcript, ids, finish, usage = [], [], [], set(), None, None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        text.append(delta.content or "")
        audio = delta.audio
        if audio:
            audio = audio if isinstance(audio, dict) else audio.model_dump()
            ids.add(audio.get("id"))
            if audio.get("data"):
                pcm.append(base64.b64decode(audio["data"]))
            transcript.append(audio.get("transcript") or "")
        finish = chunk.choices[0].finish_reason or finish
    samples, rate = sf.read(io.BytesIO(b"".join(pcm)), format="RAW", subtype="PCM_16", samplerate=24000, channels=1)
    assert len(pcm) >= 2 and rate == 24000 and len(ids) == 1 and finish in ("stop", "length")
    assert "".join(text) == "".join(transcript)
    check_length(samples.size, usage.completion_tokens_details.audio_tokens)


def test_audio_and_image_in(client, tmp_path, gw):
    png = ffmpeg_bytes(tmp_path, "i.png", "-f", "lavfi", "-i", "testsrc=size=64x48", "-frames:v", "1")
    r = client.chat.completions.create(
        model=MODEL,
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "input_audio", "input_audio": {"data": wav_b64(tone(1.0)), "format": "wav"}},
                    {
                        "type": "image_url",
                        "image_url": {"url": "data:image/png;base64," + base64.b64encode(png).decode()},
                    },
                    {
                        "type": "image_url",
                        "image_url": {"url": "data:image/jpeg;base64," + base64.b64encode(jpeg(tmp_path)).decode()},
                    },
                    {"type": "text", "text": "What do you hear and see?"},
                ],
            }
        ],
        max_tokens=10,
    )
    # two images at 64 rows each and one second of audio (10 rows) are in the prompt
    assert r.usage.prompt_tokens > 2 * 64 + 10 and r.choices[0].message.audio is None


@pytest.mark.parametrize(
    "change, param",
    [
        ({"model": "gpt-4o"}, "model"),
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "tool", "content": "x"}]}, "messages[0].role"),
        ({"messages": [{"role": "assistant", "content": "x"}]}, "messages[0].role"),
        ({"modalities": ["text", "audio"]}, "audio"),
        ({"modalities": ["text", "audio"], "audio": {"voice": "alloy", "format": "aiff"}}, "audio.format"),
        ({"modalities": ["text", "audio"], "audio": {"voice": "nobody", "format": "wav"}}, "audio.voice"),
        (
            {"stream": True, "modalities": ["text", "audio"], "audio": {"voice": "alloy", "format": "wav"}},
            "audio.format",
        ),
        ({"temperature": 3}, "temperature"),
        ({"top_p": 0}, "top_p"),
        ({"n": 2}, "n"),
        ({"tools": [{"type": "function", "function": {"name": "f"}}]}, "tools"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"frobnicate": 1}, "frobnicate"),
        (
            {
                "messages": [
                    {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "http://x/y.png"}}]}
                ]
            },
            "messages[0].content[0].image_url.url",
        ),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [{"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}],
                    }
                ]
            },
            "messages[0].content[0].input_audio.data",
        ),
        (
            {"messages": [{"role": "assistant", "audio": {"id": "audio_x"}}, {"role": "user", "content": "hi"}]},
            "messages[0].audio.id",
        ),
    ],
)
def test_bad_requests_are_openai_errors(gw, change, param):
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], **change}
    status, r = http(gw.url + "/v1/chat/completions", "POST", json.dumps(body).encode())
    assert status == (404 if param == "model" else 400), r
    assert set(r["error"]) == {"message", "type", "param", "code"} and r["error"]["param"] == param
    assert r["error"]["type"] == "invalid_request_error"


def test_bad_request_through_the_client_raises_its_error(client):
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}], temperature=5)
    assert info.value.status_code == 400 and "temperature" in str(info.value)
    status, r = http(client.base_url.__str__().rstrip("/") + "/chat/completions", "POST", b"{nope")
    assert status == 400 and r["error"]["code"] == "invalid_json"


def test_busy_server_answers_429_and_loading_server_503(tiny_dir, monkeypatch):
    body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}).encode()
    with running_gateway(tiny_dir, workers=1, max_queue_size=0) as g:
        slow_llm(monkeypatch, g.workers[0], pause=0.5)

        async def go():
            busy = asyncio.create_task(ws_chat(g.url, {"messages": [{"role": "user", "content": "long"}]}))
            await asyncio.sleep(0.5)
            r = await asyncio.to_thread(http, g.url + "/v1/chat/completions", "POST", body)
            await busy
            return r

        status, r = asyncio.run(go())
        assert status == 429 and r["error"]["code"] == "queue_full" and r["error"]["type"] == "rate_limit_error"
    gate = threading.Event()

    def slow(*a, **k):
        assert gate.wait(60)
        return OmniSession(*a, **k)

    cfg = ServerConfig(port=0, model_dir=str(tiny_dir), device="cpu", session=SessionConfig(**SESSION))
    with running_server(tiny_dir, engine=Engine(cfg, factory=slow), wait=False) as w:
        with BackgroundGateway(GatewayConfig(port=0, health_interval_s=0.2), [StaticWorkers([w.url])]) as g:
            status, r = http(g.url + "/v1/chat/completions", "POST", body)
            assert status == 503 and r["error"]["code"] == "model_loading"
            assert http(g.url + "/health")[0] == 503
            gate.set()
            assert g.wait_ready(60) == "ready"
            assert http(g.url + "/v1/chat/completions", "POST", body)[0] == 200
