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
from server_client import (
    ENGINE,
    REPLY,
    ffmpeg_bytes,
    http,
    jpeg,
    running_gateway,
    running_server,
    slow_llm,
    tone,
    wait_until,
    ws_chat,
)

from llama_omni_py.config import EngineConfig, ReplyConfig
from llama_omni_py.server import WorkerConfig
from llama_omni_py.server.gateway import BackgroundGateway, GatewayConfig
from llama_omni_py.server.gateway.workers import StaticWorkers
from llama_omni_py.server.worker.engine_host import EngineHost
from llama_omni_py.session import OmniEngine

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
    # OpenAI's shape: with audio out the text is the audio's transcript and content is null
    assert msg.audio.id.startswith("audio_") and msg.audio.expires_at > 0 and msg.content is None
    assert msg.audio.transcript
    audio, rate = sf.read(io.BytesIO(base64.b64decode(msg.audio.data)))
    assert rate == 24000 and audio.ndim == 1
    usage, details = r.usage, r.usage.completion_tokens_details
    check_length(audio.size, details.audio_tokens)
    assert 0 < details.text_tokens <= 20 and usage.prompt_tokens > 0
    assert usage.completion_tokens == details.text_tokens + details.audio_tokens  # speech codes are output tokens
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    assert usage.prompt_tokens_details.audio_tokens == 0
    # same seed, same reply; the earlier audio can be named in a follow-up turn
    again = _hello(client, "flac")
    assert again.choices[0].message.audio.transcript == msg.audio.transcript
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
    assert follow.usage.completion_tokens_details.audio_tokens == 0


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
    # the text is sent once, as OpenAI sends it with audio out: in delta.audio.transcript only
    assert "".join(transcript) and not "".join(text)
    details = usage.completion_tokens_details
    check_length(samples.size, details.audio_tokens)
    assert usage.completion_tokens == details.text_tokens + details.audio_tokens


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
    assert r.usage.prompt_tokens_details.audio_tokens == 10 and r.usage.prompt_tokens_details.image_tokens == 128


def test_image_detail_chooses_the_slices(client, tmp_path):
    # a 1344x1008 photo: "low" is the overview alone, "high" and "auto" (the default) the
    # processor's slicing (overview + 3 x 2 slices); a null detail is "not given"
    photo = ffmpeg_bytes(tmp_path, "p.jpg", "-f", "lavfi", "-i", "testsrc=size=1344x1008", "-frames:v", "1")
    url = "data:image/jpeg;base64," + base64.b64encode(photo).decode()
    tokens = []
    for detail in ("low", "high", "absent", None):
        image = {"url": url} if detail == "absent" else {"url": url, "detail": detail}
        r = client.chat.completions.create(
            model=MODEL,
            messages=[
                {"role": "user", "content": [{"type": "image_url", "image_url": image}, {"type": "text", "text": "?"}]}
            ],
            max_tokens=4,
        )
        tokens.append(r.usage.prompt_tokens_details.image_tokens)
    assert tokens == [64, 7 * 64, 7 * 64, 7 * 64]


@pytest.mark.parametrize(
    "change, param",
    [
        ({"model": "gpt-4o"}, "model"),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA", "detail": "max"}}
                        ],
                    }
                ]
            },
            "messages[0].content[0].image_url.detail",
        ),
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "tool", "content": "x"}]}, "messages[0].role"),
        ({"messages": [{"role": "assistant", "content": "x"}]}, "messages[0].role"),
        ({"modalities": ["text", "audio"], "audio": {"format": "wav"}}, "audio.voice"),
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


# every chat-completion field of the official client (openai/types/chat/completion_create_params.py)
# that does not change a reply here, with a value a real client sends
IGNORED = {
    "user": "u-1",
    "metadata": {"k": "v"},
    "store": False,
    "service_tier": "auto",
    "parallel_tool_calls": False,
    "prompt_cache_key": "k",
    "prompt_cache_retention": "24h",
    "safety_identifier": "s",
    "verbosity": "low",
    "reasoning_effort": "low",
    "prediction": {"type": "content", "content": "x"},
    "logit_bias": {},
    "logprobs": False,
    "top_logprobs": 0,
    "n": 1,
    "tools": [],
    "tool_choice": "none",
    "frequency_penalty": 0,
    "presence_penalty": 0,
    "response_format": {"type": "text"},
}
OPTIONAL = (
    "audio frequency_penalty logit_bias logprobs max_completion_tokens max_tokens metadata modalities moderation n "
    "prediction presence_penalty prompt_cache_key prompt_cache_retention reasoning_effort response_format "
    "safety_identifier seed service_tier stop store stream stream_options temperature top_logprobs top_p verbosity"
).split()


def test_nulls_mean_not_given_and_no_op_parameters_are_accepted(client, gw):
    # the client sends explicit nulls for None (other SDKs do the same)
    nulls = {k: None for k in OPTIONAL}
    r = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}], **nulls)
    assert r.choices[0].message.content is not None and r.choices[0].message.audio is None
    r = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=5, seed=3, **IGNORED
    )
    assert r.choices[0].finish_reason in ("stop", "length")
    stream = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "hi"}],
        max_tokens=5,
        stream=True,
        stream_options={"include_usage": None, "include_obfuscation": False},
    )
    assert all(chunk.usage is None for chunk in stream)


@pytest.mark.parametrize(
    "change, param",
    [
        ({"logprobs": True}, "logprobs"),
        ({"top_logprobs": 2}, "top_logprobs"),
        ({"logit_bias": {"15": 10}}, "logit_bias"),
        ({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}, "response_format"),
        ({"response_format": {"type": "json_object"}}, "response_format"),
        ({"tool_choice": "required"}, "tool_choice"),
        ({"functions": [{"name": "f"}]}, "functions"),
        ({"function_call": {"name": "f"}}, "function_call"),
        ({"web_search_options": {}}, "web_search_options"),
        ({"moderation": {"model": "omni-moderation-latest"}}, "moderation"),
        ({"presence_penalty": 0.5}, "presence_penalty"),
    ],
)
def test_what_would_change_the_reply_and_cannot_be_done_is_refused(client, change, param):
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}], **change)
    err = info.value.body
    assert err["param"] == param and err["code"] == "unsupported_parameter", err


@pytest.mark.parametrize("stop", [["a", "b", "c", "d", "e"], 5, [""], ["a", 1]])
def test_bad_stop_sequences_are_refused(gw, stop):
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "stop": stop}
    status, r = http(gw.url + "/v1/chat/completions", "POST", json.dumps(body).encode())
    assert status == 400 and r["error"]["param"] == "stop", r


def _streamed(client, **kw) -> tuple[list[str], str | None, list[bytes]]:
    """(text pieces, finish reason, pcm16 audio pieces) of one streamed reply."""
    pieces, finish, pcm = [], None, []
    for chunk in client.chat.completions.create(model=MODEL, stream=True, seed=1, max_tokens=20, **kw):
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        audio = delta.audio if isinstance(delta.audio, dict) or delta.audio is None else delta.audio.model_dump()
        text = (audio or {}).get("transcript") or delta.content
        if text:
            pieces.append(text)
        if audio and audio.get("data"):
            pcm.append(base64.b64decode(audio["data"]))
        finish = chunk.choices[0].finish_reason or finish
    return pieces, finish, pcm


def _stop_in(full: str, start: int, n: int = 3) -> tuple[str, int]:
    """A stop sequence of ``n`` characters whose first occurrence in ``full`` is at ``start`` or later."""
    for i in range(start, len(full) - n + 1):
        if full.find(full[i : i + n]) == i:
            return full[i : i + n], i
    raise AssertionError(f"no usable stop sequence in {full!r} from {start}")


def test_stop_sequence_cuts_the_streamed_text_even_across_pieces(client):
    messages = [{"role": "user", "content": "Hello, who are you?"}]
    pieces, finish, _ = _streamed(client, messages=messages)
    full = "".join(pieces)
    assert len(pieces) == 2 and finish == "length", pieces  # 20 tokens: two pieces of 10
    # a stop that begins in the first piece and ends in the second: the first piece's tail must
    # be held back until the second shows it is the stop, and never sent
    stop, at = _stop_in(full, len(pieces[0]) - 2, 4)
    assert at < len(pieces[0]) < at + 4, (pieces, stop, at)
    cut, finish, _ = _streamed(client, messages=messages, stop=["never-in-this-reply", stop])
    assert "".join(cut) == full[:at] and finish == "stop", (cut, full, stop)
    whole = client.chat.completions.create(model=MODEL, messages=messages, seed=1, max_tokens=20, stop=stop)
    assert whole.choices[0].message.content == full[:at] and whole.choices[0].finish_reason == "stop"


def test_stop_sequence_ends_the_turn_and_its_audio(client, gw, monkeypatch):
    for w in gw.workers:  # one text piece per 0.8 s: the first piece's audio comes before the second
        slow_llm(monkeypatch, w, pause=0.8)
    kw = dict(
        messages=[{"role": "user", "content": "Hello, who are you?"}],
        modalities=["text", "audio"],
        audio={"voice": "alloy", "format": "pcm16"},
    )
    pieces, finish, pcm = _streamed(client, **kw)
    full, full_samples = "".join(pieces), sum(len(p) for p in pcm) // 2
    assert len(pieces) == 2 and full_samples > 0
    stop, at = _stop_in(full, len(pieces[0]) + 1)
    cut, finish, pcm = _streamed(client, stop=stop, **kw)
    samples = sum(len(p) for p in pcm) // 2
    assert "".join(cut) == full[:at] and finish == "stop"
    # the turn was closed when the stop appeared: the speech of the second piece was never made
    assert 0 < samples < full_samples, (samples, full_samples)
    r = client.chat.completions.create(
        model=MODEL, seed=1, max_tokens=20, stop=stop, **{**kw, "audio": {"voice": "alloy", "format": "wav"}}
    )
    audio, _ = sf.read(io.BytesIO(base64.b64decode(r.choices[0].message.audio.data)))
    assert r.choices[0].message.audio.transcript == full[:at] and r.choices[0].finish_reason == "stop"
    assert 0 < audio.size < full_samples and r.usage.completion_tokens_details.audio_tokens < 75
    wait_until(lambda: all(w.status == "idle" for w in gw.gateway.pool.workers.values()))


def test_context_overflow_is_context_length_exceeded(client):
    messages = [{"role": "user", "content": "hello world " * 1000}]  # about 11000 tokens; the context is 8192
    for stream in (False, True):
        with pytest.raises(openai.BadRequestError) as info:
            for _ in (
                client.chat.completions.create(model=MODEL, messages=messages, stream=True)
                if stream
                else [client.chat.completions.create(model=MODEL, messages=messages)]
            ):
                pass
        assert info.value.status_code == 400 and info.value.code == "context_length_exceeded", info.value.body
        assert info.value.param == "messages" and "exceeds the context" in info.value.message


def test_every_response_carries_a_request_id(client):
    messages = [{"role": "user", "content": "hi"}]
    raw = client.chat.completions.with_raw_response.create(model=MODEL, messages=messages, max_tokens=3)
    rid = raw.headers["x-request-id"]
    assert rid.startswith("req_") and raw.parse().id == "chatcmpl-" + rid.removeprefix("req_")
    with client.chat.completions.with_streaming_response.create(
        model=MODEL, messages=messages, max_tokens=3, stream=True
    ) as raw:
        rid = raw.headers["x-request-id"]
        ids = {chunk.id for chunk in raw.parse()}
    assert ids == {"chatcmpl-" + rid.removeprefix("req_")}
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model=MODEL, messages=messages, stream=True, temperature=9)
    assert info.value.request_id.startswith("req_")
    assert client.models.with_raw_response.list().headers["x-request-id"].startswith("req_")


def test_refusals_come_before_the_stream_with_retry_after(tiny_dir, monkeypatch):
    """Queue full: 429 with the estimated wait; loading: 503 with a few seconds; both as HTTP
    statuses (not errors inside a 200 stream), so the client's own error types and retries apply.
    /v1/models answers from the same readiness as chat completions."""
    messages = [{"role": "user", "content": "hi"}]
    body = json.dumps({"model": MODEL, "messages": messages}).encode()
    with running_gateway(tiny_dir, workers=1, max_queue_size=0) as g:
        client = openai.OpenAI(base_url=g.url + "/v1", api_key="none", max_retries=0, timeout=60)
        slow_llm(monkeypatch, g.workers[0], pause=0.5)

        async def go():
            busy = asyncio.create_task(ws_chat(g.url, {"messages": [{"role": "user", "content": "long"}]}))
            await asyncio.sleep(0.5)
            r = await asyncio.to_thread(http, g.url + "/v1/chat/completions", "POST", body)

            def streamed():
                with pytest.raises(openai.RateLimitError) as info:
                    for _ in client.chat.completions.create(model=MODEL, messages=messages, stream=True):
                        pass
                return info.value

            e = await asyncio.to_thread(streamed)
            await busy
            return r, e

        (status, r), e = asyncio.run(go())
        assert status == 429 and r["error"]["code"] == "queue_full" and r["error"]["type"] == "rate_limit_error"
        assert e.status_code == 429 and e.code == "queue_full"
        assert int(e.response.headers["retry-after"]) >= 1  # the queue's estimate, rounded up
        assert e.response.headers["x-request-id"].startswith("req_")
    gate = threading.Event()

    def slow(*a, **k):
        assert gate.wait(60)
        return OmniEngine(*a, **k)

    cfg = WorkerConfig(
        port=0, model_dir=str(tiny_dir), device="cpu", engine=EngineConfig(**ENGINE), reply=ReplyConfig(**REPLY)
    )
    with running_server(tiny_dir, host=EngineHost(cfg, factory=slow), wait=False) as w:
        with BackgroundGateway(GatewayConfig(port=0, health_interval_s=0.2), [StaticWorkers([w.url])]) as g:
            client = openai.OpenAI(base_url=g.url + "/v1", api_key="none", max_retries=0, timeout=60)
            status, r = http(g.url + "/v1/chat/completions", "POST", body)
            assert status == 503 and r["error"]["code"] == "model_loading"
            for call in (
                lambda: list(client.chat.completions.create(model=MODEL, messages=messages, stream=True)),
                lambda: client.chat.completions.create(model=MODEL, messages=messages),
                lambda: client.models.list(),
                lambda: client.models.retrieve(MODEL),
            ):
                with pytest.raises(openai.InternalServerError) as info:
                    call()
                assert info.value.status_code == 503 and info.value.code == "model_loading"
                assert info.value.response.headers["retry-after"] == "5"
            assert http(g.url + "/health")[0] == 503
            gate.set()
            assert g.wait_ready(60) == "ready"
            assert [m.id for m in client.models.list().data] == [MODEL]
            assert http(g.url + "/v1/chat/completions", "POST", body)[0] == 200


@pytest.mark.parametrize(
    "stops, pieces, sent, text",
    [
        ((), ["ab", "cd"], ["ab", "cd", ""], "abcd"),
        (("xyz",), ["abx", "y", "q"], ["ab", "", "xyq", ""], "abxyq"),  # a false start is sent late, whole
        (("xyz",), ["abx", "y", "zq", "more"], ["ab", "", "", "", ""], "ab"),  # across three pieces
        (("b", "abc"), ["zab", "c"], ["za", "", ""], "za"),  # the first occurrence wins, whichever stop
        (("\n\n", "END"), ["one\n", "\ntwo END"], ["one", "", ""], "one"),
        (("aa",), ["xa", "a"], ["x", "", ""], "x"),
    ],
)
def test_stop_scanner_sends_nothing_past_a_stop(stops, pieces, sent, text):
    from llama_omni_py.server.gateway.openai_stop import StopScanner

    s = StopScanner(stops)
    assert [s.feed(p) for p in pieces] + [s.flush()] == sent and s.text == text
