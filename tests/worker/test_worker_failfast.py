"""Every protocol violation and engine error ends the session with session.closed {reason,
diagnostic.message} and a closed socket; the server keeps serving: /health is 200 and a fresh
connection completes a turn. Also the limits: one session per engine, message size, idle
timeout, queued inputs, client disconnect freeing the engine, health during a turn."""

import asyncio
import base64
import json
import logging
import socket
import time

import numpy as np
import pytest
from server_client import REPLY, Client, b64, http, one_turn, push, running_server, slow_llm, tone, user
from websockets.exceptions import ConnectionClosed

from llama_omni_py.config import ReplyConfig
from llama_omni_py.server.worker.backend import connection

TURN = push([user(text="hello")])
MP4_HEAD = b"\x00\x00\x00\x18ftypisom" + b"\x00" * 64


@pytest.fixture(scope="module")
def server(tiny_dir):
    with running_server(tiny_dir, max_audio_seconds=2.0, max_message_bytes=1 << 20, max_pending_inputs=1) as s:
        yield s


def run(coro):
    return asyncio.run(coro)


def still_serving(server):
    deadline = time.monotonic() + 5  # the server frees the session once the close handshake ends (ms)
    while True:
        status, h = http(server.url + "/health")
        if not h.get("session_active") or time.monotonic() > deadline:
            break
        time.sleep(0.01)
    assert status == 200 and h["status"] == "ready" and h["session_active"] is False, h
    assert run(one_turn(server.url))[-1]["type"] == "response.done"


INIT = {"type": "session.init", "payload": {"mode": "turn_based"}}
CASES = {
    # name: (messages sent before expecting session.closed (after a successful init when `init`), reason, init)
    "push_before_init": ([TURN], "not_initialized", False),
    "unknown_first": ([{"type": "hello"}], "unexpected_message_type", False),
    "not_json": (["{nope"], "invalid_json", False),
    "binary_frame": ([b"\x00\x01"], "invalid_json", False),
    "no_type": ([{"payload": {}}], "invalid_json", False),
    "bad_mode": ([{"type": "session.init", "payload": {"mode": "half"}}], "invalid_mode", False),
    "bad_voice": (
        [{"type": "session.init", "payload": {"mode": "turn_based", "voice": {"ref_audio": "!!"}}}],
        "voice_audio_decode_failed",
        False,
    ),
    "second_init": ([INIT], "duplicate_init", True),
    "unknown_type": ([{"type": "response.create"}], "unexpected_message_type", True),
    "duplex_input": ([{"type": "input.append", "input": {"audio": b64(tone(0.5))}}], "mode_mismatch", True),
    "empty_messages": ([push([])], "empty_messages", True),
    "no_user_input": ([push([user(text="   ")])], "empty_messages", True),
    "last_not_user": ([push([{"role": "assistant", "content": "hi"}])], "invalid_input", True),
    "bad_role": ([push([{"role": "robot", "content": "hi"}])], "invalid_input", True),
    "bad_item": ([push([{"role": "user", "content": [{"type": "smell"}]}])], "invalid_input", True),
    "bad_streaming": ([push([user(text="hi")], streaming="yes")], "invalid_input", True),
    "bad_max_tokens": ([push([user(text="hi")], generation={"max_new_tokens": 0})], "invalid_input", True),
    "audio_not_base64": ([push([user({"type": "audio", "data": "@@@@"})])], "invalid_audio", True),
    "audio_odd_bytes": (
        [push([user({"type": "audio", "data": base64.b64encode(b"abcde").decode()})])],
        "invalid_audio",
        True,
    ),
    "audio_wav": (
        [push([user({"type": "audio", "data": base64.b64encode(b"RIFF" + b"\0" * 40).decode()})])],
        "invalid_audio",
        True,
    ),
    "audio_int16": (
        [
            push(
                [
                    user(
                        {
                            "type": "audio",
                            "data": base64.b64encode((tone(1.0) * 32767).astype(np.int16).tobytes()).decode(),
                        }
                    )
                ]
            )
        ],
        "invalid_audio",
        True,
    ),
    "audio_too_short": ([push([user({"type": "audio", "data": b64(tone(0.05))})])], "invalid_audio", True),
    "audio_nan": ([push([user({"type": "audio", "data": b64(np.full(160, np.nan))})])], "invalid_audio", True),
    "audio_too_long": ([push([user({"type": "audio", "data": b64(tone(2.5))})])], "audio_too_long", True),
    # refused by its length before it is decoded (it is not even base64)
    "audio_too_long_undecoded": (
        [push([user({"type": "audio", "data": "A" * 200_000 + "!"})])],
        "audio_too_long",
        True,
    ),
    "image_not_jpeg": (
        [push([user({"type": "image", "data": base64.b64encode(b"GIF89a....").decode()})])],
        "invalid_media",
        True,
    ),
    "video_not_mp4": (
        [push([user({"type": "video", "data": base64.b64encode(b"\x1aE\xdf\xa3webm").decode()})])],
        "invalid_media",
        True,
    ),
    "init_without_payload": ([{"type": "session.init", "mode": "turn_based"}], "invalid_input", False),
    "init_payload_string": ([{"type": "session.init", "payload": "turn_based"}], "invalid_input", False),
    "init_without_mode": ([{"type": "session.init", "payload": {}}], "invalid_mode", False),
    "alias_init": ([{"type": "init", "payload": {"mode": "turn_based"}}], "unexpected_message_type", False),
    "alias_push": ([{"type": "push", "input": {"messages": [user(text="hi")]}}], "unexpected_message_type", True),
    "alias_close": ([{"type": "close"}], "unexpected_message_type", True),
    "ws_session_close": ([{"type": "session.close"}], "unexpected_message_type", True),
    "push_without_input": ([{"type": "input.append", "messages": [user(text="hi")]}], "invalid_input", True),
    "push_input_not_object": ([{"type": "input.append", "input": "hi"}], "invalid_input", True),
    "image_png": (
        [push([user({"type": "image", "data": base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * 32).decode()})])],
        "invalid_media",
        True,
    ),
    "bad_temperature": ([push([user(text="hi")], generation={"temperature": -1})], "invalid_input", True),
    "bad_seed": ([push([user(text="hi")], generation={"seed": "x"})], "invalid_input", True),
    "video_undecodable": (
        [push([user({"type": "video", "data": base64.b64encode(MP4_HEAD).decode()})])],
        "video_decode_failed",
        True,
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_violation_closes_with_a_diagnostic(server, name):
    sent, reason, needs_init = CASES[name]

    async def go():
        async with Client.open(server.url) as c:
            if needs_init:
                await c.init()
            for m in sent:
                await c.send(m)
            return await c.closed()

    ev = run(go())
    assert ev["reason"] == reason, ev
    assert ev["diagnostic"]["message"] and "server_send_ts" in ev
    still_serving(server)


def test_second_concurrent_session_is_refused_and_the_first_keeps_working(server):
    async def go():
        async with Client.open(server.url) as first:
            await first.init()
            async with Client.open(server.url) as second:
                await second.send(INIT)
                refused = await second.closed()
            done = await first.turn([user(text="still here?")])
            return refused, done

    refused, done = run(go())
    assert refused["reason"] == "session_busy" and "one session" in refused["diagnostic"]["message"]
    assert done[-1]["type"] == "response.done"
    still_serving(server)


def test_engine_error_closes_the_session(server, monkeypatch):
    tts = server.server.host.engine.slot_stages(0).tts

    def broken(*a, **k):
        raise RuntimeError("boom")

    monkeypatch.setattr(tts, "speak", broken)

    async def go():
        async with Client.open(server.url) as c:
            await c.init()
            await c.send(TURN)
            while True:  # deltas may come first; then the close
                ev = await c.recv()
                if ev["type"] == "session.closed":
                    await c.assert_socket_closed()
                    return ev

    ev = run(go())
    assert ev["reason"] == "engine_error" and "tts stage failed: RuntimeError: boom" in ev["diagnostic"]["message"]
    monkeypatch.undo()
    still_serving(server)


@pytest.mark.parametrize("initialized", [True, False])
def test_oversized_message_sends_session_closed_then_1009(server, initialized):
    # schema §7.5: a best-effort session.closed before the close, which the WebSocket layer sends
    async def go():
        async with Client.open(server.url) as c:
            if initialized:
                await c.init()
            await c.send("x" * (2 << 20))
            ev = await c.recv()
            with pytest.raises(ConnectionClosed) as info:
                await asyncio.wait_for(c.ws.recv(), 30)
            return c.session_id, ev, info.value

    sid, ev, closed = run(go())
    assert ev["type"] == "session.closed" and ev["reason"] == "message_too_big" and ev.get("session_id") == sid
    assert str(1 << 20) in ev["diagnostic"]["message"]
    assert closed.rcvd is not None and closed.rcvd.code == 1009, repr(closed)
    still_serving(server)


def test_disconnect_mid_response_frees_the_engine(server, monkeypatch):
    slow_llm(monkeypatch, server, pause=2.0)

    async def go():
        async with Client.open(server.url) as c:
            await c.init()
            await c.send(push([user(text="tell me a long story")], generation={"max_new_tokens": 200}))
            await asyncio.sleep(0.5)
            h = await asyncio.to_thread(http, server.url + "/health")  # answers during the turn
            c.ws.transport.abort()  # the client vanishes mid-response
            return h

    status, h = run(go())
    assert status == 200 and h["busy"] is True and h["session_active"] is True
    t0 = time.monotonic()
    while time.monotonic() - t0 < 10:
        status, h = http(server.url + "/health")
        if not h["busy"] and not h["session_active"]:
            break
        time.sleep(0.05)
    freed = time.monotonic() - t0
    assert not h["busy"] and not h["session_active"] and freed < 4.0  # within the chunk in flight
    monkeypatch.undo()
    still_serving(server)


def test_inputs_beyond_the_queue_limit_close_the_session(server, monkeypatch):
    slow_llm(monkeypatch, server)

    async def go():
        async with Client.open(server.url) as c:
            await c.init()
            for _ in range(3):  # one running + one queued allowed (max_pending_inputs=1)
                await c.send(TURN)
            while True:
                ev = await c.recv()
                if ev["type"] == "session.closed":
                    await c.assert_socket_closed()
                    return ev

    assert run(go())["reason"] == "input_overflow"
    monkeypatch.undo()
    still_serving(server)


def test_idle_session_times_out(tiny_dir):
    with running_server(tiny_dir, idle_timeout_s=0.5, init_timeout_s=0.5, warmup=False) as s:

        async def go():
            async with Client.open(s.url) as c:
                await c.init()
                idle = await c.closed()
            async with Client.open(s.url) as c:  # nothing sent at all
                silent = await c.closed()
            return idle, silent

        idle, silent = run(go())
        assert idle["reason"] == silent["reason"] == "idle_timeout"
        assert http(s.url + "/health")[1]["session_active"] is False


def test_keepalive_pings_are_configured(tiny_dir):
    with running_server(tiny_dir, ping_interval_s=0.2, ping_timeout_s=5.0, warmup=False) as s:

        async def go():
            async with Client.open(s.url, ping_interval=None) as c:
                await c.init()
                await asyncio.sleep(0.8)  # the server pinged; our client answered
                latency = [conn.latency for conn in s.server._ws.connections]
                await c.send({"type": "session.close"})
                await c.closed()
                return latency

        latency = run(go())
        assert len(latency) == 1 and latency[0] > 0  # a pong was measured (0 until the first one)


def test_refused_sessions_are_logged_once_per_interval(server, caplog):
    # A crowd retrying a busy engine must not write one WARNING per refusal.
    connection.refusals._last.clear()

    async def go():
        async with Client.open(server.url) as holder:
            await holder.init()
            for _ in range(30):
                async with Client.open(server.url) as c:
                    await c.send(INIT)
                    assert (await c.closed())["reason"] == "session_busy"

    with caplog.at_level(logging.WARNING, "llama_omni_py.server.worker.backend.connection"):
        run(go())
    refused = [r for r in caplog.records if "session_busy" in r.getMessage()]
    assert len(refused) == 1, [r.getMessage() for r in refused]
    still_serving(server)


def test_client_that_stops_reading_is_dropped_and_frees_the_engine(tiny_dir):
    # Replies of minutes of audio (random weights never end a speech chunk); the client reads nothing.
    reply = ReplyConfig(**dict(REPLY, max_audio_per_chunk=500))
    with running_server(tiny_dir, reply=reply, send_timeout_s=0.5, max_new_tokens=60) as s:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(("127.0.0.1", s.server.port))
        sock.sendall(
            b"GET /backend HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
        )
        assert b"101" in sock.recv(1024).split(b"\r\n")[0]
        for msg in (INIT, TURN):
            payload = json.dumps(msg).encode()
            head = bytes([0x81, 0x80 | 126]) + len(payload).to_bytes(2, "big") + b"\0\0\0\0"  # zero mask
            sock.sendall(head + payload)
        try:
            # The turn may finish into the send queue first; the session must end all the same
            # once the writer has waited send_timeout_s on the full socket.
            deadline, seen_active = time.monotonic() + 60, False
            while time.monotonic() < deadline:
                h = http(s.url + "/health")[1]
                if (seen_active or h["turns"] >= 1) and not h["session_active"]:
                    break
                seen_active |= h["session_active"]
                time.sleep(0.05)
            assert h["session_active"] is False and h["busy"] is False, h  # dropped, engine free
        finally:
            sock.close()
        assert run(one_turn(s.url))[-1]["type"] == "response.done"
