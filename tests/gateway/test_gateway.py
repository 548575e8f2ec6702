"""The gateway over two in-process workers (tiny set): the demo's chat API (/ws/chat,
/api/chat), the FIFO queue and its messages, the queue limit, /health, /status, /workers,
/api/queue, /metrics, the page; and the abuse cases -- a silent page, a client that only answers
pings, a slow reader, oversize frames, a client that vanishes mid-turn -- each with the server
alive and every worker free afterwards."""

import asyncio
import json
import socket
import time

import pytest
from server_client import REPLY, SPEAK, TIMEOUT, chat_request, http, running_gateway, slow_llm, wait_until, ws_chat
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from llama_omni_py.config import ReplyConfig


@pytest.fixture(scope="module")
def gw(tiny_dir):
    with running_gateway(tiny_dir, queue_update_s=0.2, first_message_timeout_s=1.0) as g:
        yield g


def run(coro):
    return asyncio.run(coro)


def all_free(g) -> None:
    """Every worker idle again, the queue empty, and a fresh request completes."""
    wait_until(lambda: http(g.url + "/status")[1]["idle_workers"] == len(g.workers))
    status, body = http(g.url + "/health")
    assert status == 200 and body["queue_length"] == 0 and {w["status"] for w in body["workers"]} == {"idle"}
    for w in g.workers:
        assert http(w.url + "/health")[1]["session_active"] is False
    assert run(ws_chat(g.url, chat_request()))[-1]["type"] == "done"


def test_chat_turn_streams_in_the_demo_shapes(gw):
    speak = {"tts": {"enabled": True}}
    msgs = run(ws_chat(gw.url, chat_request("hello there, how are you?", **speak)))
    types = [m["type"] for m in msgs]
    assert types[0] == "prefill_done" and types[-1] == "done" and set(types) == {"prefill_done", "chunk", "done"}
    assert msgs[0]["input_tokens"] > 0
    chunks = msgs[1:-1]
    audio = [m for m in chunks if "audio_data" in m]
    assert audio and all(set(m) - {"type"} in ({"audio_data"}, {"text_delta"}) for m in chunks)
    done = msgs[-1]
    assert done["text"] == "".join(m.get("text_delta", "") for m in chunks)
    assert done["generated_tokens"] > 0 and done["input_tokens"] == msgs[0]["input_tokens"]
    whole = run(ws_chat(gw.url, chat_request(streaming=False, **speak)))
    assert [m["type"] for m in whole] == ["prefill_done", "done"] and whole[-1]["audio_data"]
    # Without a `tts` field (the demo page's request with speech off) or with tts.enabled false:
    # text only, as the demo's code has it.
    for extra in ({}, {"tts": {"enabled": False}}, {"tts": {}}):
        silent = run(ws_chat(gw.url, chat_request("hello there", **extra)))
        assert silent[-1]["type"] == "done" and not any("audio_data" in m for m in silent), extra


def test_requests_beyond_the_workers_queue_in_order(gw, monkeypatch):
    for w in gw.workers:  # turns of a second or more, so the five requests surely overlap
        slow_llm(monkeypatch, w, pause=0.5)

    async def go():
        return await asyncio.gather(*(ws_chat(gw.url, chat_request(f"question {i}")) for i in range(5)))

    t0 = time.monotonic()
    results = run(go())
    assert time.monotonic() - t0 < 120
    assert all(r[-1]["type"] == "done" for r in results)  # nothing lost, nothing refused
    queued = [r for r in results if r[0]["type"] == "queued"]
    assert len(queued) == 3  # two go straight to the two workers
    for r in queued:
        q = r[0]
        assert q["ticket_id"].startswith("q_") and q["position"] >= 1 and q["estimated_wait_s"] >= 0
        assert q["queue_length"] >= q["position"]
        i = [m["type"] for m in r].index("queue_done")
        assert all(m["type"] in ("queued", "queue_update") for m in r[:i]) and r[i + 1]["type"] == "prefill_done"
    assert sorted(q[0]["position"] for q in queued) == [1, 2, 3]
    by_position = sorted((q[0]["position"], q[0]["estimated_wait_s"]) for q in queued)
    assert [eta for _, eta in by_position] == sorted(eta for _, eta in by_position)  # later places wait longer
    monkeypatch.undo()
    metrics = http(gw.url + "/metrics")[1]
    assert 'omni_turns_total{api="ws_chat",outcome="completed"}' in metrics
    assert "omni_queue_wait_seconds_count" in metrics and "omni_time_to_first_audio_seconds_count" in metrics
    all_free(gw)


def test_health_status_workers_shapes(gw):
    status, h = http(gw.url + "/health")
    assert status == 200 and h["status"] == "healthy" and h["queue_length"] == 0
    assert [w["worker_id"] for w in h["workers"]] == ["worker_0", "worker_1"]
    assert all(w["device"] == "cpu" and w["status"] == "idle" for w in h["workers"])
    s = http(gw.url + "/status")[1]
    assert s["total_workers"] == 2 and s["idle_workers"] == 2 and s["max_queue_size"] == 1000
    assert s["gateway_healthy"] is True and s["running_tasks"] == []
    w = http(gw.url + "/workers")[1]
    assert w["total"] == 2 and w["workers"][0]["capabilities"] == ["full_duplex", "half_duplex", "turn_based"]
    assert {"worker_id", "host", "port", "gpu_id", "status", "total_requests", "avg_inference_time_ms"} <= set(
        w["workers"][0]
    )
    assert http(gw.url + "/api/queue")[1] == {
        "queue_length": 0,
        "max_queue_size": 1000,
        "items": [],
        "running_tasks": [],
    }
    assert http(gw.url + "/api/queue/q_nothere")[1]["found"] is False
    assert http(gw.url + "/nothing")[0] == 404


def test_api_chat_answers_in_one_json(gw):
    req = {"messages": [{"role": "user", "content": "hi"}], "generation": {"max_new_tokens": 5}}
    status, r = http(gw.url + "/api/chat", "POST", json.dumps(dict(req, tts={"enabled": True})).encode())
    assert status == 200 and r["success"] is True and r["audio_sample_rate"] == 24000 and r["audio_data"]
    status, quiet = http(gw.url + "/api/chat", "POST", json.dumps(req).encode())
    assert status == 200 and quiet["success"] is True and not quiet["audio_data"]
    assert 0 < r["tokens_generated"] <= 5 and r["token_stats"]["input_tokens"] > 0
    assert r["queue_wait_ms"] >= 0 and r["estimated_queue_wait_s"] == 0.0
    assert http(gw.url + "/api/chat", "POST", b"{nope")[0] == 400
    status, r = http(gw.url + "/api/chat", "POST", json.dumps({"messages": []}).encode())
    assert status == 400 and "messages" in r["detail"]
    # a request the worker refuses (the backend protocol's checks) comes back as 400 with its reason
    bad = {"messages": [{"role": "user", "content": [{"type": "image", "data": "AAAA"}]}]}
    status, r = http(gw.url + "/api/chat", "POST", json.dumps(bad).encode())
    assert status == 400 and r["error"] == "invalid_media"
    all_free(gw)


def test_demo_chat_slices_images_as_the_demo_does(gw, tmp_path):
    import base64

    from server_client import ffmpeg_bytes

    from llama_omni_py.server.gateway.turn_based_api import demo_input

    # the demo's chat passes image.max_slice_nums, else its processor's 9, whatever the worker's default
    assert demo_input({"messages": []})["image"] == {"max_slice_nums": 9}
    assert demo_input({"image": {"max_slice_nums": 2}})["image"] == {"max_slice_nums": 2}
    assert demo_input({"image": {"max_slice_nums": None}})["image"] == {"max_slice_nums": 9}
    assert demo_input({"image": "x"})["image"] == "x"  # the worker refuses it
    photo = ffmpeg_bytes(tmp_path, "p.jpg", "-f", "lavfi", "-i", "testsrc=size=1344x1008", "-frames:v", "1")
    content = [{"type": "image", "data": base64.b64encode(photo).decode()}, {"type": "text", "text": "?"}]
    req = {"messages": [{"role": "user", "content": content}], "generation": {"max_new_tokens": 2}}
    inputs = []
    for image in (None, {"max_slice_nums": 1}):
        status, r = http(gw.url + "/api/chat", "POST", json.dumps(dict(req, image=image)).encode())
        assert status == 200, r
        inputs.append(r["token_stats"]["input_tokens"])
    assert inputs[0] - inputs[1] == 6 * (64 + 2) + 1  # 3 x 2 slices: <slice> 64 rows </slice>, one row break
    status, r = http(gw.url + "/api/chat", "POST", json.dumps(dict(req, image={"max_slice_nums": 0})).encode())
    assert status == 400 and r["error"] == "invalid_input"
    all_free(gw)


def test_bad_ws_requests_get_an_error_and_take_no_worker(gw):
    assert run(ws_chat(gw.url, "{nope"))[0]["type"] == "error"
    msgs = run(ws_chat(gw.url, {"messages": [{"role": "user", "content": [{"type": "smell"}]}]}))
    assert msgs[-1]["type"] == "error" and msgs[-1]["code"] == "invalid_input"
    all_free(gw)


def test_silent_page_and_pings_only_client_take_no_worker(gw):
    async def go():
        async with connect(gw.url.replace("http", "ws") + "/ws/chat", ping_interval=0.1) as ws:  # answers pings
            await asyncio.sleep(0.5)
            during = await asyncio.to_thread(http, gw.url + "/status")
            msgs = []
            try:
                while True:
                    msgs.append(json.loads(await asyncio.wait_for(ws.recv(), TIMEOUT)))
            except ConnectionClosed as e:
                return during, msgs, e.rcvd.code if e.rcvd else None

    during, msgs, code = run(go())
    assert during[1]["idle_workers"] == 2  # connected, but no worker taken
    assert msgs == [{"type": "error", "error": "no request within 1 s"}] and code == 1000
    all_free(gw)


def test_oversize_frame_closes_with_1009_and_the_server_lives(tiny_dir):
    # Its own gateway, with a 32 MiB message limit (the default is larger, for long media):
    # sending 33 MB on a loaded machine can outlast the shared fixture's 1 s first-message
    # timeout, which would then answer first.
    with running_gateway(tiny_dir, workers=1, max_message_bytes=32 << 20) as g:
        _oversize(g)


def _oversize(gw):
    async def go():
        async with connect(gw.url.replace("http", "ws") + "/ws/chat", max_size=None) as ws:
            with pytest.raises(ConnectionClosed) as info:
                await ws.send("x" * (33 << 20))
                await asyncio.wait_for(ws.recv(), TIMEOUT)
            return info.value

    closed = run(go())
    assert closed.rcvd is not None and closed.rcvd.code == 1009
    all_free(gw)


def test_client_vanishing_mid_turn_frees_its_worker(gw, monkeypatch):
    for w in gw.workers:
        slow_llm(monkeypatch, w, pause=1.0)

    async def go():
        async with connect(gw.url.replace("http", "ws") + "/ws/chat") as ws:
            await ws.send(json.dumps(chat_request(generation={"max_new_tokens": 60})))
            await asyncio.sleep(1.0)
            busy = await asyncio.to_thread(http, gw.url + "/status")
            ws.transport.abort()
            return busy

    busy = run(go())
    assert busy[1]["busy_workers"] == 1
    t0 = time.monotonic()
    wait_until(lambda: http(gw.url + "/status")[1]["idle_workers"] == 2)
    assert time.monotonic() - t0 < 5  # within the chunk in flight
    monkeypatch.undo()
    all_free(gw)


def test_slow_reader_is_dropped_and_its_worker_freed(tiny_dir):
    # Long replies (random weights never end a speech chunk: minutes of audio), a client that never
    # reads, with a tiny receive buffer.
    worker = {"max_new_tokens": 60, "reply": ReplyConfig(**dict(REPLY, max_audio_per_chunk=500))}
    with running_gateway(
        tiny_dir, workers=1, worker_overrides=worker, send_timeout_s=0.5, send_buffer_bytes=1 << 20
    ) as g:
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect(("127.0.0.1", g.port))
        s.sendall(
            b"GET /ws/chat HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
        )
        assert b"101" in s.recv(1024).split(b"\r\n")[0]
        payload = json.dumps(chat_request(generation={"max_new_tokens": 60}, tts={"enabled": True})).encode()
        mask = b"\x01\x02\x03\x04"
        frame = bytes([0x81, 0x80 | 126]) + len(payload).to_bytes(2, "big") + mask
        s.sendall(frame + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))
        try:
            wait_until(lambda: http(g.url + "/status")[1]["busy_workers"] == 1, 10)
            wait_until(lambda: http(g.url + "/status")[1]["idle_workers"] == 1, 60)  # dropped, worker back
            metrics = http(g.url + "/metrics")[1]
            assert 'outcome="cancelled"' in metrics or 'outcome="dropped"' in metrics
        finally:
            s.close()
        assert run(ws_chat(g.url, chat_request(generation={"max_new_tokens": 10})))[-1]["type"] == "done"


def test_queue_limit_refuses_with_a_message(tiny_dir, monkeypatch):
    with running_gateway(tiny_dir, workers=1, max_queue_size=1, queue_update_s=0.2) as g:
        slow_llm(monkeypatch, g.workers[0], pause=0.5)

        async def go():
            first = asyncio.create_task(ws_chat(g.url, chat_request(generation={"max_new_tokens": 30}, tts=SPEAK)))
            await asyncio.sleep(0.5)
            second = asyncio.create_task(ws_chat(g.url, chat_request()))
            await asyncio.sleep(0.5)
            q = await asyncio.to_thread(http, g.url + "/api/queue")
            third = await ws_chat(g.url, chat_request())
            api = await asyncio.to_thread(http, g.url + "/api/chat", "POST", json.dumps(chat_request()).encode())
            return await first, await second, third, q, api

        first, second, third, q, api = run(go())
        assert first[-1]["type"] == "done" and second[-1]["type"] == "done"
        assert second[0]["type"] == "queued" and second[0]["position"] == 1
        assert any(m["type"] == "queue_update" for m in second)
        assert q[1]["queue_length"] == 1 and q[1]["items"][0]["request_type"] == "chat"
        assert q[1]["running_tasks"][0]["worker_id"] == "worker_0"
        assert third == [{"type": "error", "error": "queue_full: Queue full (1 requests)", "code": "queue_full"}]
        assert api[0] == 503 and "Queue full" in api[1]["detail"]
        assert 'omni_refusals_total{reason="queue_full"} 2.0' in http(g.url + "/metrics")[1]


def test_ticket_lookup_and_cancel(tiny_dir, monkeypatch):
    with running_gateway(tiny_dir, workers=1) as g:
        slow_llm(monkeypatch, g.workers[0], pause=0.5)

        async def go():
            first = asyncio.create_task(ws_chat(g.url, chat_request(generation={"max_new_tokens": 30}, tts=SPEAK)))
            await asyncio.sleep(0.5)
            async with connect(g.url.replace("http", "ws") + "/ws/chat") as ws:
                await ws.send(json.dumps(chat_request()))
                queued = json.loads(await ws.recv())
                tid = queued["ticket_id"]
                found = await asyncio.to_thread(http, f"{g.url}/api/queue/{tid}")
                cancel = await asyncio.to_thread(http, f"{g.url}/api/queue/{tid}", "DELETE")
                again = await asyncio.to_thread(http, f"{g.url}/api/queue/{tid}", "DELETE")
            await first
            return found, cancel, again

        found, cancel, again = run(go())
        assert found[1]["found"] is True and found[1]["ticket"]["position"] == 1
        assert cancel[1] == {"success": True} and again[1] == {"success": False}
        wait_until(lambda: http(g.url + "/status")[1]["idle_workers"] == 1)


def test_half_duplex_route_says_no_worker_serves_it(tiny_dir, monkeypatch):
    # workers whose voice activity detector does not load (no voice extra) do not offer it
    from llama_omni_py.server.worker.engine_host import EngineHost

    monkeypatch.setattr(EngineHost, "_load_vad", staticmethod(lambda: False))

    async def go(url):
        async with connect(url) as ws:
            msg = json.loads(await ws.recv())
            with pytest.raises(ConnectionClosed) as info:
                await ws.recv()
            return msg, info.value.rcvd.code

    with running_gateway(tiny_dir, workers=1) as gw:
        assert http(gw.url + "/workers")[1]["workers"][0]["capabilities"] == ["full_duplex", "turn_based"]
        msg, code = run(
            go(gw.url.replace("http", "ws") + "/ws/half_duplex/x")
        )  # served: tests/worker/test_worker_half_duplex.py
        assert msg["type"] == "error" and "no worker" in msg["error"] and code == 1013


def test_page_is_served_and_opens_no_socket_by_itself(gw):
    status, page = http(gw.url + "/")
    assert status == 200 and "/static/app.js" in page
    status, js = http(gw.url + "/static/app.js")
    assert status == 200 and "/ws/chat" in js and "queue_done" in js
    assert http(gw.url + "/static/../pool.py")[0] == 404 and http(gw.url + "/static/nothere.js")[0] == 404
    for path in ("/", "/duplex", "/half_duplex"):  # every page links to the others
        html = http(gw.url + path)[1]
        assert all(f'href="{other}"' in html for other in ("/", "/duplex", "/half_duplex") if other != path), path
    assert http(gw.url + "/health")[1]["random_weights"] is True  # the tiny set: the pages say so


def test_unreachable_workers_mean_unavailable_not_an_endless_queue():
    from llama_omni_py.server.gateway import BackgroundGateway, GatewayConfig
    from llama_omni_py.server.gateway.workers import StaticWorkers

    with BackgroundGateway(GatewayConfig(port=0, health_interval_s=0.2), [StaticWorkers(["127.0.0.1:1"])]) as g:
        wait_until(lambda: http(g.url + "/workers")[1]["workers"][0]["status"] == "offline")
        status, h = http(g.url + "/health")
        assert status == 503 and h["status"] == "unavailable" and h["workers"][0]["error"]
        msgs = run(ws_chat(g.url, chat_request()))
        assert len(msgs) == 1 and msgs[0]["code"] == "no_worker"
        body = json.dumps({"model": "MiniCPM-o-4.5", "messages": [{"role": "user", "content": "hi"}]}).encode()
        status, r = http(g.url + "/v1/chat/completions", "POST", body)
        assert status == 503 and r["error"]["code"] == "unavailable"
