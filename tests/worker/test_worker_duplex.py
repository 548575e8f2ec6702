"""Full duplex over the network (tiny set): the backend protocol's full_duplex mode on /backend,
the demo's duplex protocol on a worker's /ws/duplex and through the gateway's queue, and their
fail-fast / error cases with the engine freed afterwards."""

import asyncio
import base64
import json

import numpy as np
import pytest
from server_client import (
    TIMEOUT,
    Client,
    ffmpeg_bytes,
    http,
    jpeg,
    pcm,
    running_gateway,
    running_server,
    tone,
    wait_until,
)
from websockets.asyncio.client import connect


def b64(samples) -> str:
    return base64.b64encode(np.asarray(samples, "<f4").tobytes()).decode()


def run(coro):
    return asyncio.run(coro)


@pytest.fixture(scope="module")
def server(tiny_dir):
    with running_server(tiny_dir) as s:
        yield s


def unit(**extra) -> dict:
    return {"type": "input.append", "input": {"audio": b64(tone(1.0)), **extra}}


async def events_of_push(c: Client, msg: dict) -> list[dict]:
    """The events one unit produces: a listen delta, or text/audio (+ a closing listen)."""
    await c.send(msg)
    out = []
    while True:
        ev = await c.recv()
        out.append(ev)
        assert ev["type"] == "response.output.delta", ev
        if ev["kind"] == "listen" or (ev["kind"] == "audio" and not ev["metrics"]["end_of_turn"]):
            return out


def test_backend_full_duplex_units(server):
    async def go():
        async with Client.open(server.url) as c:
            await c.send({"type": "session.init", "payload": {"mode": "full_duplex", "system_prompt": "Be brief."}})
            created = await c.recv()
            assert created["type"] == "session.created" and created["mode"] == "full_duplex"
            return [await events_of_push(c, unit()) for _ in range(6)]

    units = run(go())
    for evs in units[:3]:  # forced listening first
        assert [e["kind"] for e in evs] == ["listen"] and evs[0]["metrics"]["kv_cache_length"] > 0
    speaking = [evs for evs in units[3:] if evs[-1]["kind"] == "audio" or len(evs) > 1]
    assert speaking, "random weights talk after the forced units"
    for evs in speaking:
        audio = [e for e in evs if e["kind"] == "audio"]
        assert len(audio) == 1 and pcm(audio[0]["audio"]).size in range(1, 24001)
        assert all(e["response_id"] == evs[0]["response_id"] for e in evs if e["kind"] != "listen")
    assert [e["metrics"]["current_time"] for evs in units for e in evs[:1]] == list(range(1, 7))


@pytest.mark.parametrize(
    "inp,reason",
    [
        ({"messages": [{"role": "user", "content": "hi"}]}, "mode_mismatch"),
        ({}, "missing_audio"),
        ({"audio": b64(tone(1.0)), "video_frames": [base64.b64encode(b"\x89PNG\r\n").decode()]}, "invalid_media"),
        # max_slice_nums: an int in 1..9, or one per frame (as turn_based has it)
        ({"audio": b64(tone(1.0)), "max_slice_nums": "x"}, "invalid_input"),
        ({"audio": b64(tone(1.0)), "max_slice_nums": 0}, "invalid_input"),
        ({"audio": b64(tone(1.0)), "max_slice_nums": 10}, "invalid_input"),
        ({"audio": b64(tone(1.0)), "max_slice_nums": -1}, "invalid_input"),
        ({"audio": b64(tone(1.0)), "max_slice_nums": [1, 2]}, "invalid_input"),  # no frames
    ],
)
def test_backend_full_duplex_fails_fast(server, inp, reason):
    async def go():
        async with Client.open(server.url) as c:
            await c.send({"type": "session.init", "payload": {"mode": "full_duplex"}})
            assert (await c.recv())["type"] == "session.created"
            await c.send({"type": "input.append", "input": inp})
            return await c.closed()

    assert run(go())["reason"] == reason
    wait_until(lambda: http(server.url + "/health")[1]["session_active"] is False)


def test_duplex_frames_are_sliced_as_asked(server, tmp_path):
    # a 960x540 frame: 2 x 1 slices with max_slice_nums 2; the duplex default is none (the
    # reference's 1); prepare sets the session's, a chunk its own
    big = base64.b64encode(
        ffmpeg_bytes(tmp_path, "f.jpg", "-f", "lavfi", "-i", "testsrc=size=960x540:rate=1", "-frames:v", "1")
    ).decode()
    plain = [({"type": "prepare"}, 1), (chunk(frame_base64_list=[big]), 1)]
    sliced = [({"type": "prepare", "max_slice_nums": 2}, 1), (chunk(frame_base64_list=[big]), 1)]
    sliced += [
        (chunk(frame_base64_list=[big], max_slice_nums=1), 1),
        (chunk(frame_base64_list=[big], max_slice_nums=[2]), 1),
    ]
    sliced += [(chunk(frame_base64_list=[big], max_slice_nums=12), 1), ({"type": "stop"}, 1)]
    r = run(demo_session(server.url, "/ws/duplex?session_id=adx_slices", plain + sliced))
    results = [m for m in r if m["type"] == "result"]
    assert [m["vision_slices"] for m in results] == [1, 3, 1, 3]
    assert [m["vision_tokens"] for m in results] == [64, 192, 64, 192]
    assert [m["error"] for m in r if m["type"] == "error"] == [
        "max_slice_nums must be an integer in 1..9 or a list with one per image (1), got 12"
    ]
    bad = run(
        demo_session(server.url, "/ws/duplex?session_id=adx_bad", [({"type": "prepare", "max_slice_nums": 0}, 1)])
    )
    assert bad[0]["type"] == "error" and "max_slice_nums" in bad[0]["error"]
    wait_until(lambda: http(server.url + "/health")[1]["session_active"] is False)


async def demo_session(url: str, path: str, steps):
    """Runs the demo duplex protocol: `steps` is a list of (message, number of replies)."""
    replies = []
    async with connect(url.replace("http://", "ws://") + path, max_size=None) as ws:
        for msg, n in steps:
            await ws.send(json.dumps(msg))
            for _ in range(n):
                replies.append(json.loads(await asyncio.wait_for(ws.recv(), TIMEOUT)))
    return replies


def chunk(**extra) -> dict:
    return {"type": "audio_chunk", "audio_base64": b64(tone(1.0)), **extra}


def test_worker_demo_duplex_protocol(server, tmp_path):
    frame = base64.b64encode(jpeg(tmp_path)).decode()
    steps = [({"type": "prepare", "system_prompt": "Be brief.", "config": {"length_penalty": 1.05}}, 1)]
    steps += [(chunk(), 1) for _ in range(3)] + [(chunk(frame_base64_list=[frame]), 1)]
    steps += [({"type": "video_frame", "frame": frame}, 1), ({"type": "audio_chunk"}, 1)]
    steps += [({"type": "pause", "timeout": 30}, 1), (chunk(), 1), ({"type": "resume"}, 1), (chunk(), 1)]
    steps += [({"type": "stop"}, 1)]
    r = run(demo_session(server.url, "/ws/duplex?session_id=adx_test", steps))
    assert r[0]["type"] == "prepared" and r[0]["prompt_length"] > 0
    results = [m for m in r if m["type"] == "result"]
    assert len(results) == 5 and [m["current_time"] for m in results] == [1, 2, 3, 4, 5]
    for m in results:
        assert pcm(m["audio_data"]).size == 24000 or m["end_of_turn"]
        assert {"is_listen", "text", "cost_all_ms", "wall_clock_ms", "kv_cache_length", "n_tts_tokens"} <= set(m)
    assert all(m["is_listen"] for m in results[:3]) and results[3]["vision_slices"] == 1
    errors = [m["error"] for m in r if m["type"] == "error"]
    assert errors == ["Unknown message type: video_frame", "Missing audio_base64", "Worker is paused"]
    assert [m["type"] for m in r[-4:]] == ["resumed", "result", "stopped"][-3:] or r[-1]["type"] == "stopped"
    assert {"paused", "resumed", "stopped"} <= {m["type"] for m in r}
    wait_until(lambda: http(server.url + "/health")[1]["session_active"] is False)


def test_diagnostics_and_interrupt_as_the_demo_answers_them(server):
    """client_diagnostic (the demo page's playback report) gets no answer and breaks nothing;
    interrupt (deprecated in the demo: force_listen replaced it) is answered with interrupted."""
    steps = [({"type": "prepare"}, 1), ({"type": "client_diagnostic", "event": "gap", "ts": 1.0}, 0)]
    steps += [({"type": "interrupt"}, 1), (chunk(), 1), ({"type": "stop"}, 1)]
    r = run(demo_session(server.url, "/ws/duplex?session_id=omni_diag", steps))
    assert [m["type"] for m in r] == ["prepared", "interrupted", "result", "stopped"]
    wait_until(lambda: http(server.url + "/health")[1]["session_active"] is False)


@pytest.mark.parametrize(
    "config,field",
    [
        ({"temperature": 5.0}, "temperature"),
        ({"tts_temperature": 3.0}, "tts_temperature"),
        ({"chunk_ms": 50}, "chunk_ms"),
        ({"length_penalty": 10}, "length_penalty"),
        ({"text_repetition_penalty": 0.5}, "text_repetition_penalty"),
        ({"top_p": 1.5}, "top_p"),
        ({"top_k": "many"}, "top_k"),
        ({"sample_rate": 8000}, "sample_rate"),
    ],
)
def test_duplex_config_out_of_the_demo_ranges_is_refused(server, config, field):
    r = run(demo_session(server.url, "/ws/duplex?session_id=omni_cfg", [({"type": "prepare", "config": config}, 1)]))
    assert r[0]["type"] == "error" and f"config.{field}" in r[0]["error"], r
    ok = run(
        demo_session(
            server.url,
            "/ws/duplex?session_id=omni_cfg2",
            [
                ({"type": "prepare", "config": {"temperature": 2.0, "chunk_ms": 100, "length_penalty": 0.1}}, 1),
                ({"type": "stop"}, 1),
            ],
        )
    )
    assert ok[0]["type"] == "prepared"
    wait_until(lambda: http(server.url + "/health")[1]["session_active"] is False)


def test_gateway_duplex_queues_and_relays(tiny_dir):
    with running_gateway(tiny_dir, workers=1, queue_update_s=0.2) as g:

        async def go():
            base = g.url.replace("http://", "ws://")
            async with connect(base + "/ws/duplex/adx_first", max_size=None) as a:
                assert json.loads(await a.recv())["type"] == "queue_done"
                await a.send(json.dumps({"type": "prepare"}))
                assert json.loads(await a.recv())["type"] == "prepared"
                async with connect(base + "/ws/duplex/omni_second", max_size=None) as b:
                    queued = json.loads(await asyncio.wait_for(b.recv(), TIMEOUT))
                    await a.send(json.dumps(chunk()))
                    result = json.loads(await asyncio.wait_for(a.recv(), TIMEOUT))
                    await a.send(json.dumps({"type": "stop"}))
                    assert json.loads(await a.recv())["type"] == "stopped"
                    while (m := json.loads(await asyncio.wait_for(b.recv(), TIMEOUT)))["type"] != "queue_done":
                        assert m["type"] == "queue_update"
                    await b.send(json.dumps({"type": "prepare"}))
                    second = json.loads(await asyncio.wait_for(b.recv(), TIMEOUT))
                    await b.send(json.dumps({"type": "stop"}))
                    await asyncio.wait_for(b.recv(), TIMEOUT)
            return queued, result, second

        queued, result, second = run(go())
        assert queued["type"] == "queued" and queued["position"] == 1 and "estimated_wait_s" in queued
        assert result["type"] == "result" and result["current_time"] == 1 and result["is_listen"]
        assert second["type"] == "prepared"
        wait_until(lambda: http(g.url + "/status")[1]["idle_workers"] == 1)


def test_gateway_gives_the_worker_on_only_after_a_vanished_duplex_client_freed_it(tiny_dir):
    # A client that drops its socket without `stop`: the relay ends the worker's session first,
    # so the next queued session is served, not refused as busy.
    with running_gateway(tiny_dir, workers=1, queue_update_s=0.2) as g:

        async def go():
            base = g.url.replace("http://", "ws://")
            a = await connect(base + "/ws/duplex/adx_leaver", max_size=None)
            assert json.loads(await a.recv())["type"] == "queue_done"
            await a.send(json.dumps({"type": "prepare"}))
            assert json.loads(await a.recv())["type"] == "prepared"
            async with connect(base + "/ws/duplex/adx_next", max_size=None) as b:
                assert json.loads(await asyncio.wait_for(b.recv(), TIMEOUT))["type"] == "queued"
                await a.close()  # no stop
                while (m := json.loads(await asyncio.wait_for(b.recv(), TIMEOUT)))["type"] != "queue_done":
                    assert m["type"] == "queue_update"
                await b.send(json.dumps({"type": "prepare"}))
                prepared = json.loads(await asyncio.wait_for(b.recv(), TIMEOUT))
                await b.send(json.dumps({"type": "stop"}))
                stopped = json.loads(await asyncio.wait_for(b.recv(), TIMEOUT))
            return prepared, stopped

        prepared, stopped = run(go())
        assert prepared["type"] == "prepared", prepared
        assert stopped["type"] == "stopped"
        wait_until(lambda: http(g.url + "/status")[1]["idle_workers"] == 1)
