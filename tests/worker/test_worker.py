"""The demo server's protocol (turn_based) over a real websockets client on 127.0.0.1, tiny set:
streaming and non-streaming speech turns, audio + image, video, two turns, text-only, the HTTP
close channel, the page, readiness."""

import asyncio
import base64
import json
import socket
import threading
import time

import numpy as np
import pytest
from server_client import (
    ENGINE,
    REPLY,
    Client,
    b64,
    ffmpeg_bytes,
    http,
    jpeg,
    mp4,
    one_turn,
    pcm,
    push,
    running_server,
    tone,
    user,
)

from llama_omni_py.config import EngineConfig, ReplyConfig
from llama_omni_py.server import WorkerConfig
from llama_omni_py.server.worker.engine_host import EngineHost
from llama_omni_py.session import OmniEngine


@pytest.fixture(scope="module")
def server(tiny_dir):
    with running_server(tiny_dir) as s:
        yield s


def run(coro):
    return asyncio.run(coro)


def _check_envelope(events, session_id):
    for ev in events:
        assert isinstance(ev["server_send_ts"], float) and abs(ev["server_send_ts"] - time.time()) < 120
        assert ev["metrics"]["backend"] == "llama-omni-py" and ev["session_id"] == session_id
        assert ev["response_id"] == events[-1]["response_id"]


def test_streaming_speech_turn_matches_non_streaming(server):
    async def go():
        async with Client.open(server.url) as c:
            created = await c.init()
            assert created["mode"] == "turn_based" and len(created["session_id"]) >= 16
            assert "server_send_ts" in created and created["metrics"]["backend"] == "llama-omni-py"
            streamed = await c.turn([user(text="hello there, how are you?")])
            whole = await c.turn([user(text="hello there, how are you?")], streaming=False)
            return c.session_id, streamed, whole

    sid, streamed, whole = run(go())
    _check_envelope(streamed, sid)
    deltas, done = streamed[:-1], streamed[-1]
    audio = [pcm(e["audio"]) for e in deltas if e["kind"] == "audio"]
    texts = [e["text"] for e in deltas if e["kind"] == "text"]
    assert all(set(e) & {"text", "audio"} == {e["kind"]} for e in deltas)  # one kind per delta
    assert len(audio) >= 2 and all(0 < a.size <= 24000 for a in audio)
    assert done["reason"] in ("turn_end", "max_new_tokens") and done["audio"] is None
    assert done["text"] == "".join(texts)
    m = done["metrics"]
    assert m["n_tts_tokens"] > 0 and m["cost_token2wav_ms"] > 0 and m["prefill_ms"] > 0 and m["wall_clock_ms"] > 0
    assert m["audio_ms"] == pytest.approx(sum(a.size for a in audio) / 24)
    assert 0 < m["time_to_first_audio_ms"] <= m["wall_clock_ms"]
    # non-streaming: no deltas, everything in response.done; same seed, same audio and text
    assert len(whole) == 1 and whole[0]["text"] == done["text"]
    assert np.array_equal(pcm(whole[0]["audio"]), np.concatenate(audio))
    assert whole[0]["response_id"].endswith("_resp_1") and done["response_id"].endswith("_resp_0")


def test_audio_and_image_input(server, tmp_path):
    events = run(
        _media_turn(
            server,
            [
                {"type": "audio", "data": b64(tone(1.0))},
                {"type": "image", "data": base64.b64encode(jpeg(tmp_path)).decode()},
            ],
        )
    )
    m = events[-1]["metrics"]
    assert m["cost_apm_ms"] > 0 and m["cost_vpm_ms"] > 0 and m["audio_ms"] > 0
    assert m["vision_slices"] == 1 and m["vision_tokens"] == 64 and m["prompt_tokens"] > 64 + 10
    assert m["kv_cache_length"] == m["prompt_tokens"] + m["n_tokens"]


@pytest.mark.parametrize("value", [0, 10, True, "9", 2.0, [3], [3, 0], [3, None], {"n": 3}])
def test_max_slice_nums_out_of_the_protocols_range(value):
    # 1..9 or one per image (two here); anything else is invalid_input naming the field
    from llama_omni_py.errors import ProtocolError
    from llama_omni_py.server.worker.backend.protocol import check_max_slice_nums

    assert check_max_slice_nums(None, 2, "image.max_slice_nums") is None
    assert check_max_slice_nums(9, 2, "image.max_slice_nums") == 9
    assert check_max_slice_nums([1, 9], 2, "image.max_slice_nums") == (0, 9)  # 1: the overview alone
    with pytest.raises(ProtocolError, match=r"image\.max_slice_nums") as e:
        check_max_slice_nums(value, 2, "image.max_slice_nums")
    assert e.value.code == "invalid_input"


def test_images_are_sliced_as_asked(server, tmp_path):
    # a 1344x1008 JPEG: the overview alone by default (the worker's fidelity, llama.cpp-omni's
    # rules), slices when image.max_slice_nums asks (an int, or one per image; 1 is the overview
    # alone); out of 1..9 the session ends
    photo = base64.b64encode(
        ffmpeg_bytes(tmp_path, "p.jpg", "-f", "lavfi", "-i", "testsrc=size=1344x1008:rate=1", "-frames:v", "1")
    ).decode()
    item = {"type": "image", "data": photo}

    async def go():
        async with Client.open(server.url) as c:
            await c.init()
            counts = []
            for image in (None, {"max_slice_nums": 1}, {"max_slice_nums": [4, 1]}, {"max_slice_nums": 9}):
                extra = {"generation": {"max_new_tokens": 4}, "tts": {"enabled": False}}
                if image is not None:
                    extra["image"] = image
                items = [item, item] if isinstance(image and image["max_slice_nums"], list) else [item]
                done = (await c.turn([user(*items, text="read it")], **extra))[-1]["metrics"]
                counts.append((done["vision_slices"], done["vision_tokens"]))
            await c.send(push([user(item, text="x")], image={"max_slice_nums": 10}))
            return counts, await c.closed()

    counts, closed = run(go())
    assert counts == [(1, 64), (1, 64), (5 + 1, 6 * 64), (7, 448)]
    assert closed["reason"] == "invalid_input" and "max_slice_nums" in closed["diagnostic"]["message"]


async def _media_turn(server, items, text="what is this?"):
    async with Client.open(server.url) as c:
        await c.init()
        return await c.turn([user(*items, text=text)])


def test_video_input(server, tmp_path):
    events = run(
        _media_turn(
            server, [{"type": "video", "data": base64.b64encode(mp4(tmp_path)).decode(), "stack_frames": 1}], text=None
        )
    )
    m = events[-1]["metrics"]
    assert m["cost_vpm_ms"] > 0 and m["cost_apm_ms"] > 0  # the frame, and the clip's audio track
    assert any(e.get("kind") == "audio" for e in events)


def test_two_turns_with_history_and_system_prompt(server):
    async def go():
        async with Client.open(server.url) as c:
            await c.init(system_prompt="You are terse.")
            first = await c.turn([user(text="hello")])
            history = [
                {"role": "system", "content": "Be brief."},
                user(text="hello"),
                {"role": "assistant", "content": first[-1]["text"]},
                user(text="and again?"),
            ]
            second = await c.turn(history, generation={"max_new_tokens": 3})
            return first, second

    first, second = run(go())
    assert first[-1]["response_id"].endswith("_resp_0") and second[-1]["response_id"].endswith("_resp_1")
    assert second[-1]["metrics"]["n_tokens"] <= 3


def test_text_only_turn(server):
    events = run(one_turn(server.url, tts={"enabled": False}))
    assert all(e["kind"] == "text" for e in events[:-1]) and events[-1]["audio"] is None
    assert events[-1]["metrics"]["n_tts_tokens"] == 0 and "audio_ms" not in events[-1]["metrics"]
    whole = run(one_turn(server.url, tts={"enabled": False}, streaming=False))
    assert whole[-1]["audio"] is None and len(whole) == 1


def test_http_close_then_404(server):
    async def go():
        async with Client.open(server.url) as c:
            await c.init()
            await c.turn([user(text="hi")])
            status, body = await asyncio.to_thread(
                http, f"{server.url}/sessions/{c.session_id}/close", "POST", b'{"reason": "done"}'
            )
            ev = await c.closed()
            again = await asyncio.to_thread(http, f"{server.url}/sessions/{c.session_id}/close", "POST", b"{}")
            return c.session_id, status, body, ev, again

    sid, status, body, ev, again = run(go())
    assert status == 200 and body == {"ok": True, "session_id": sid, "closed": True}
    assert ev["reason"] == "done" and ev["session_id"] == sid  # the caller's reason (schema §2.2)
    assert again[0] == 404 and http(f"{server.url}/sessions/nope/close", "POST")[0] == 404
    status, h = http(server.url + "/health")
    assert status == 200 and h["session_active"] is False


def test_http_close_without_reason_is_client_closed(server):
    async def go():
        async with Client.open(server.url) as c:
            await c.init()
            await asyncio.to_thread(http, f"{server.url}/sessions/{c.session_id}/close", "POST")
            return await c.closed()

    assert run(go())["reason"] == "client_closed"


def test_ws_close_message_is_a_violation(server):
    # Close travels over HTTP only (schema §3.3): on the data channel it is an unknown type.
    async def go():
        async with Client.open(server.url) as c:
            await c.init()
            await c.send({"type": "session.close", "reason": "bye"})
            return await c.closed()

    ev = run(go())
    assert ev["reason"] == "unexpected_message_type" and "POST /sessions/" in ev["diagnostic"]["message"]


def test_compat_accepts_the_old_aliases_and_shapes(tiny_dir, tmp_path):
    png = ffmpeg_bytes(tmp_path, "i.png", "-f", "lavfi", "-i", "testsrc=size=32x32", "-frames:v", "1")
    png = base64.b64encode(png).decode()
    with running_server(tiny_dir, compat=True) as s:

        async def go():
            async with Client.open(s.url) as c:
                await c.send({"type": "init", "mode": "turn_based"})  # alias, flat init
                assert (await c.recv())["type"] == "session.created"
                await c.send({"type": "push", "data": {"messages": [user({"type": "image", "data": png}, text="hi")]}})
                while (ev := await c.recv())["type"] != "response.done":
                    pass
                await c.send({"type": "close", "reason": "bye"})
                return ev, await c.closed()

        done, closed = run(go())
    assert done["metrics"]["vision_slices"] == 1 and done["metrics"]["vision_tokens"] == 64
    assert closed["reason"] == "bye"


def test_close_body_split_across_packets(server):
    # The body arrives after the head, in its own packet: the server waits for it.
    sid = "not-a-session"
    body = b'{"reason": "x"}'
    with socket.create_connection(("127.0.0.1", server.server.port), timeout=10) as s:
        s.sendall(
            f"POST /sessions/{sid}/close HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n".encode()
        )
        time.sleep(0.2)
        s.sendall(body)
        reply = s.recv(4096).decode()
    assert reply.startswith("HTTP/1.1 404") and sid in reply


def test_worker_serves_no_page(server):
    # The page lives on the gateway (tests/gateway/test_gateway.py); a worker is /backend, /health, close.
    assert http(server.url + "/")[0] == 404 and http(server.url + "/static/app.js")[0] == 404
    assert http(server.url + "/nothing")[0] == 404


def test_health_is_honest_about_loading_and_failure(tiny_dir):
    gate = threading.Event()

    def slow(*a, **k):
        assert gate.wait(60)
        return OmniEngine(*a, **k)

    with running_server(tiny_dir, host=None, wait=False) as s:  # warm-up included: ready means ready
        assert s.wait_ready() == "ready" and s.server.host.warmup_s is not None
    cfg = WorkerConfig(
        port=0, model_dir=str(tiny_dir), device="cpu", engine=EngineConfig(**ENGINE), reply=ReplyConfig(**REPLY)
    )
    with running_server(tiny_dir, host=EngineHost(cfg, factory=slow), wait=False) as s:
        assert http(s.url + "/health") == (503, {"status": "loading"})
        assert http(s.url + "/v1/health")[0] == 503

        async def refused():
            async with Client.open(s.url) as c:
                await c.send({"type": "session.init", "payload": {"mode": "turn_based"}})
                return await c.closed()

        assert run(refused())["reason"] == "engine_loading"
        gate.set()
        assert s.wait_ready() == "ready"
        status, h = http(s.url + "/health")
        assert status == 200 and h["status"] == "ready" and h["busy"] is False and h["warmup_s"] >= 0
        assert run(one_turn(s.url))[-1]["type"] == "response.done"

    def broken(*a, **k):
        raise RuntimeError("no models here")

    with running_server(tiny_dir, host=EngineHost(cfg, factory=broken), wait=False) as s:
        assert s.wait_ready() == "failed"
        status, h = http(s.url + "/health")
        assert status == 503 and h["status"] == "error" and "no models here" in h["error"]

        async def init_fails():
            async with Client.open(s.url) as c:
                await c.send({"type": "session.init", "payload": {"mode": "turn_based"}})
                return await c.closed()

        ev = run(init_fails())
        assert ev["reason"] == "omni_init_failed" and "no models here" in ev["diagnostic"]["message"]
        assert http(s.url + "/health")[0] == 503  # still serving


def test_config_errors_name_the_field():
    from llama_omni_py import ConfigError

    for field, value in (
        ("port", 70000),
        ("max_message_bytes", 10),
        ("idle_timeout_s", 0),
        ("max_new_tokens", 0),
        ("ping_interval_s", -1.0),
        ("max_pending_inputs", -1),
    ):
        with pytest.raises(ConfigError, match=field):
            WorkerConfig(**{field: value})


def test_cli_worker_starts_reports_readiness_and_stops_on_sigterm(tiny_dir):
    import signal
    import subprocess
    import sys

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "llama_omni_py",
            "worker",
            "--port",
            str(port),
            "--model-dir",
            str(tiny_dir),
            "--device",
            "cpu",
            "--max-new-tokens",
            "8",
            "--max-audio-per-chunk",
            "25",
            "--t2w-threads",
            "1",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tiny_dir,
    )  # not the source tree, whose package is uncompiled
    url = f"http://127.0.0.1:{port}"
    try:
        seen, deadline = set(), time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                status, body = http(url + "/health")
            except OSError:
                time.sleep(0.05)
                continue
            seen.add((status, body["status"]))
            if status == 200:
                break
            time.sleep(0.02)
        assert (200, "ready") in seen
        assert json.loads(proc.stdout.readline()) == {"listening": url, "port": port}  # for a gateway
        assert run(one_turn(url))[-1]["type"] == "response.done"
    finally:
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(60)
    assert rc == 0, proc.stderr.read()


def test_first_audio_leaves_before_the_llm_finishes(tiny_dir, monkeypatch):
    # A reply of 60+ LLM tokens at a real LLM's pace (0.3 s per 10 tokens): the first audio delta
    # must reach the client while the LLM is still writing, and hold at most one second.
    with running_server(tiny_dir, max_new_tokens=80) as s:
        llm = s.server.host.engine.slot_stages(0).llm
        real, llm_done = llm.chunks, []

        def paced(*a, **k):
            for chunk in real(*a, **k):
                time.sleep(0.3)
                yield chunk
            llm_done.append(time.time())

        monkeypatch.setattr(llm, "chunks", paced)

        async def go():
            async with Client.open(s.url) as c:
                await c.init()
                await c.send(push([user(text="hello there, how are you?")], generation={"max_new_tokens": 80}))
                first_audio, events = None, []
                while True:
                    ev = await c.recv()
                    events.append(ev)
                    if ev["type"] == "response.output.delta" and ev["kind"] == "audio" and first_audio is None:
                        first_audio = (time.time(), pcm(ev["audio"]).size)
                    if ev["type"] == "response.done":
                        return first_audio, events

        first_audio, events = run(go())
    done = events[-1]["metrics"]
    assert done["n_tokens"] >= 60, done
    assert first_audio is not None and first_audio[0] < llm_done[0]
    assert first_audio[1] <= 24000  # the first audio delta holds at most one second
    assert 0 < done["first_text_ms"] <= done["first_codes_ms"] <= done["time_to_first_audio_ms"]


def test_a_text_too_long_for_the_context_is_refused_before_it_is_tokenized(server, monkeypatch):
    # 20 MiB of text cannot fit the context whatever its tokens: refused by its byte length,
    # without the seconds that tokenizing it would take (the prompt is never built).
    import llama_omni_py.orchestration.turn_based as turn_based

    built = []
    real = turn_based.build_prompt
    monkeypatch.setattr(turn_based, "build_prompt", lambda *a, **k: built.append(1) or real(*a, **k))

    async def go():
        async with Client.open(server.url) as c:
            await c.init()
            await c.send(push([user(text="hello world " * (20 * 2**20 // 12))]))
            return await c.closed()

    closed = asyncio.run(go())
    assert closed["reason"] == "invalid_input" and "exceeds the context" in closed["diagnostic"]["message"]
    assert built == []
    assert asyncio.run(one_turn(server.url))[-1]["type"] == "response.done"  # and the next is served
