"""Helpers of the server tests: a server on 127.0.0.1 over the tiny set, a small protocol
client (the real websockets client) and media made with ffmpeg."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import subprocess
import urllib.error
import urllib.request

import numpy as np
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from llama_omni_py.config import EngineConfig, ReplyConfig, Token2WavConfig

TIMEOUT = 60.0
# the workers' EngineConfig and ReplyConfig fields; prompt_cache off: the tests compare replies to
# the same request bit for bit
ENGINE = dict(threads=1, token2wav=Token2WavConfig(threads=1), prompt_cache=False)
REPLY = dict(max_new_tokens=20, max_audio_per_chunk=25)


@contextlib.contextmanager
def running_server(model_dir, host=None, wait=True, **overrides):
    from llama_omni_py.server import BackgroundServer, WorkerConfig  # the worker: the compiled core

    engine = overrides.pop("engine", EngineConfig(**ENGINE))
    reply = overrides.pop("reply", ReplyConfig(**REPLY))
    cfg = WorkerConfig(port=0, model_dir=str(model_dir), device="cpu", engine=engine, reply=reply, **overrides)
    with BackgroundServer(cfg, host) as s:
        if wait:
            assert s.wait_ready() == "ready", s.server.host.error
        yield s


def http(url: str, method: str = "GET", body: bytes | None = None) -> tuple[int, dict | str]:
    req = urllib.request.Request(url, data=body, method=method)
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT) as r:
            status, raw, ctype = r.status, r.read(), r.headers.get("Content-Type", "")
    except urllib.error.HTTPError as e:
        status, raw, ctype = e.code, e.read(), e.headers.get("Content-Type", "")
    return status, json.loads(raw) if ctype.startswith("application/json") else raw.decode()


def b64(samples) -> str:
    return base64.b64encode(np.asarray(samples, "<f4").tobytes()).decode()


def tone(seconds: float = 1.0, rate: int = 16000) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    return (0.3 * np.sin(2 * np.pi * 330 * t)).astype(np.float32)


def pcm(b64_text: str) -> np.ndarray:
    return np.frombuffer(base64.b64decode(b64_text), "<f4")


def ffmpeg_bytes(tmp_path, name: str, *args: str) -> bytes:
    out = tmp_path / name
    subprocess.run(["ffmpeg", "-y", "-hide_banner", "-loglevel", "error", *args, str(out)], check=True, timeout=60)
    return out.read_bytes()


def jpeg(tmp_path) -> bytes:
    return ffmpeg_bytes(tmp_path, "img.jpg", "-f", "lavfi", "-i", "testsrc=size=64x48:rate=1", "-frames:v", "1")


def mp4(tmp_path) -> bytes:
    return ffmpeg_bytes(
        tmp_path,
        "clip.mp4",
        "-f",
        "lavfi",
        "-i",
        "testsrc=size=64x48:rate=5:duration=1.2",
        "-f",
        "lavfi",
        "-i",
        "sine=frequency=440:duration=1.2",
        "-c:v",
        "mpeg4",
        "-c:a",
        "aac",
        "-shortest",
        "-movflags",
        "+faststart",
    )


def user(*items, text: str | None = None) -> dict:
    content = list(items) + ([{"type": "text", "text": text}] if text is not None else [])
    return {"role": "user", "content": content}


def push(messages, streaming=True, **extra) -> dict:
    return {"type": "input.append", "input": {"messages": messages, "streaming": streaming, **extra}}


class Client:
    """One protocol session; every call has a timeout so a hanging server fails the test."""

    def __init__(self, ws):
        self.ws = ws
        self.session_id = None

    @classmethod
    @contextlib.asynccontextmanager
    async def open(cls, base_url: str, **kw):
        async with connect(base_url.replace("http://", "ws://") + "/backend", max_size=None, **kw) as ws:
            yield cls(ws)

    async def send(self, msg) -> None:
        await self.ws.send(msg if isinstance(msg, (str, bytes)) else json.dumps(msg))

    async def recv(self) -> dict:
        return json.loads(await asyncio.wait_for(self.ws.recv(), TIMEOUT))

    async def init(self, **payload) -> dict:
        await self.send({"type": "session.init", "payload": {"mode": "turn_based", **payload}})
        ev = await self.recv()
        assert ev["type"] == "session.created", ev
        self.session_id = ev["session_id"]
        return ev

    async def turn(self, messages, streaming=True, **extra) -> list[dict]:
        """Events up to and including response.done."""
        await self.send(push(messages, streaming, **extra))
        events = []
        while True:
            ev = await self.recv()
            events.append(ev)
            assert ev["type"] in ("response.output.delta", "response.done"), ev
            if ev["type"] == "response.done":
                return events

    async def closed(self) -> dict:
        """The session.closed event; then the socket must close."""
        ev = await self.recv()
        assert ev["type"] == "session.closed", ev
        await self.assert_socket_closed()
        return ev

    async def assert_socket_closed(self) -> None:
        try:
            extra = await asyncio.wait_for(self.ws.recv(), TIMEOUT)
        except ConnectionClosed:
            return
        raise AssertionError(f"expected the socket to close, got {extra!r}")


async def one_turn(base_url: str, text: str = "hello there", **extra) -> list[dict]:
    async with Client.open(base_url) as c:
        await c.init()
        return await c.turn([user(text=text)], **extra)


@contextlib.contextmanager
def running_gateway(model_dir, workers: int = 2, worker_overrides=None, **overrides):
    """`workers` in-process workers (each a BackgroundServer) behind a gateway on 127.0.0.1."""
    from llama_omni_py.server.gateway import BackgroundGateway, GatewayConfig
    from llama_omni_py.server.gateway.workers import StaticWorkers

    with contextlib.ExitStack() as stack:
        servers = [stack.enter_context(running_server(model_dir, **(worker_overrides or {}))) for _ in range(workers)]
        cfg = GatewayConfig(port=0, health_interval_s=0.25, **overrides)
        g = stack.enter_context(BackgroundGateway(cfg, [StaticWorkers([s.url for s in servers])]))
        assert g.wait_ready(60) == "ready"
        g.workers = servers
        yield g


SPEAK = {"enabled": True}  # the demo chat API speaks only when asked


def chat_request(text: str = "hello there", **extra) -> dict:
    return {"messages": [{"role": "user", "content": text}], "streaming": True, **extra}


async def ws_chat(base_url: str, request, **kw) -> list[dict]:
    """Every message of one /ws/chat request until the server closes the socket."""
    async with connect(base_url.replace("http://", "ws://") + "/ws/chat", max_size=None, **kw) as ws:
        await ws.send(request if isinstance(request, str) else json.dumps(request))
        out = []
        with contextlib.suppress(ConnectionClosed):
            while True:
                out.append(json.loads(await asyncio.wait_for(ws.recv(), TIMEOUT)))
        return out


def slow_llm(monkeypatch, server, pause: float = 0.4) -> None:
    """Makes an in-process worker's LLM take `pause` s per 10-token chunk."""
    import time

    llm = server.server.host.engine.slot_stages(0).llm
    real = llm.chunks

    def paced(*a, **k):
        for chunk in real(*a, **k):
            time.sleep(pause)
            yield chunk

    monkeypatch.setattr(llm, "chunks", paced)


def wait_until(predicate, timeout: float = 20.0, step: float = 0.05):
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    raise AssertionError(f"timed out after {timeout} s waiting for {predicate}")
