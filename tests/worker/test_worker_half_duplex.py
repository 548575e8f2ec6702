"""Half-duplex voice over the network (tiny set, espeak-ng speech): the demo's protocol on a
worker's /ws/half_duplex and through the gateway's queue -- VAD events, streamed replies,
turn_done, the KV cache kept across turns, the cold-start guard, barge-in, stop over WebSocket and
HTTP, the silence timeout and the demo's ranges."""

import asyncio
import base64
import json
import time

import numpy as np
import pytest
from server_client import ENGINE, REPLY, TIMEOUT, http, pcm, running_gateway, running_server, wait_until
from speech import SR, conversation
from websockets.asyncio.client import connect

from llama_omni_py.config import EngineConfig, ReplyConfig

# the prompt cache on, as deployed: it is what keeps the conversation across turns
# the worker of the voice tests: prompt cache on, short replies
VOICE_WORKER = {
    "engine": EngineConfig(**{**ENGINE, "prompt_cache": True}),
    "reply": ReplyConfig(**{**REPLY, "max_new_tokens": 24}),
}
FAST_VAD = {"min_silence_duration_ms": 500}


def b64(x) -> str:
    return base64.b64encode(np.asarray(x, "<f4").tobytes()).decode()


def run(coro):
    return asyncio.run(coro)


@pytest.fixture(scope="module")
def talk():
    return conversation(["What is the capital of France?", "How many people live there?"], pause_s=1.2)


@pytest.fixture(scope="module")
def server(tiny_dir):
    with running_server(tiny_dir, **VOICE_WORKER) as s:
        yield s


class Session:
    """A half-duplex client: sends audio in 0.5 s chunks, collects the server's messages."""

    def __init__(self, ws):
        self.ws, self.got = ws, []

    async def send(self, msg):
        await self.ws.send(json.dumps(msg))

    async def recv(self, timeout=TIMEOUT) -> dict:
        m = json.loads(await asyncio.wait_for(self.ws.recv(), timeout))
        self.got.append(m)
        return m

    async def until(self, kind, timeout=TIMEOUT) -> dict:
        while (m := await self.recv(timeout))["type"] != kind:
            assert m["type"] != "error", m
        return m

    async def prepare(self, **config) -> dict:
        await self.send({"type": "prepare", "system_prompt": "Be brief.", "config": {"vad": FAST_VAD, **config}})
        m = await self.until("prepared")
        self.got = []
        await asyncio.sleep(0.55)  # past the cold-start guard
        return m

    async def speak(self, audio, realtime: float = 0.0):
        for i in range(0, audio.size, SR // 2):
            await self.send({"type": "audio_chunk", "audio_base64": b64(audio[i : i + SR // 2])})
            if realtime:
                await asyncio.sleep(0.5 / realtime)


def _turns(msgs):
    return [m for m in msgs if m["type"] == "turn_done"]


def test_two_turns_on_a_worker_keep_the_conversation(server, talk):
    audio, spans = talk

    async def go():
        async with connect(server.url.replace("http://", "ws://") + "/ws/half_duplex?session_id=hd1") as ws:
            s = Session(ws)
            prepared = await s.prepare(session={"timeout_s": 60})
            cut = int((spans[0].end_s + 0.9) * SR) // (SR // 2) * (SR // 2)
            await s.speak(audio[:cut])  # the question, then the demo page's silence while it plays the reply
            await s.until("turn_done")
            await s.speak(audio[cut:])
            await s.until("turn_done")
            await s.send({"type": "stop"})
            await s.until("stopped")
            return prepared, s.got

    prepared, msgs = run(go())
    assert prepared == {"type": "prepared", "session_id": "hd1", "timeout_s": 60.0}
    kinds = [m["type"] for m in msgs]
    # per turn: speaking, silence, generating, chunks, turn_done -- in that order
    first = kinds[: kinds.index("turn_done") + 1]
    assert first[:3] == ["vad_state", "vad_state", "generating"] and set(first[3:-1]) == {"chunk"}
    assert [m["speaking"] for m in msgs if m["type"] == "vad_state"] == [True, False, True, False]
    gen = [m for m in msgs if m["type"] == "generating"]
    for g, span in zip(gen, spans):  # the utterance (with its 30 ms pads), not the silence wait
        assert abs(g["speech_duration_ms"] / 1000 - (span.end_s - span.start_s)) < 0.25
    chunks = [m for m in msgs if m["type"] == "chunk"]
    assert all(m["audio_sample_rate"] == 24000 and set(m) >= {"chunk_index", "text_delta", "is_final"} for m in chunks)
    assert sum(pcm(m["audio_data"]).size for m in chunks if m["audio_data"]) > 0
    t1, t2 = _turns(msgs)
    assert (t1["turn_index"], t2["turn_index"]) == (1, 2) and not t1["interrupted"]
    texts = "".join(m["text_delta"] or "" for m in msgs[: kinds.index("turn_done")] if m["type"] == "chunk")
    assert t1["text"] == texts
    # turn 2 re-used turn 1 (system prompt, its utterance) from the KV cache
    assert t2["prompt_cached"] > t1["prompt_cached"] + 10
    wait_until(lambda: http(server.url + "/health")[1]["session_active"] is False)


def test_cold_start_guard_drops_the_first_half_second(server, talk):
    audio, spans = talk
    first = audio[: int((spans[0].end_s + 0.8) * SR)]

    async def go():
        async with connect(server.url.replace("http://", "ws://") + "/ws/half_duplex?session_id=hd2") as ws:
            s = Session(ws)
            await s.send({"type": "prepare", "config": {"vad": FAST_VAD}})
            await s.until("prepared")
            t0 = time.monotonic()
            await s.speak(first)  # all of it inside the guard: the VAD never hears it
            assert time.monotonic() - t0 < 0.4
            await s.send({"type": "no_such_type"})
            after = await s.recv()
            await asyncio.sleep(0.5)
            await s.speak(first)
            heard = await s.recv()
            await s.send({"type": "stop"})
            await s.until("stopped")
            return after, heard

    after, heard = run(go())
    assert after == {"type": "error", "error": "Unknown type: no_such_type"}  # nothing came before it
    assert heard == {"type": "vad_state", "speaking": True}


def test_barge_in_and_http_stop_cut_a_reply(tiny_dir, talk):
    audio, spans = talk
    long_replies = ReplyConfig(**{**REPLY, "max_new_tokens": 400, "max_audio_per_chunk": 25})
    with running_gateway(tiny_dir, workers=1, worker_overrides={"reply": long_replies}) as g:
        base = g.url.replace("http://", "ws://")

        async def go():
            async with connect(base + "/ws/half_duplex/hd_barge", max_size=None) as ws:
                s = Session(ws)
                assert (await s.recv())["type"] == "queue_done"
                await s.prepare()
                one = audio[: int((spans[0].end_s + 0.8) * SR)]
                await s.speak(one)
                await s.until("chunk")  # the reply is running: the user speaks again
                await s.speak(audio[int(spans[1].start_s * SR) - SR // 4 :])
                cut = await s.until("turn_done")
                await s.until("generating")
                await s.until("chunk")  # the second reply runs: the stop button
                status, answer = await asyncio.to_thread(
                    http, g.url + "/api/half_duplex/stop", "POST", json.dumps({"session_id": "hd_barge"}).encode()
                )
                stopped = await s.until("turn_done")
                await s.send({"type": "stop"})
                await s.until("stopped")
                return cut, (status, answer), stopped

        cut, (status, answer), stopped = run(go())
        assert cut["interrupted"] and cut["turn_index"] == 1
        assert status == 200 and answer["success"], answer
        assert stopped["interrupted"] and stopped["turn_index"] == 2
        code, body = http(g.url + "/api/half_duplex/stop", "POST", json.dumps({"session_id": "nobody"}).encode())
        assert code == 404 and body["success"] is False
        code, body = http(g.url + "/api/half_duplex/stop", "POST", b"{}")
        assert code == 400
        wait_until(lambda: http(g.url + "/status")[1]["idle_workers"] == 1)


def test_gateway_queues_a_second_session_and_times_out_a_silent_one(tiny_dir):
    with running_gateway(tiny_dir, workers=1, queue_update_s=0.2) as g:
        base = g.url.replace("http://", "ws://")

        async def go():
            async with connect(base + "/ws/half_duplex/hd_a") as a:
                assert json.loads(await a.recv())["type"] == "queue_done"
                sa = Session(a)
                await sa.send({"type": "prepare", "config": {"session": {"timeout_s": 1.5}}})
                await sa.until("prepared")
                async with connect(base + "/ws/half_duplex/hd_b") as b:
                    sb = Session(b)
                    queued = await sb.recv()
                    t0 = time.monotonic()
                    timeout = await sa.until("timeout", 10)  # a says nothing
                    waited = time.monotonic() - t0
                    while (await sb.recv())["type"] != "queue_done":
                        pass
                    await sb.send({"type": "prepare"})
                    prepared = await sb.until("prepared")
                    await sb.send({"type": "stop"})
                    await sb.until("stopped")
                    return queued, timeout, waited, prepared, sb.got

        queued, timeout, waited, prepared, got = run(go())
        assert queued["type"] == "queued" and queued["position"] == 1
        assert timeout["type"] == "timeout" and 1.5 <= timeout["elapsed_s"] <= 3.0 and waited < 4
        assert "queue_update" in [m["type"] for m in got] and prepared["timeout_s"] == 180.0
        wait_until(lambda: http(g.url + "/status")[1]["idle_workers"] == 1)


@pytest.mark.parametrize(
    "config,field",
    [
        ({"vad": {"threshold": 1.5}}, "config.vad.threshold"),
        ({"vad": {"min_silence_duration_ms": "long"}}, "config.vad.min_silence_duration_ms"),
        ({"vad": {"speech_pad_ms": -5}}, "config.vad.speech_pad_ms"),
        ({"generation": {"max_new_tokens": 0}}, "config.generation.max_new_tokens"),
        ({"generation": {"length_penalty": 9}}, "config.generation.length_penalty"),
        ({"generation": {"temperature": 3}}, "config.generation.temperature"),
        ({"tts": {"enabled": "yes"}}, "config.tts.enabled"),
        ({"session": {"timeout_s": 0}}, "config.session.timeout_s"),
        ({"vad": []}, "config.vad"),
    ],
)
def test_config_out_of_range_is_an_error_and_the_session_goes_on(server, config, field):
    async def go():
        async with connect(server.url.replace("http://", "ws://") + "/ws/half_duplex?session_id=hd_cfg") as ws:
            s = Session(ws)
            await s.send({"type": "audio_chunk", "audio_base64": b64(np.zeros(800))})
            not_prepared = await s.recv()
            await s.send({"type": "prepare", "config": config})
            bad = await s.recv()
            await s.send({"type": "prepare", "system_content": [{"type": "text", "text": "Be brief."}]})
            ok = await s.recv()
            await s.send({"type": "audio_chunk"})
            missing = await s.recv()
            await s.send({"type": "stop"})
            await s.until("stopped")
            return not_prepared, bad, ok, missing

    not_prepared, bad, ok, missing = run(go())
    assert not_prepared == {"type": "error", "error": "Not prepared yet"}
    assert bad["type"] == "error" and bad["error"].startswith(field), bad
    assert ok["type"] == "prepared"
    assert missing == {"type": "error", "error": "Missing audio_base64"}
    wait_until(lambda: http(server.url + "/health")[1]["session_active"] is False)


def test_prepare_skips_an_audio_item_without_data_as_the_demo_does():
    # The demo's page sends its system_content with {"type": "audio", "data": null} until a voice
    # is loaded; the demo's worker skips the item, and so does ours.
    from llama_omni_py.server.worker.half_duplex.protocol import parse_prepare

    items = [
        {"type": "text", "text": "Speak naturally."},
        {"type": "audio", "data": None, "name": "", "duration": 0},
        {"type": "text", "text": "You are a helpful assistant."},
    ]
    start = parse_prepare({"type": "prepare", "system_content": items})
    assert start.ref_audio is None and start.system_prompt == "Speak naturally.\nYou are a helpful assistant."
    voice = b64(np.zeros(SR, np.float32) + 0.01)
    start = parse_prepare({"type": "prepare", "system_content": [items[1], {**items[1], "data": voice}, items[2]]})
    assert (
        start.ref_audio is not None
        and start.ref_audio.size == SR
        and start.system_prompt == "You are a helpful assistant."
    )
