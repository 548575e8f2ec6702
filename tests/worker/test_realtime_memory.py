"""A Realtime session's memory on a worker process of its own (the tiny set), measured by its RSS:
the attack that grew a worker by hundreds of MB (150 user text items of 1.25 MiB never answered,
then assistant items) is refused by the stated limits, what the limits let in stays a few MB, and
the RSS is back at its start once the session is closed; sessions of a minute of speech never
answered give back what they held, one after the other."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import subprocess
import sys
import time

import numpy as np
import psutil
import pytest
from server_client import http, wait_until
from speech import SR, pcm16_24k, say
from websockets.asyncio.client import connect

MIB = 2**20
# the stated limits (docs/serving.md): a text part, unanswered text, conversation entries
MAX_TEXT_BYTES, MAX_PENDING_TEXT_BYTES, MAX_TURNS_KEPT = 64 << 10, MIB, 64


def _item(role: str, text: str) -> str:
    kind = "input_text" if role == "user" else "output_text"
    content = [{"type": kind, "text": text}]
    item = {"type": "message", "role": role, "content": content}
    return json.dumps({"type": "conversation.item.create", "item": item})


async def _attack(port: int, rss) -> tuple[list[dict], float]:
    """The items, then every answer; (the events, the RSS with everything in)."""
    events: list[dict] = []
    part = MAX_TEXT_BYTES - 1024
    sends = [_item("user", chr(65 + i % 26) * int(1.25 * MIB)) for i in range(150)]  # each over the limit
    sends += [_item("assistant", chr(65 + i % 26) * part) for i in range(MAX_TURNS_KEPT)]
    sends += [_item("user", chr(97 + i % 26) * part) for i in range(MAX_PENDING_TEXT_BYTES // part + 4)]
    async with connect(f"ws://127.0.0.1:{port}/v1/realtime", max_size=None) as ws:
        events.append(json.loads(await asyncio.wait_for(ws.recv(), 30)))
        for text in sends:
            await ws.send(text)
            while True:  # each item: an error, or conversation.item.added and .done
                ev = json.loads(await asyncio.wait_for(ws.recv(), 60))
                events.append({k: ev.get(k) for k in ("type", "error")})
                if ev["type"] in ("error", "conversation.item.done"):
                    break
        held = rss()
    return events, held


@contextlib.contextmanager
def _worker(model_dir, cwd):
    """A `llama-omni worker` process on the tiny set, started outside the source tree and ready:
    (its port, a function giving its RSS in MB). Killed on leaving."""
    cmd = [sys.executable, "-m", "llama_omni_py", "worker", "--port", "0", "--device", "cpu"]
    cmd += ["--model-dir", str(model_dir), "--threads", "1"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, cwd=cwd)  # not the source tree
    try:
        port = json.loads(proc.stdout.readline())["port"]
        wait_until(lambda: http(f"http://127.0.0.1:{port}/health")[0] == 200, 120)
        worker = psutil.Process(proc.pid)
        yield port, lambda: worker.memory_info().rss / MIB
    finally:
        proc.kill()
        proc.wait()


def test_realtime_session_memory_is_bounded_and_given_back(tiny_dir, tmp_path):
    with _worker(tiny_dir, tmp_path) as (port, rss):
        start = rss()
        events, held = asyncio.run(asyncio.wait_for(_attack(port, rss), 180))
        time.sleep(1.0)  # the slot is emptied and its memory given back after the close
        end = wait_until(lambda: rss() if rss() < start + 4 else None, 20, 0.2)
    codes = [ev["error"]["code"] for ev in events if ev["type"] == "error"]
    assert codes[:150] == ["text_too_long"] * 150  # 1.25 MiB items: refused by the item limit
    assert codes[150:] and set(codes[150:]) == {"conversation_full"}  # past 1 MiB unanswered
    assert held - start < 40, (start, held)  # what was let in: the bounded conversation
    assert end < start + 4, (start, held, end)


SPEECH_S = 60.0  # of talk in each session
SPEED = 4.0  # times real time: the worker's threads take turns as they do with a live talker
SESSIONS = 3  # measured, after one that warms the worker up
GIVEN_BACK_MB = 5.0  # the RSS after a close is within this of the RSS before the session


def _continuous_speech(seconds: float) -> bytes:
    """Talk without a pause long enough to end a turn (the detector cuts it at its 29 s limit),
    over a little noise, as the Realtime API's 24 kHz PCM16."""
    sentence = say("The quick brown fox jumps over the lazy dog, and then it runs far away into the woods.")
    n = int(seconds * SR)
    talk = np.tile(sentence, n // sentence.size + 1)[:n]
    return pcm16_24k(talk + np.random.default_rng(0).normal(0.0, 0.005, n).astype(np.float32))


def _event(kind: str, **fields) -> str:
    return json.dumps({"type": kind, **fields})


async def _unanswered_speech(port: int, pcm: bytes) -> dict[str, int]:
    """One session: server VAD that creates no responses, the talk in 100 ms appends (as browsers
    send it) at SPEED times real time, a commit for the last utterance, then the close. The count
    of each event type the server sent."""
    counts: dict[str, int] = {}
    vad = {"type": "server_vad", "create_response": False, "silence_duration_ms": 500}
    unanswered = {"type": "realtime", "audio": {"input": {"turn_detection": vad}}}
    async with connect(f"ws://127.0.0.1:{port}/v1/realtime", max_size=None) as ws:
        await asyncio.wait_for(ws.recv(), 30)  # session.created
        await ws.send(_event("session.update", session=unanswered))
        step, t0 = 2400 * 2, time.monotonic()  # 100 ms of 24 kHz PCM16
        for i, at in enumerate(range(0, len(pcm), step)):
            await asyncio.sleep(max(0.0, t0 + i * 0.1 / SPEED - time.monotonic()))
            await ws.send(_event("input_audio_buffer.append", audio=base64.b64encode(pcm[at : at + step]).decode()))
        await ws.send(_event("input_audio_buffer.commit"))
        await ws.send(_event("session.update", session={"type": "realtime"}))  # answered after all of the above
        updates = 0
        while updates < 2:
            kind = json.loads(await asyncio.wait_for(ws.recv(), 120))["type"]
            counts[kind] = counts.get(kind, 0) + 1
            updates += kind == "session.updated"
    return counts


def _steady_after_close(port: int, rss) -> float:
    """The worker's RSS once its slot is free and the memory given back (on a worker thread, just
    after the slot is emptied): two readings 0.5 s apart within 0.25 MB."""
    wait_until(lambda: http(f"http://127.0.0.1:{port}/health")[1].get("slots_busy") == 0, 30, 0.1)
    last, deadline = rss(), time.monotonic() + 20
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = rss()
        if abs(now - last) < 0.25:
            return now
        last = now
    return last


@pytest.mark.slow
def test_sessions_of_unanswered_speech_give_their_memory_back(tiny_dir, tmp_path):
    pcm = _continuous_speech(SPEECH_S)
    rows = []  # (RSS before, while held, after the close), MB
    with _worker(tiny_dir, tmp_path) as (port, rss):
        start = rss()
        for _ in range(1 + SESSIONS):  # the first loads the audio encoder and sizes its buffers
            before = _steady_after_close(port, rss)
            counts = asyncio.run(asyncio.wait_for(_unanswered_speech(port, pcm), 180))
            held = rss()
            rows.append((before, held, _steady_after_close(port, rss)))
            # every utterance committed and kept unanswered (60 s is under the 120 s limit)
            assert counts.get("input_audio_buffer.committed") == 3 and "error" not in counts, counts
            assert "response.created" not in counts, counts
    shown = [tuple(round(x, 1) for x in row) for row in rows]
    assert rows[0][2] - start < 80, (start, shown)  # the warm-up: the encoder's buffers, once
    for before, held, after in rows[1:]:
        assert held - before > 2, shown  # the session did hold its audio
        assert after - before < GIVEN_BACK_MB, shown
    assert rows[-1][2] - rows[1][0] < GIVEN_BACK_MB, shown  # and nothing creeps up across them
