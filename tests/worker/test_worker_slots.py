"""A worker with several session slots (``llama-omni worker --slots N``, N = 2 and 4 here): each
admitted connection holds a slot of its own, N sessions at once get the replies they get alone
(``batch_invariant``: bit for bit), the connection after the last slot is refused as busy, a
dropped connection frees its slot, and /health counts the slots."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time

import pytest
from server_client import ENGINE, TIMEOUT, Client, http, pcm, running_server, tone, user, wait_until
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from llama_omni_py.config import EngineConfig
from llama_omni_py.errors import ConfigError
from llama_omni_py.server import WorkerConfig

# every LLM and TTS step alone: a slot's reply is bit for bit a lone session's
EXACT = EngineConfig(**ENGINE, batch_invariant=True)
PROMPTS = ("hello there", "tell me about the sea", "what is a slot?", "count to three")


def run(coro):
    return asyncio.run(coro)


@pytest.fixture(scope="module", params=[2, 4])
def slotted(request, tiny_dir):
    with running_server(tiny_dir, slots=request.param, engine=EXACT) as s:
        yield s


def health(server) -> dict:
    status, body = http(server.url + "/health")
    assert status == 200, body
    return body


def reply(events: list[dict]) -> tuple[str, bytes]:
    """A turn's text and its audio, bytes to compare exactly."""
    done = events[-1]
    assert done["type"] == "response.done", done
    audio = b"".join(pcm(e["audio"]).tobytes() for e in events if e.get("kind") == "audio")
    return done["text"], audio


async def timed_turn(c: Client, text: str) -> tuple[list[dict], float, float]:
    t0 = time.monotonic()
    events = await c.turn([user(text=text)])
    return events, t0, time.monotonic()


def test_slot_counts_are_validated():
    with pytest.raises(ConfigError, match="slots"):
        WorkerConfig(slots=0)
    from llama_omni_py.server.worker_options import WorkerOptions

    with pytest.raises(ConfigError, match="slots"):
        WorkerOptions(slots=0)
    assert WorkerOptions(slots=3, batch_invariant=True).to_argv() == ["--slots", "3", "--batch-invariant"]
    cfg = WorkerOptions(slots=3, batch_invariant=True).server_config("127.0.0.1", 0, "cpu")
    assert cfg.slots == 3 and cfg.engine.batch_invariant is True


def test_sessions_at_once_get_their_lone_replies(slotted):
    s, n = slotted, slotted.server.config.slots
    h = health(s)
    assert (h["slots"], h["slots_busy"], h["slots_free"], h["session_active"]) == (n, 0, n, False)
    prompts = PROMPTS[:n]

    async def alone(text):
        async with Client.open(s.url) as c:
            await c.init()
            return await c.turn([user(text=text)])

    lone = [reply(run(alone(p))) for p in prompts]

    async def together():
        async with contextlib.AsyncExitStack() as stack:
            clients = [await stack.enter_async_context(Client.open(s.url)) for _ in prompts]
            for c in clients:
                await c.init()
            h = await asyncio.to_thread(health, s)
            assert len({c.session_id for c in clients}) == n
            return h, await asyncio.gather(*(timed_turn(c, p) for c, p in zip(clients, prompts)))

    h, turns = run(together())
    assert (h["slots_busy"], h["slots_free"], h["session_active"]) == (n, 0, True)
    assert max(t0 for _, t0, _ in turns) < min(t1 for _, _, t1 in turns), "the turns ran at the same time"
    assert [reply(events) for events, _, _ in turns] == lone
    assert all(audio for _, audio in lone) and len(set(lone)) == n  # all spoke, differently: the test can fail
    wait_until(lambda: health(s)["slots_free"] == n)


def test_the_connection_after_the_last_slot_is_refused_as_busy(slotted):
    s, n = slotted, slotted.server.config.slots

    async def go():
        async with contextlib.AsyncExitStack() as stack:
            a, *others = [await stack.enter_async_context(Client.open(s.url)) for _ in range(n)]
            await a.init()
            for b in others:
                await b.init(mode="full_duplex")  # any mode holds a slot
            async with Client.open(s.url) as c:
                await c.send({"type": "session.init", "payload": {"mode": "turn_based"}})
                refused = await c.recv()
                with pytest.raises(ConnectionClosed) as closed:
                    await asyncio.wait_for(c.ws.recv(), TIMEOUT)
            async with connect(s.url.replace("http://", "ws://") + "/ws/duplex", max_size=None) as ws:
                demo = json.loads(await asyncio.wait_for(ws.recv(), TIMEOUT))
                with pytest.raises(ConnectionClosed) as demo_closed:
                    await asyncio.wait_for(ws.recv(), TIMEOUT)
            done = await a.turn([user(text="still here?")])  # the held slots still serve
            return refused, closed.value, demo, demo_closed.value, done

    refused, closed, demo, demo_closed, done = run(go())
    assert refused["type"] == "session.closed" and refused["reason"] == "session_busy"
    assert f"all {n} session slots are in use" in refused["diagnostic"]["message"]
    assert closed.rcvd.code == 1013 and demo_closed.rcvd.code == 1013
    assert demo["type"] == "error" and f"{n} session slots" in demo["error"]
    assert done[-1]["type"] == "response.done"
    wait_until(lambda: health(s)["slots_free"] == n)


def test_a_dropped_connection_frees_its_slot(slotted):
    s, n = slotted, slotted.server.config.slots

    async def go():
        async with contextlib.AsyncExitStack() as stack:
            for _ in range(n - 1):
                await (await stack.enter_async_context(Client.open(s.url))).init()
            dropped = await connect(s.url.replace("http://", "ws://") + "/backend", max_size=None)
            await dropped.send(json.dumps({"type": "session.init", "payload": {"mode": "turn_based"}}))
            assert json.loads(await asyncio.wait_for(dropped.recv(), TIMEOUT))["type"] == "session.created"
            assert (await asyncio.to_thread(health, s))["slots_free"] == 0
            dropped.transport.abort()  # gone without a close frame
            await asyncio.to_thread(wait_until, lambda: health(s)["slots_free"] == 1)
            async with Client.open(s.url) as c:  # the freed slot serves the next session
                await c.init()
                return await c.turn([user(text="hello again")])

    assert run(go())[-1]["type"] == "response.done"
    wait_until(lambda: health(s)["slots_free"] == n)


async def duplex_units(url: str, n: int) -> list[dict]:
    """A demo full-duplex session of ``n`` one-second units: each unit's result."""
    async with connect(url.replace("http://", "ws://") + "/ws/duplex", max_size=None) as ws:

        async def ask(msg: dict) -> dict:
            await ws.send(json.dumps(msg))
            return json.loads(await asyncio.wait_for(ws.recv(), TIMEOUT))

        from server_client import b64

        assert (await ask({"type": "prepare", "system_prompt": "Be brief."}))["type"] == "prepared"
        results = [await ask({"type": "audio_chunk", "audio_base64": b64(tone(1.0))}) for _ in range(n)]
        assert (await ask({"type": "stop"}))["type"] == "stopped"
        return results


def test_duplex_sessions_at_once_get_their_lone_results(slotted):
    s, n = slotted, slotted.server.config.slots
    keys = ("is_listen", "text", "audio_data", "end_of_turn", "current_time")
    lone = [{k: r.get(k) for k in keys} for r in run(duplex_units(s.url, 5))]

    async def together():
        return await asyncio.gather(*(duplex_units(s.url, 5) for _ in range(n)))

    for results in run(together()):
        assert [{k: r.get(k) for k in keys} for r in results] == lone
    assert any(not r["is_listen"] for r in lone), "random weights talk after the forced units"
    wait_until(lambda: health(s)["slots_free"] == n)
