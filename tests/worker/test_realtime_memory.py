"""A Realtime session's memory on a worker process of its own (the tiny set), measured by its RSS:
the attack that grew a worker by hundreds of MB (150 user text items of 1.25 MiB never answered,
then assistant items) is refused by the stated limits, what the limits let in stays a few MB, and
the RSS is back at its start once the session is closed."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time

import psutil
from server_client import http, wait_until
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


def test_realtime_session_memory_is_bounded_and_given_back(tiny_dir, tmp_path):
    cmd = [sys.executable, "-m", "llama_omni_py", "worker", "--port", "0", "--device", "cpu"]
    cmd += ["--model-dir", str(tiny_dir), "--threads", "1"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, cwd=tmp_path)  # not the source tree
    try:
        port = json.loads(proc.stdout.readline())["port"]
        wait_until(lambda: http(f"http://127.0.0.1:{port}/health")[0] == 200, 120)
        worker = psutil.Process(proc.pid)

        def rss() -> float:
            return worker.memory_info().rss / MIB

        start = rss()
        events, held = asyncio.run(asyncio.wait_for(_attack(port, rss), 180))
        time.sleep(1.0)  # the slot is emptied and its memory given back after the close
        end = wait_until(lambda: rss() if rss() < start + 4 else None, 20, 0.2)
    finally:
        proc.kill()
        proc.wait()
    codes = [ev["error"]["code"] for ev in events if ev["type"] == "error"]
    assert codes[:150] == ["text_too_long"] * 150  # 1.25 MiB items: refused by the item limit
    assert codes[150:] and set(codes[150:]) == {"conversation_full"}  # past 1 MiB unanswered
    assert held - start < 40, (start, held)  # what was let in: the bounded conversation
    assert end < start + 4, (start, held, end)
