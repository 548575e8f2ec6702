"""What the gateway takes from any client over HTTP and WebSocket, on stand-in workers: every
route's body is limited (413 before the body is read, whether its length is declared or not),
a client that hangs up mid-body costs no traceback, and text frames that are not UTF-8 cost one
rate-limited log line instead of a traceback each."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time

import pytest
from fake_worker import FakeWorkers, gateway_config
from gateway_checks import uvicorn_log
from server_client import http
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from llama_omni_py.server.gateway import BackgroundGateway

MAX_BODY = 1 << 20  # the test gateway's max_body_bytes


@pytest.fixture(scope="module")
def gw():
    with BackgroundGateway(gateway_config(max_body_bytes=MAX_BODY), [FakeWorkers(1, "--voice")]) as g:
        assert g.wait_ready(60) == "ready"
        yield g


def raw_http(port: int, head: str, body: bytes = b"", hang_up: bool = False, timeout: float = 10.0) -> bytes:
    """Sends a request head (and part of a body) on a plain socket; the answer (the server closes)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(head.encode() + body)
        if hang_up:
            return b""
        answer = b""
        while chunk := s.recv(4096):
            answer += chunk
        return answer


ROUTES = [
    ("POST", "/api/half_duplex/stop", 64 << 10),
    ("POST", "/api/chat", MAX_BODY),
    ("POST", "/v1/chat/completions", MAX_BODY),
    ("DELETE", "/api/queue/q_1", 64 << 10),
    ("GET", "/status", 64 << 10),
    ("GET", "/v1/models", 64 << 10),
]


@pytest.mark.parametrize("method,path,limit", ROUTES)
def test_every_route_refuses_a_declared_body_over_its_limit_before_reading_it(gw, method, path, limit):
    head = f"{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {200 << 20}\r\n\r\n"
    t0 = time.monotonic()
    answer = raw_http(gw.port, head)  # 200 MiB announced, nothing of it sent
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert time.monotonic() - t0 < 5
    assert (b'"request_too_large"' in answer) is path.startswith("/v1/")
    head = f"{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {limit + 1}\r\n\r\n"
    assert raw_http(gw.port, head).startswith(b"HTTP/1.1 413")


def test_a_body_without_a_length_is_cut_at_the_limit(gw):
    head = "POST /api/half_duplex/stop HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
    chunk = b"%x\r\n%s\r\n" % (32 << 10, b" " * (32 << 10))
    with socket.create_connection(("127.0.0.1", gw.port), timeout=10) as s:
        s.sendall(head.encode())
        answer = b""
        for _ in range(64):  # up to 2 MiB; the route takes 64 KiB
            try:
                s.sendall(chunk)
            except OSError:
                break
            s.settimeout(0.05)
            with contextlib.suppress(TimeoutError, socket.timeout):
                answer += s.recv(4096)
            if answer:
                break
        s.settimeout(10)
        answer = answer or s.recv(4096)
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]


def test_a_client_hanging_up_mid_body_costs_no_traceback(gw):
    with uvicorn_log() as records:
        for path in ("/api/half_duplex/stop", "/api/chat", "/v1/chat/completions"):
            head = f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n"
            raw_http(gw.port, head, b'{"session_id": ', hang_up=True)
        time.sleep(0.5)
        assert http(gw.url + "/health")[0] == 200
    assert not [r for r in records if r.exc_info or "Exception in ASGI" in r.getMessage()], records


def test_text_frames_that_are_not_utf8_log_one_line(gw):
    async def bad_frame():
        async with connect(gw.url.replace("http://", "ws://") + "/ws/chat") as ws:
            await ws.send(b"\xff\xfe not utf-8", text=True)
            with contextlib.suppress(ConnectionClosed):
                await asyncio.wait_for(ws.recv(), 10)
            return ws.close_code

    with uvicorn_log() as records:
        codes = [asyncio.run(bad_frame()) for _ in range(20)]
    assert codes == [1007] * 20
    assert not [r for r in records if r.exc_info], "a traceback was logged"
    lines = [r.getMessage() for r in records if "UTF-8" in r.getMessage()]
    assert len(lines) == 1 and "not UTF-8" in lines[0], lines
