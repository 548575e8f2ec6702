"""Every JSON entry point against malformed and mutated requests (tiny set, one worker behind a
gateway): a fixed corpus of hostile bodies plus hypothesis mutations of valid requests (a value
replaced by any JSON, a key dropped or added, a value wrapped in a list). Each answer must be the
interface's own -- a result, or its error shape with a 4xx status / an error event -- never a 500,
a dropped connection or a traceback in the log, and the server must go on serving.

Hypothesis runs derandomized (the same examples on every run); OMNI_FUZZ_EXAMPLES raises the
count for a longer hunt."""

from __future__ import annotations

import asyncio
import base64
import collections
import contextlib
import copy
import io
import json
import logging
import os
import urllib.error
import urllib.request
import wave

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from server_client import TIMEOUT, b64, http, running_gateway, tone, wait_until
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

EXAMPLES = int(os.environ.get("OMNI_FUZZ_EXAMPLES", "30"))
FUZZ = settings(
    max_examples=EXAMPLES,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

AUDIO = b64(tone(0.2))


def wav_b64(samples: np.ndarray, rate: int = 16000) -> str:
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes((samples * 32767).astype("<i2").tobytes())
    return base64.b64encode(out.getvalue()).decode()


WAV_B64 = wav_b64(tone(0.2))
WORDS = ["", "x", "user", "assistant", "system", "text", "audio", "image", "wav", "mp3", "alloy", "-1", AUDIO[:64]]

leaves = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from(WORDS)
    | st.text(max_size=10)
)
json_values = st.recursive(
    leaves,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=12,
)

# valid requests of each interface, the seeds of the mutations
DEMO_CHAT = {
    "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "audio", "data": AUDIO}]},
    ],
    "streaming": True,
    "generation": {"max_new_tokens": 4, "temperature": 0.7},
    "tts": {"enabled": False},
}
OPENAI_CHAT = {
    "model": "MiniCPM-o-4.5",
    "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": [{"type": "text", "text": "hi"}]},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "hi"},
                {"type": "input_audio", "input_audio": {"data": WAV_B64, "format": "wav"}},
            ],
        },
    ],
    "modalities": ["text"],
    "max_tokens": 4,
    "temperature": 0.5,
    "stream": False,
}
BACKEND_INIT = {"type": "session.init", "payload": {"mode": "turn_based", "system_prompt": "Be brief."}}
BACKEND_TURN = {
    "type": "input.append",
    "input": {
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
        "streaming": True,
        "generation": {"max_new_tokens": 4},
        "tts": {"enabled": False},
    },
}
DUPLEX_PREPARE = {"type": "prepare", "system_prompt": "Be brief.", "config": {"temperature": 0.7, "chunk_ms": 1000}}
DUPLEX_CHUNK = {"type": "audio_chunk", "audio_base64": b64(tone(1.0))}

# bodies no mutation is likely to hit: the parser's edges
CORPUS = [
    b"",
    b" ",
    b"\xff\xfe{",
    b"\xef\xbb\xbf{}",
    b"[" * 200_000,
    b'{"a":' * 5000 + b"1" + b"}" * 5000,
    b"null",
    b"[]",
    b'"text"',
    b"1e999",
    b'{"messages": NaN}',
    b'{"messages": [{"role": "user", "content": "hi"}], "temperature": Infinity}',
    b'{"messages": [{"role": "user", "content": "hi"}], "max_tokens": ' + b"9" * 5000 + b"}",
    b'{"messages": [{"role": "user", "content": "hi"}]',
    b'{"messages": [{"role": "user", "content": "hi"}], "generation": {"temperature": NaN, "top_p": -Infinity}}',
    b'{"messages": [{"role": "user", "content": "hi"}], "generation": {"max_new_tokens": 1e400, "seed": 1e20}}',
    b'{"messages": [{"role": "user", "content": "hi"}], "generation": {"max_new_tokens": 99999999999999999999}}',
    b'{"messages": [{"role": "user", "content": "hi"}], "modalities": [{}]}',
    b'{"messages": [{"role": "assistant", "audio": {"id": [1]}}, {"role": "user", "content": "hi"}]}',
    b'{"messages": [{"role": "user", "content": [{"type": "input_audio", "input_audio": "x"}]}]}',
    b'{"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": 7}}]}]}',
    b'{"messages": [{"role": "user", "content": "hi"}], "generation": [], "tts": "yes"}',
    b'{"messages": [{"role": 5, "content": {"text": "hi"}}]}',
    b'{"messages": [{"role": "user", "content": "\\ud800"}]}',
]


def paths(obj, prefix=()):
    yield prefix
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from paths(v, (*prefix, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from paths(v, (*prefix, i))


@st.composite
def mutations(draw, base: dict):
    """``base`` with up to two random edits."""
    obj = copy.deepcopy(base)
    for _ in range(draw(st.integers(0, 2))):
        path = draw(st.sampled_from(list(paths(obj))))
        op = draw(st.sampled_from(["replace", "replace", "delete", "add", "wrap"]))
        if not path:
            if op in ("replace", "wrap"):
                obj = draw(json_values) if op == "replace" else [obj]
            continue
        parent = obj
        for key in path[:-1]:
            parent = parent[key]
        key = path[-1]
        if op == "replace":
            parent[key] = draw(json_values)
        elif op == "delete":
            del parent[key]
        elif op == "wrap":
            parent[key] = [parent[key]]
        elif isinstance(parent[key], dict):
            parent[key][draw(st.text(max_size=8))] = draw(json_values)
        elif isinstance(parent[key], list):
            parent[key].append(draw(json_values))
        else:
            parent[key] = {"unexpected": parent[key]}
        if not isinstance(obj, (dict, list)):
            break
    return obj


@pytest.fixture(scope="module")
def gateway(tiny_dir):
    with running_gateway(tiny_dir, workers=1) as g:
        yield g


@pytest.fixture(autouse=True)
def no_tracebacks(caplog):
    """No handler may fail with an exception the server logs as an error."""
    caplog.set_level(logging.ERROR)
    yield
    bad = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not bad, "\n".join(f"{r.name}: {r.getMessage()}" for r in bad)


OUTCOMES: collections.Counter = collections.Counter()  # (entry, "served" or "refused"): count


def encode(body) -> bytes:
    return body if isinstance(body, bytes) else json.dumps(body).encode()


def frame(body: bytes) -> str | bytes:
    """A WebSocket text frame of ``body``, or a binary one where it is not UTF-8."""
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        return body


def post(url: str, body: bytes) -> tuple[int, bytes, str]:
    req = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT) as r:
            return r.status, r.read(), r.headers.get("Content-Type", "")
    except urllib.error.HTTPError as e:
        return e.code, e.read(), e.headers.get("Content-Type", "")


def check_demo_chat(url: str, body: bytes) -> None:
    status, raw, _ = post(url + "/api/chat", body)
    answer = json.loads(raw)
    OUTCOMES["api_chat", "served" if status == 200 else "refused"] += 1
    if status == 200:
        assert isinstance(answer.get("text"), str), answer
    else:
        assert status in (400, 413), (status, answer)
        assert answer["success"] is False and isinstance(answer["detail"], str), answer


def check_openai(url: str, body: bytes) -> None:
    status, raw, ctype = post(url + "/v1/chat/completions", body)
    OUTCOMES["openai", "served" if status == 200 else "refused"] += 1
    if status != 200:
        answer = json.loads(raw)
        assert status in (400, 413), (status, answer)
        error = answer["error"]
        assert isinstance(error["message"], str) and isinstance(error["type"], str), answer
    elif ctype.startswith("text/event-stream"):
        events = [line[6:] for line in raw.decode().splitlines() if line.startswith("data: ")]
        assert events and events[-1] == "[DONE]", events[-3:]
        for e in events[:-1]:
            assert "error" not in json.loads(e), e  # a stream that started is a reply
    else:
        answer = json.loads(raw)
        assert answer["object"] == "chat.completion", answer


async def ws_messages(url: str, first, then=()) -> tuple[list[dict], int | None]:
    """Sends ``first`` then each of ``then``; every message until the server closes, and the close code."""
    out: list[dict] = []
    async with connect(url, max_size=None) as ws:
        with contextlib.suppress(ConnectionClosed):
            await ws.send(first)
            for msg in then:
                await ws.send(msg)
            while True:
                out.append(json.loads(await asyncio.wait_for(ws.recv(), TIMEOUT)))
    return out, ws.close_code


def check_ws_chat(url: str, body: bytes) -> None:
    msgs, code = asyncio.run(ws_messages(url.replace("http", "ws") + "/ws/chat", frame(body)))
    assert msgs and msgs[-1]["type"] in ("done", "error"), msgs[-3:]
    OUTCOMES["ws_chat", "served" if msgs[-1]["type"] == "done" else "refused"] += 1
    assert code in (1000, 1008), code
    if msgs[-1]["type"] == "error":
        assert isinstance(msgs[-1]["error"], str)


def check_backend(worker_url: str, init: bytes, turn: bytes) -> None:
    async def go():
        async with connect(worker_url.replace("http", "ws") + "/backend", max_size=None) as ws:
            events = []
            with contextlib.suppress(ConnectionClosed):
                await ws.send(frame(init))
                events.append(json.loads(await asyncio.wait_for(ws.recv(), TIMEOUT)))
                if events[-1]["type"] == "session.created":
                    await ws.send(frame(turn))
                    while events[-1]["type"] not in ("response.done", "session.closed", "error"):
                        events.append(json.loads(await asyncio.wait_for(ws.recv(), TIMEOUT)))
            return events, ws.close_code

    events, code = asyncio.run(go())
    assert events, "the worker closed without a word"
    assert code in (None, 1000, 1008), (code, events[-2:])
    last = events[-1]
    OUTCOMES["backend", "served" if last["type"] == "response.done" else "refused"] += 1
    assert last["type"] in ("session.created", "response.done", "session.closed", "error"), last
    if last["type"] in ("session.closed", "error"):
        assert isinstance(last.get("reason") or last.get("error") or last.get("message"), str), last


def check_duplex(url: str, prepare: bytes, chunk: bytes, sid: str) -> None:
    path = url.replace("http", "ws") + f"/ws/duplex/{sid}"
    stop = json.dumps({"type": "stop"})
    msgs, code = asyncio.run(ws_messages(path, frame(prepare), [frame(chunk), stop]))
    assert code in (1000, 1008), (code, msgs[-2:])
    OUTCOMES["duplex", "refused" if any(m.get("type") == "error" for m in msgs) else "served"] += 1
    for m in msgs:
        assert isinstance(m, dict) and isinstance(m.get("type"), str), m
        if m["type"] == "error":
            assert isinstance(m["error"], str)


def with_model(body: bytes) -> bytes:
    """The corpus body with the OpenAI API's required ``model``, where it is an object."""
    try:
        obj = json.loads(body)
    except (ValueError, RecursionError):
        return body
    return json.dumps({"model": "MiniCPM-o-4.5", **obj}).encode() if isinstance(obj, dict) else body


def still_serving(g) -> None:
    wait_until(lambda: http(g.url + "/status")[1].get("idle_workers") == 1, TIMEOUT)
    status, answer = http(
        g.url + "/api/chat", "POST", json.dumps({"messages": [{"role": "user", "content": "hi"}]}).encode()
    )
    assert status == 200 and isinstance(answer["text"], str), answer


@pytest.mark.parametrize("body", CORPUS, ids=range(len(CORPUS)))
def test_corpus_on_every_http_and_websocket_entry(gateway, body):
    check_demo_chat(gateway.url, body)
    check_openai(gateway.url, body)
    check_openai(gateway.url, with_model(body))
    check_ws_chat(gateway.url, body)
    turn = json.dumps(BACKEND_TURN).encode()
    check_backend(gateway.workers[0].url, body, turn)
    check_backend(gateway.workers[0].url, json.dumps(BACKEND_INIT).encode(), body)
    check_duplex(gateway.url, body, json.dumps(DUPLEX_CHUNK).encode(), "omni_corpus")
    still_serving(gateway)


@FUZZ
@given(body=mutations(DEMO_CHAT))
def test_fuzz_demo_chat(gateway, body):
    check_demo_chat(gateway.url, encode(body))
    check_ws_chat(gateway.url, encode(body))


@FUZZ
@given(body=mutations(OPENAI_CHAT))
def test_fuzz_openai_chat_completions(gateway, body):
    check_openai(gateway.url, encode(body))


@FUZZ
@given(init=mutations(BACKEND_INIT), turn=mutations(BACKEND_TURN))
def test_fuzz_worker_backend(gateway, init, turn):
    check_backend(gateway.workers[0].url, encode(init), encode(BACKEND_TURN))
    check_backend(gateway.workers[0].url, encode(BACKEND_INIT), encode(turn))


@settings(FUZZ, max_examples=max(EXAMPLES // 2, 1))
@given(prepare=mutations(DUPLEX_PREPARE), chunk=mutations(DUPLEX_CHUNK))
def test_fuzz_duplex(gateway, prepare, chunk):
    check_duplex(gateway.url, encode(prepare), encode(chunk), "omni_fuzz")


def test_still_serving_after_the_fuzz(gateway):
    still_serving(gateway)
    # the mutations reached both sides of every entry it ran: some requests served, some refused
    entries = {entry for entry, _ in OUTCOMES}
    for entry in entries:
        assert OUTCOMES[entry, "served"] and OUTCOMES[entry, "refused"], (entry, sorted(OUTCOMES.items())[-4:])
    print(dict(OUTCOMES))
