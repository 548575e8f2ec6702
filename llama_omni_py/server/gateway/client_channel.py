"""The one writer of a client's WebSocket. Messages wait in a buffer bounded in bytes; a client
that lets it overflow, or does not take one message within ``send_timeout_s``, is a slow reader:
the channel fails (``failed`` is set) and the socket is closed with a diagnostic, so the
request behind it can give its worker back."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import deque

_CLOSE = object()


class SlowReader(Exception):
    pass


class ClientChannel:
    def __init__(self, ws, max_bytes: int, send_timeout_s: float):
        self.ws, self.max_bytes, self.send_timeout_s = ws, max_bytes, send_timeout_s
        self.buffer: deque = deque()
        self.buffered = 0
        self.ready = asyncio.Event()
        self.failed: str | None = None  # why the channel gave up (slow reader, disconnect)
        self.gone = asyncio.Event()  # set when nothing more can reach the client
        self._closing = False
        self._task = asyncio.create_task(self._write())

    def put(self, msg: dict) -> None:
        """Queues a message; raises SlowReader when the client is not keeping up."""
        if self.failed:
            raise SlowReader(self.failed)
        text = json.dumps(msg)
        if self.buffered + len(text) > self.max_bytes:
            self._fail(f"slow reader: more than {self.max_bytes} bytes waiting to be read")
            raise SlowReader(self.failed)
        self.buffer.append(text)
        self.buffered += len(text)
        self.ready.set()

    async def send(self, msg: dict) -> None:
        self.put(msg)

    def close(self, code: int = 1000, reason: str = "") -> None:
        """Closes after what is buffered (or at once when the channel failed); idempotent."""
        if self._closing:
            return
        self._closing = True
        self.buffer.append((_CLOSE, code, reason))
        self.ready.set()

    async def closed(self, timeout: float) -> None:
        with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
            await asyncio.wait_for(asyncio.shield(self._task), timeout)
        self._task.cancel()

    def _fail(self, why: str) -> None:
        if self.failed is None:
            self.failed = why
            self._closing = True
            self.buffer.clear()
            self.buffered = 0
            self.buffer.append((_CLOSE, 1008, why))
            self.ready.set()

    async def _write(self) -> None:
        try:
            while True:
                await self.ready.wait()
                while self.buffer:
                    item = self.buffer.popleft()
                    if isinstance(item, tuple):
                        with contextlib.suppress(Exception):
                            await asyncio.wait_for(self.ws.close(item[1], item[2][:120]), self.send_timeout_s)
                        return
                    self.buffered -= len(item)
                    try:
                        await asyncio.wait_for(self.ws.send_text(item), self.send_timeout_s)
                    except asyncio.TimeoutError:
                        self._fail(f"slow reader: a message waited more than {self.send_timeout_s:g} s to be read")
                    except Exception:  # noqa: BLE001 -- disconnected
                        self.failed = self.failed or "client disconnected"
                        return
                self.ready.clear()
        finally:
            self.gone.set()
