"""The gateway's side of one worker: ``/health`` and one ``/backend`` session (init, turns,
close over HTTP), as the backend protocol prescribes (docs/server-protocol.md)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import urllib.error
import urllib.request

from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI

from ..auth import authorization_header

HTTP_TIMEOUT_S = 10.0


class WorkerUnavailable(Exception):
    """The worker could not be reached (connection refused, closed, timed out)."""


class SessionEnded(Exception):
    """The backend closed the session: ``reason`` and ``message`` from its session.closed."""

    def __init__(self, reason: str, message: str | None):
        super().__init__(f"{reason}: {message}" if message else reason)
        self.reason, self.message = reason, message


def http_json(
    url: str, method: str = "GET", body: dict | None = None, timeout: float = HTTP_TIMEOUT_S, secret: str | None = None
):
    """(status, JSON body) of a small HTTP request; raises WorkerUnavailable when unreachable."""
    data = None if body is None else json.dumps(body).encode()
    headers = {"Content-Type": "application/json", **authorization_header(secret)}
    req = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read() or b"{}")
    except urllib.error.HTTPError as e:
        try:
            return e.code, json.loads(e.read() or b"{}")
        except ValueError:
            return e.code, {}
    except (OSError, ValueError) as e:
        raise WorkerUnavailable(f"{url}: {e}") from None


async def health(base_url: str, timeout: float = 5.0) -> tuple[int, dict]:
    return await asyncio.to_thread(http_json, base_url + "/health", "GET", None, timeout)


class BackendSession:
    """One turn_based session on a worker's ``/backend``. ``events()`` yields the downlink events
    of one turn up to response.done; a session.closed raises SessionEnded."""

    def __init__(self, base_url: str, open_timeout: float = 10.0, secret: str | None = None):
        self.base_url, self.secret = base_url, secret
        self.ws_url = base_url.replace("http://", "ws://", 1) + "/backend"
        self.open_timeout = open_timeout
        self.ws = None
        self.session_id: str | None = None
        self.closed = False

    async def open(self, payload: dict) -> dict:
        try:
            self.ws = await connect(
                self.ws_url,
                max_size=None,
                open_timeout=self.open_timeout,
                compression=None,
                ping_interval=None,
                additional_headers=authorization_header(self.secret),
            )
        except (OSError, asyncio.TimeoutError, InvalidHandshake, InvalidURI) as e:
            raise WorkerUnavailable(f"{self.ws_url}: {e}") from None
        await self.send({"type": "session.init", "payload": {"mode": "turn_based", **payload}})
        ev = await self.recv()
        if ev["type"] != "session.created":
            raise self._ended(ev)
        self.session_id = ev["session_id"]
        return ev

    async def send(self, msg: dict) -> None:
        try:
            await self.ws.send(json.dumps(msg))
        except ConnectionClosed:
            raise WorkerUnavailable("the worker closed the connection") from None

    async def recv(self) -> dict:
        try:
            return json.loads(await self.ws.recv())
        except ConnectionClosed as e:
            raise WorkerUnavailable(f"the worker closed the connection ({e})") from None

    @staticmethod
    def _ended(ev: dict) -> SessionEnded:
        if ev.get("type") == "session.closed":
            return SessionEnded(ev.get("reason") or "backend_error", (ev.get("diagnostic") or {}).get("message"))
        return SessionEnded("backend_error", f"unexpected event {ev.get('type')!r}")

    async def turn(self, inp: dict):
        """Pushes one input and yields its events; the last is response.done."""
        await self.send({"type": "input.append", "input": inp})
        while True:
            ev = await self.recv()
            if ev["type"] == "response.output.delta":
                yield ev
            elif ev["type"] == "response.done":
                yield ev
                return
            else:
                raise self._ended(ev)

    async def close(self, reason: str = "client_closed") -> None:
        """Closes over the control channel (the worker answers once its slot is free), then the
        socket. Idempotent; never raises."""
        if self.closed:
            return
        self.closed = True
        if self.session_id is not None:
            with contextlib.suppress(WorkerUnavailable):
                await asyncio.to_thread(
                    http_json,
                    f"{self.base_url}/sessions/{self.session_id}/close",
                    "POST",
                    {"reason": reason},
                    HTTP_TIMEOUT_S,
                    self.secret,
                )
        if self.ws is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.ws.close(), 5.0)
