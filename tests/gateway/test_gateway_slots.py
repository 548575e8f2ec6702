"""The gateway schedules onto workers' session slots: two workers of two slots each (fake
workers: text streamed slowly, no model) take four chat sessions at once, spread least busy
first; the fifth queues until a slot frees; /health, /workers, /status and /metrics count the
slots per worker and in all."""

from __future__ import annotations

import asyncio
import json

from fake_worker import FakeWorkers, gateway_config
from server_client import chat_request, http, wait_until
from websockets.asyncio.client import connect

from llama_omni_py.server.gateway import BackgroundGateway


async def chat(url: str, text: str) -> list[dict]:
    """Every message of one /ws/chat turn, up to done (or error)."""
    msgs: list[dict] = []
    async with connect(url.replace("http://", "ws://") + "/ws/chat") as ws:
        await ws.send(json.dumps(chat_request(text)))
        while not msgs or msgs[-1]["type"] not in ("done", "error"):
            msgs.append(json.loads(await asyncio.wait_for(ws.recv(), 60)))
    return msgs


def busy_by_worker(url: str) -> list[int]:
    return [w["slots_busy"] for w in http(url + "/workers")[1]["workers"]]


def test_gateway_spreads_sessions_over_slots_and_queues_the_fifth():
    workers = FakeWorkers(2, "--slots", "2", "--deltas", "80", "--delay", "0.05")  # turns of 4 s
    with BackgroundGateway(gateway_config(), [workers]) as g:
        assert g.wait_ready(60) == "ready"
        wait_until(lambda: http(g.url + "/health")[1]["slots_total"] == 4)
        h = http(g.url + "/health")[1]
        assert (h["slots_busy"], h["slots_free"]) == (0, 4)
        assert [(w["slots"], w["slots_free"]) for w in h["workers"]] == [(2, 2), (2, 2)]

        async def go():
            loop_http = lambda path: asyncio.to_thread(http, g.url + path)  # noqa: E731
            first = [asyncio.create_task(chat(g.url, "one"))]
            await asyncio.to_thread(wait_until, lambda: sum(busy_by_worker(g.url)) == 1)
            first.append(asyncio.create_task(chat(g.url, "two")))
            await asyncio.to_thread(wait_until, lambda: sum(busy_by_worker(g.url)) == 2)
            spread = busy_by_worker(g.url)  # the second went to the other worker: least busy first
            rest = [asyncio.create_task(chat(g.url, t)) for t in ("three", "four")]
            await asyncio.to_thread(wait_until, lambda: sum(busy_by_worker(g.url)) == 4)
            fifth = asyncio.create_task(chat(g.url, "five"))
            await asyncio.to_thread(wait_until, lambda: http(g.url + "/health")[1]["queue_length"] == 1)
            full = (await loop_http("/health"))[1], (await loop_http("/workers"))[1], (await loop_http("/status"))[1]
            metrics = (await loop_http("/metrics"))[1]
            results = await asyncio.gather(*first, *rest, fifth)
            return spread, full, metrics, results

        spread, (health, listing, status), metrics, results = asyncio.run(go())
        assert spread == [1, 1]
        assert (health["slots_total"], health["slots_busy"], health["slots_free"]) == (4, 4, 0)
        assert [(w["slots_busy"], w["slots_free"]) for w in health["workers"]] == [(2, 0), (2, 0)]
        assert (listing["slots_total"], listing["slots_busy"], listing["slots_free"]) == (4, 4, 0)
        assert all(len(w["sessions"]) == 2 and w["status"] == "busy_chat" for w in listing["workers"])
        assert status["slots_busy"] == 4 and len(status["running_tasks"]) == 4 and status["queue_length"] == 1
        assert 'omni_slots{state="busy"} 4.0' in metrics
        assert 'omni_worker_slots{state="free",worker="worker_0"} 0.0' in metrics
        assert all(r[-1]["type"] == "done" for r in results), [r[-1] for r in results]  # nothing refused or lost
        assert [r[0]["type"] == "queued" for r in results] == [False] * 4 + [True]
        assert results[-1][0]["position"] == 1
        # each fake worker itself held two sessions at once
        for w in g.gateway.pool.workers.values():
            assert http(w.url + "/health")[1]["most_at_once"] == 2
        wait_until(lambda: http(g.url + "/health")[1]["slots_free"] == 4)
