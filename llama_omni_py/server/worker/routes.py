"""Plain HTTP on the worker's WebSocket port: /health, /v1/health, the close control
channel. websockets' handshake parser refuses a request body, so BodyConnection lifts a small
body (the close request's JSON) off the request before the parser sees it."""

from __future__ import annotations

import http
import json
import re

from websockets.asyncio.server import ServerConnection
from websockets.datastructures import Headers
from websockets.frames import CloseCode
from websockets.http11 import Response
from websockets.protocol import State

from .. import auth, jsonio

MAX_BODY = 64 << 10
MAX_HEAD = 16 << 10
_CONTENT_LENGTH = re.compile(rb"(?im)^content-length:[ \t]*(\d+)[ \t]*\r\n")
_CLOSE_PATH = re.compile(r"/sessions/([A-Za-z0-9_.-]{1,128})/close")


class BodyConnection(ServerConnection):
    """Feeds websockets the request head without its body (kept in ``request_body``). Also lets
    the session send one last text frame when the protocol layer fails the connection for an
    oversize message (``before_fail``: reason -> JSON text or None), ahead of the 1009 close."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._head = b""
        self._through = False
        self.request_body = b""
        self.before_fail = None
        fail = self.protocol.fail

        def fail_after_notice(code, reason=""):
            if code == CloseCode.MESSAGE_TOO_BIG and self.before_fail and self.protocol.state is State.OPEN:
                text = self.before_fail(reason)
                if text:
                    self.protocol.send_text(text.encode())
            fail(code, reason)

        self.protocol.fail = fail_after_notice

    def data_received(self, data: bytes) -> None:
        if self._through:
            return super().data_received(data)
        self._head += data
        end = self._head.find(b"\r\n\r\n")
        if end < 0:
            if len(self._head) > MAX_HEAD:  # let websockets reject it
                self._release(self._head)
            return
        head, rest = self._head[: end + 4], self._head[end + 4 :]
        m = _CONTENT_LENGTH.search(head)
        n = int(m.group(1)) if m else 0
        if 0 < n <= MAX_BODY:
            if len(rest) < n:
                return  # the body is still coming
            self.request_body, rest = rest[:n], rest[n:]
            head = head[: m.start()] + head[m.end() :]
        self._release(head + rest)

    def eof_received(self):
        if not self._through:
            self._release(self._head)
        return super().eof_received()

    def _release(self, data: bytes) -> None:
        self._through = True
        self._head = b""
        if data:
            super().data_received(data)


def _query_value(path: str, key: str) -> str | None:
    from urllib.parse import parse_qs, urlsplit

    values = parse_qs(urlsplit(path).query).get(key)
    return values[0][:128] if values else None


def respond(status: int, body: bytes, content_type: str) -> Response:
    headers = Headers(
        [
            ("Content-Type", content_type),
            ("Content-Length", str(len(body))),
            ("Cache-Control", "no-store"),
            ("Connection", "close"),
        ]
    )
    return Response(status, http.HTTPStatus(status).phrase, headers, body)


def json_response(status: int, obj: dict) -> Response:
    return respond(status, json.dumps(obj).encode(), "application/json")


async def process_request(server, connection, request) -> Response | None:
    """Routes plain HTTP; None lets the WebSocket handshake of /backend or /ws/duplex go ahead."""
    path = request.path.split("?", 1)[0]
    method = request.method
    if method == "GET" and path in ("/health", "/v1/health"):
        return json_response(*server.host.health())
    secret = server.config.secret
    if secret is not None and not auth.allowed(auth.bearer(request.headers), (secret,)):
        return json_response(401, {"error": "this worker serves its gateway only: the gateway's secret is required"})
    if path in ("/backend", "/ws/duplex", "/ws/half_duplex", "/v1/realtime"):
        return None if method == "GET" else json_response(405, {"error": "WebSocket upgrade (GET) only"})
    if path == "/half_duplex/stop" and method == "POST":
        sid = _query_value(request.path, "session_id")
        if sid is None or sid in server.half_duplex:
            n = server.stop_half_duplex(sid)
            message = f"stopped {n} running repl{'y' if n == 1 else 'ies'}" if n else "no reply is running"
            return json_response(200, {"success": n > 0, "message": message})
        return json_response(404, {"success": False, "message": f"no half-duplex session {sid}"})
    m = _CLOSE_PATH.fullmatch(path)
    if m and method == "POST":
        reason = None
        body = getattr(connection, "request_body", b"")
        if body:
            try:
                obj = jsonio.loads(body, "the body")
            except jsonio.BadJson as e:
                return json_response(400, {"error": str(e)})
            reason = obj.get("reason") if isinstance(obj.get("reason"), str) else None
        sid = m.group(1)
        if not await server.close_session(sid, reason):
            return json_response(404, {"ok": False, "session_id": sid, "error": "no active session with this id"})
        return json_response(200, {"ok": True, "session_id": sid, "closed": True})
    return json_response(404, {"error": f"no route for {method} {path}"})
