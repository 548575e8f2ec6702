"""The OpenAI Realtime API at WS /v1/realtime, driven by the official ``openai`` client's realtime
connection through the gateway (tiny set): spoken questions streamed as 24 kHz PCM16 in 100 ms
chunks at real time, server VAD ending each turn, audio deltas that decode, a second question
cutting the first reply (barge-in), manual commit and text items, errors that leave the session
open, and API keys."""

import asyncio
import base64
import time

import numpy as np
import pytest
from openai import AsyncOpenAI
from server_client import ENGINE, REPLY, http, running_gateway, wait_until
from speech import conversation, pcm16_24k, say

from llama_omni_py.config import EngineConfig, ReplyConfig

KEY = "sk-realtime-test-key-0123456789"
CHUNK = 2400  # 100 ms of 24 kHz PCM16 samples
LONG = {
    "engine": EngineConfig(**{**ENGINE, "prompt_cache": True}),
    "reply": ReplyConfig(**{**REPLY, "max_new_tokens": 400}),
}


@pytest.fixture(scope="module")
def gw(tiny_dir):
    with running_gateway(tiny_dir, workers=1, api_keys=(KEY,), worker_overrides=LONG) as g:
        yield g


def idle(gw) -> bool:  # /health needs no key
    return http(gw.url + "/health")[1]["workers"][0]["status"] == "idle"


def client(gw, key=KEY) -> AsyncOpenAI:
    return AsyncOpenAI(base_url=gw.url + "/v1", api_key=key)


class Events:
    """Every server event of a connection, read in the background."""

    def __init__(self, conn):
        self.conn, self.all, self.new = conn, [], asyncio.Event()
        self.task = asyncio.create_task(self._read())

    async def _read(self):
        while True:
            ev = await self.conn.recv()
            self.all.append(ev)
            self.new.set()

    async def wait(self, pred, timeout=90.0, start=0):
        deadline = time.monotonic() + timeout
        while True:
            for ev in self.all[start:]:
                if pred(ev):
                    return ev
            self.new.clear()
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"timed out; got {[e.type for e in self.all]}")
            await asyncio.wait_for(self.new.wait(), left)

    def of(self, kind):
        return [e for e in self.all if e.type == kind]


MANUAL_TEXT = {"type": "realtime", "audio": {"input": {"turn_detection": None}}, "output_modalities": ["text"]}


async def started(conn, session: dict | None = None) -> Events:
    """The connection's events once it is open (and ``session`` applied)."""
    ev = Events(conn)
    await ev.wait(lambda e: e.type == "session.created")
    if session is not None:
        await conn.session.update(session=session)
        await ev.wait(lambda e: e.type == "session.updated")
    return ev


async def stream(conn, pcm: bytes, realtime=True):
    """Appends the audio in 100 ms chunks, at real time."""
    t0 = time.monotonic()
    for i, at in enumerate(range(0, len(pcm), CHUNK * 2)):
        await conn.input_audio_buffer.append(audio=base64.b64encode(pcm[at : at + CHUNK * 2]).decode())
        if realtime:
            await asyncio.sleep(max(0.0, t0 + (i + 1) * 0.1 - time.monotonic()))


@pytest.fixture
def realtime_pace(monkeypatch):
    """Replies come at the pace of their audio (a device at real-time factor 1): the tiny set
    otherwise answers in a fraction of a second, before a user could talk over it."""
    from llama_omni_py.session import OmniSession

    stream = OmniSession.stream

    def paced(self, *args, **kwargs):
        for chunk in stream(self, *args, **kwargs):
            time.sleep(chunk.audio.size / 24000)
            yield chunk

    monkeypatch.setattr(OmniSession, "stream", paced)


def test_spoken_questions_and_barge_in_with_the_official_client(gw, realtime_pace):
    # The user asks, pauses 0.7 s (the turn ends after 0.5 s of silence) and talks again while
    # the reply runs.
    talk, spans = conversation(["Please explain how a rainbow forms.", "Tell me about cats instead"], pause_s=0.7)
    talk = np.concatenate([talk, np.zeros(16000, np.float32)])

    async def go():
        async with client(gw).realtime.connect(model="minicpm-o-4.5") as conn:
            ev = Events(conn)
            created = await ev.wait(lambda e: e.type == "session.created")
            await conn.session.update(
                session={
                    "type": "realtime",
                    "instructions": "Answer briefly.",
                    "max_output_tokens": 30,
                    "audio": {"input": {"turn_detection": {"type": "server_vad", "silence_duration_ms": 500}}},
                }
            )
            updated = await ev.wait(lambda e: e.type == "session.updated")
            t0 = time.monotonic()
            await stream(conn, pcm16_24k(talk))
            streamed_s = time.monotonic() - t0
            second_done = await ev.wait(lambda e: e.type == "response.done" and e.response.status == "completed")
            ev.task.cancel()
            return created, updated, streamed_s, ev, second_done

    created, updated, streamed_s, ev, second_done = asyncio.run(go())
    assert created.session.type == "realtime" and created.session.model == "minicpm-o-4.5"
    assert updated.session.instructions == "Answer briefly."
    assert updated.session.audio.input.turn_detection.silence_duration_ms == 500
    assert streamed_s >= talk.size / 16000 * 0.95  # it really went at real time
    kinds = [e.type for e in ev.all]
    # two questions: each heard once, committed, answered
    assert kinds.count("input_audio_buffer.speech_started") == 2 and kinds.count("input_audio_buffer.committed") == 2
    started = ev.of("input_audio_buffer.speech_started")[0]
    stopped = ev.of("input_audio_buffer.speech_stopped")[0]
    assert abs(started.audio_start_ms / 1000 - spans[0].start_s) < 0.45  # prefix padding 300 ms
    assert stopped.item_id == started.item_id and stopped.audio_end_ms > started.audio_start_ms
    # the first reply was cut by the second question: cancelled, turn_detected, with where it was cut
    dones = ev.of("response.done")
    assert [d.response.status for d in dones] == ["cancelled", "completed"], " ".join(
        e.type.split(".")[-1] for e in ev.all if "delta" not in e.type
    )
    assert dones[0].response.status_details.reason == "turn_detected"
    truncated = ev.of("conversation.item.truncated")
    cut_item = dones[0].response.output[0]
    assert truncated and truncated[0].item_id == cut_item.id
    first_audio = [
        e for e in ev.all if e.type == "response.output_audio.delta" and e.response_id == dones[0].response.id
    ]
    pcm = b"".join(base64.b64decode(e.delta) for e in first_audio)
    assert len(pcm) % 2 == 0 and round(len(pcm) / 2 / 24) == truncated[0].audio_end_ms  # audio sent = cut point
    assert cut_item.status == "incomplete"
    # the second reply: audio and its transcript, and the conversation's earlier turn from the KV cache
    r2 = second_done.response
    transcript = "".join(
        e.delta for e in ev.all if e.type == "response.output_audio_transcript.delta" and e.response_id == r2.id
    )
    assert r2.output[0].content[0].transcript == transcript and r2.usage.output_tokens > 0
    deltas = [e for e in ev.of("response.output_audio.delta") if e.response_id == r2.id]
    pcm2 = b"".join(base64.b64decode(e.delta) for e in deltas)
    samples = np.frombuffer(pcm2, "<i2")  # the audio deltas decode: 24 kHz PCM16, not silence
    # (N speech codes give (N + 3) x 960 samples: docs/token2wav-streaming.md)
    assert samples.size == (r2.usage.output_token_details.audio_tokens + 3) * 960 and np.abs(samples).max() > 0
    assert r2.usage.input_token_details.cached_tokens > 0
    order = [e.type for e in ev.all if getattr(e, "response_id", None) == r2.id or e.type == "response.created"]
    assert "response.output_audio.delta" in order and "response.output_audio.done" in order
    wait_until(lambda: idle(gw))


def test_manual_commit_text_items_and_errors(gw):
    question = pcm16_24k(say("What time is it?"))

    async def go():
        async with client(gw).realtime.connect(model="minicpm-o-4.5") as conn:
            ev = await started(conn, MANUAL_TEXT)
            await conn.input_audio_buffer.commit()  # nothing appended
            empty = await ev.wait(lambda e: e.type == "error")
            await conn.response.cancel()  # nothing running
            not_active = await ev.wait(lambda e: e.type == "error" and e is not empty)
            loud = {"type": "server_vad", "threshold": 7}
            await conn.session.update(session={"type": "realtime", "audio": {"input": {"turn_detection": loud}}})
            bad = await ev.wait(lambda e: e.type == "error" and e not in (empty, not_active))
            await stream(conn, question, realtime=False)
            await conn.input_audio_buffer.commit()
            committed = await ev.wait(lambda e: e.type == "input_audio_buffer.committed")
            await conn.response.create()
            audio_turn = await ev.wait(lambda e: e.type == "response.done")
            await conn.conversation.item.create(
                item={"type": "message", "role": "user", "content": [{"type": "input_text", "text": "And tomorrow?"}]}
            )
            await conn.response.create(response={"max_output_tokens": 8})
            text_turn = await ev.wait(lambda e: e.type == "response.done" and e is not audio_turn)
            ev.task.cancel()
            return empty, not_active, bad, committed, audio_turn, text_turn, ev

    empty, not_active, bad, committed, audio_turn, text_turn, ev = asyncio.run(go())
    assert empty.error.code == "input_audio_buffer_commit_empty"
    assert not_active.error.code == "response_cancel_not_active"
    assert bad.error.type == "invalid_request_error" and "threshold" in bad.error.message
    assert committed.item_id and not ev.of("input_audio_buffer.speech_started")  # no VAD: manual turns
    assert audio_turn.response.status == "completed" and audio_turn.response.output_modalities == ["text"]
    assert not ev.of("response.output_audio.delta")  # text only, as the session asked
    texts = ev.of("response.output_text.delta")
    assert texts and text_turn.response.status == "completed"
    assert text_turn.response.usage.output_tokens <= 8
    assert text_turn.response.output[0].content[0].text == "".join(
        e.delta for e in texts if e.response_id == text_turn.response.id
    )
    wait_until(lambda: idle(gw))


def test_api_key_is_required(gw):
    async def go():
        async with client(gw, key="sk-wrong-key-000000000000").realtime.connect(model="m") as conn:
            await conn.recv()

    with pytest.raises(Exception) as info:
        asyncio.run(go())
    assert "403" in str(info.value) or "1008" in str(info.value)


def test_full_duplex_through_the_same_endpoint(gw):
    """mode=full_duplex: the model itself decides when to speak; each time it does, a response."""
    audio = np.concatenate([say("Hello, can you hear me? Tell me something."), np.zeros(16000 * 6, np.float32)])
    vad = {"audio": {"input": {"turn_detection": {"type": "server_vad"}}}}

    async def go():
        conn_cm = client(gw).realtime.connect(model="minicpm-o-4.5", extra_query={"mode": "full_duplex"})
        async with conn_cm as conn:
            ev = Events(conn)
            created = await ev.wait(lambda e: e.type == "session.created")
            await conn.input_audio_buffer.commit()  # not in full duplex: the model takes turns
            errors = lambda n: ev.wait(lambda e: e.type == "error" and len(ev.of("error")) >= n)  # noqa: E731
            await errors(1)
            await conn.session.update(session={"type": "realtime", "output_modalities": ["text"], **vad})
            await errors(2)
            await conn.send({"type": "session.update", "session": {"type": "realtime", "audio": "pcm"}})
            await errors(3)
            await conn.session.update(session={"type": "realtime", "instructions": "Be brief."})
            updated = await ev.wait(lambda e: e.type == "session.updated")
            mic = asyncio.create_task(stream(conn, pcm16_24k(audio)))  # at real time: a second per unit
            await ev.wait(lambda e: e.type == "response.created")
            await conn.response.cancel()  # barge-in: the next second listens
            done = await ev.wait(lambda e: e.type == "response.done")
            await conn.session.update(session={"type": "realtime", "instructions": "Be long."})
            await errors(4)
            mic.cancel()
            ev.task.cancel()
            return created, updated, done, ev

    created, updated, done, ev = asyncio.run(go())
    assert created.session.audio.input.turn_detection is None
    refused = [e.error for e in ev.of("error")]
    assert refused[0].code == "invalid_event" and "full duplex" in refused[0].message
    assert "turn_detection" in refused[1].message and "session.audio" in refused[2].message
    assert "before the first audio" in refused[3].message
    # the refused updates changed nothing; the accepted one reopened the session with its prompt
    assert updated.session.instructions == "Be brief." and updated.session.output_modalities == ["audio"]
    assert updated.session.audio.input.turn_detection is None
    deltas = [e for e in ev.of("response.output_audio.delta") if e.response_id == done.response.id]
    assert deltas and all(len(base64.b64decode(e.delta)) % 2 == 0 for e in deltas)
    assert done.response.status == "cancelled" and done.response.status_details.reason == "client_cancelled"
    (cut,) = [e for e in ev.of("conversation.item.truncated") if e.item_id == done.response.output[0].id]
    assert cut.audio_end_ms == round(sum(len(base64.b64decode(e.delta)) // 2 for e in deltas) / 24)
    assert not ev.of("input_audio_buffer.speech_started")  # no server VAD in full duplex
    wait_until(lambda: idle(gw))


def test_fields_not_served_are_refused_by_name_and_the_session_goes_on(gw):
    refused = [
        ({"tools": [{"type": "function", "name": "f", "parameters": {}}]}, "session.tools", "unsupported_parameter"),
        ({"audio": {"input": {"transcription": {"model": "whisper-1"}}}}, "session.audio.input.transcription", None),
        ({"audio": {"input": {"noise_reduction": {"type": "far_field"}}}}, "session.audio.input.noise_reduction", None),
        ({"audio": {"output": {"speed": 1.5}}}, "session.audio.output.speed", None),
        ({"tool_choice": "required"}, "session.tool_choice", None),
        ({"unheard_of": 1}, "session.unheard_of", "unknown_parameter"),
        ({"turn_detection": None}, "session.turn_detection", "unknown_parameter"),  # the beta-era shape
        ({"input_audio_format": "pcm16"}, "session.input_audio_format", "unknown_parameter"),
        ({"modalities": ["text"]}, "session.modalities", "unknown_parameter"),
    ]

    async def go():
        async with client(gw).realtime.connect(model="m") as conn:
            ev = Events(conn)
            await ev.wait(lambda e: e.type == "session.created")
            for n, (fields, _, _) in enumerate(refused, 1):
                update = {"type": "realtime", "instructions": f"changed {n}", **fields}
                await conn.send({"type": "session.update", "session": update, "event_id": f"ev_{n}"})
                await ev.wait(lambda e, n=n: len(ev.of("error")) >= n)
            await conn.send({"type": "response.create", "response": {"conversation": "none"}})
            await ev.wait(lambda e: len(ev.of("error")) > len(refused))
            ok = {"type": "realtime", "tools": [], "tool_choice": "auto", "truncation": "auto", "instructions": "Hi."}
            await conn.send({"type": "session.update", "session": ok})
            updated = await ev.wait(lambda e: e.type == "session.updated")
            ev.task.cancel()
            return ev.of("error"), updated

    errors, updated = asyncio.run(go())
    for e, (_, param, code) in zip(errors, refused):
        assert e.error.param == param and param in e.error.message, e.error
        assert code is None or e.error.code == code
    assert [e.error.event_id for e in errors[: len(refused)]] == [f"ev_{n}" for n in range(1, len(refused) + 1)]
    assert "session.audio.input.turn_detection" in errors[6].error.message  # where the GA session has it
    assert errors[-1].error.param == "response.conversation"
    assert updated.session.instructions == "Hi."  # nothing refused changed the session
    wait_until(lambda: idle(gw))


def test_an_empty_conversation_answers_and_max_output_tokens_is_clamped(gw):
    async def go():
        async with client(gw).realtime.connect(model="m") as conn:
            ev = await started(conn, {**MANUAL_TEXT, "instructions": "Greet the user."})
            await conn.response.create()  # the assistant speaks first: nothing to answer but the instructions
            greeting = await ev.wait(lambda e: e.type == "response.done")
            await conn.response.create(response={"max_output_tokens": 4096, "instructions": "Say more."})
            longest = await ev.wait(lambda e: e.type == "response.done" and e is not greeting)
            ev.task.cancel()
            return greeting, longest, ev

    greeting, longest, ev = asyncio.run(go())
    assert not ev.of("error"), [e.error for e in ev.of("error")]
    assert greeting.response.status == "completed" and greeting.response.usage.output_tokens > 0
    # 4096 is in the API's range but over this server's cap (the worker's 400): clamped, not refused
    assert longest.response.status == "completed", longest.response.status_details
    assert 0 < longest.response.usage.output_tokens <= LONG["reply"].max_new_tokens
    assert longest.response.usage.input_token_details.cached_tokens > 0  # the greeting is in the conversation
    wait_until(lambda: idle(gw))


def test_one_append_may_carry_more_than_15_seconds(gw):
    question = pcm16_24k(np.concatenate([say("What time is it?"), np.zeros(16000 * 18, np.float32)]))

    async def go():
        async with client(gw).realtime.connect(model="m") as conn:
            ev = await started(conn, MANUAL_TEXT)
            await conn.input_audio_buffer.append(audio=base64.b64encode(question).decode())  # about 20 s at once
            await conn.input_audio_buffer.commit()
            committed = await ev.wait(lambda e: e.type in ("input_audio_buffer.committed", "error"))
            ev.task.cancel()
            return committed

    assert asyncio.run(go()).type == "input_audio_buffer.committed"
    wait_until(lambda: idle(gw))


def test_unanswered_input_is_bounded_and_refused_once_full(gw):
    from llama_omni_py.server.realtime_events import MAX_TEXT_BYTES
    from llama_omni_py.server.worker.realtime.connection import MAX_PENDING_PARTS, MAX_PENDING_TEXT_BYTES

    def item(text):
        return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}

    big = "x" * (MAX_TEXT_BYTES - 16)
    fits = MAX_PENDING_TEXT_BYTES // len(big)

    async def go():
        async with client(gw).realtime.connect(model="m") as conn:
            ev = Events(conn)
            await ev.wait(lambda e: e.type == "session.created")
            await conn.conversation.item.create(item=item("y" * (MAX_TEXT_BYTES + 1)))  # one part too long
            too_long = await ev.wait(lambda e: e.type == "error")
            for _ in range(fits + 1):
                await conn.conversation.item.create(item=item(big))
            full = await ev.wait(lambda e: e.type == "error" and e is not too_long)
            added = len(ev.of("conversation.item.done"))
            await conn.response.create(response={"max_output_tokens": 4})
            await ev.wait(lambda e: e.type == "response.done")  # it takes the unanswered input
            for _ in range(MAX_PENDING_PARTS + 1):
                await conn.conversation.item.create(item=item("hello"))
            parts = await ev.wait(lambda e: e.type == "error" and e not in (too_long, full))
            ev.task.cancel()
            return too_long, full, added, parts

    too_long, full, added, parts = asyncio.run(go())
    assert too_long.error.code == "text_too_long" and too_long.error.param == "item.content[0].text"
    assert full.error.code == "conversation_full" and "MiB of text" in full.error.message and added == fits
    assert parts.error.code == "conversation_full" and f"{MAX_PENDING_PARTS} inputs" in parts.error.message
    wait_until(lambda: idle(gw))


def test_continuous_speech_without_responses_is_refused_past_the_audio_limit(gw):
    from llama_omni_py.server.worker.realtime.connection import MAX_PENDING_AUDIO_S, MAX_PENDING_PARTS

    sentence = say("The quick brown fox jumps over the lazy dog, and then it runs far away into the woods.")
    one = np.concatenate([sentence, np.zeros(16000, np.float32)])
    talk = np.tile(one, int(MAX_PENDING_AUDIO_S / (sentence.size / 16000)) + 3)

    async def go():
        async with client(gw).realtime.connect(model="m") as conn:
            vad = {"type": "server_vad", "create_response": False, "silence_duration_ms": 500}
            ev = await started(conn, {"type": "realtime", "audio": {"input": {"turn_detection": vad}}})
            pcm = pcm16_24k(talk)
            for at in range(0, len(pcm), 24000 * 2 * 10):  # 10 s per append, as fast as it goes
                await conn.input_audio_buffer.append(audio=base64.b64encode(pcm[at : at + 24000 * 2 * 10]).decode())
            await ev.wait(lambda e: e.type == "error", timeout=180)
            ev.task.cancel()
            return ev

    ev = asyncio.run(go())
    committed = {e.item_id for e in ev.of("input_audio_buffer.committed")}
    spans = {e.item_id: e.audio_start_ms for e in ev.of("input_audio_buffer.speech_started")}
    stopped = [e for e in ev.of("input_audio_buffer.speech_stopped") if e.item_id in committed]
    held_s = sum(e.audio_end_ms - spans[e.item_id] for e in stopped) / 1000
    assert len(committed) < MAX_PENDING_PARTS and MAX_PENDING_AUDIO_S - 8 < held_s <= MAX_PENDING_AUDIO_S, held_s
    error = ev.of("error")[0].error
    assert error.code == "conversation_full" and f"{MAX_PENDING_AUDIO_S:g} s of audio" in error.message
    assert not ev.of("response.created")
    wait_until(lambda: idle(gw))


def test_the_workers_max_new_tokens_caps_every_response(tiny_dir):
    # --max-new-tokens 20 on the worker: "inf" and 100 both give at most 20 tokens
    with running_gateway(tiny_dir, workers=1, worker_overrides={**LONG, "max_new_tokens": 20}) as capped:

        async def go():
            async with AsyncOpenAI(base_url=capped.url + "/v1", api_key="none").realtime.connect(model="m") as conn:
                ev = await started(conn, {"type": "realtime", "output_modalities": ["text"]})
                dones = []
                for limit in ("inf", 100):
                    hello = [{"type": "input_text", "text": "Tell me a long story."}]
                    await conn.conversation.item.create(item={"type": "message", "role": "user", "content": hello})
                    await conn.response.create(response={"max_output_tokens": limit})
                    dones.append(await ev.wait(lambda e: e.type == "response.done" and e not in dones))
                ev.task.cancel()
                return dones

        dones = asyncio.run(go())
    assert [d.response.status for d in dones] == ["completed", "completed"]
    assert all(0 < d.response.usage.output_tokens <= 20 for d in dones), [d.response.usage for d in dones]
