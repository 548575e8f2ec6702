"""One WebSocket connection on /backend: the protocol state machine
(uninitialized -> active -> closed), a reader, a turn worker and the socket's single writer.

Fail-fast: any violation or engine error stops the session, sends a best-effort session.closed
{reason, diagnostic.message} and closes the socket; the server keeps serving."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from collections import deque

import numpy as np
from websockets.exceptions import ConnectionClosed

from ....content import Video
from ....errors import InvalidArgumentError, MediaError, OmniError, ProtocolError
from ...limits import RateLimitedLog
from ...pcm import pcm_b64
from ..duplex import protocol as D
from . import protocol as P
from .full_duplex import BackendDuplex

log = logging.getLogger(__name__)
refusals = RateLimitedLog(log)  # a crowd retrying a busy engine must not flood the log
REFUSALS = ("session_busy", "engine_loading")

_CLOSE = object()  # writer sentinel: close the socket after what is queued
OUT_QUEUE = 64  # events waiting for the writer; a slow client slows the turn down
BACKEND = "llama-omni-py"
# WebSocket close codes: normal, policy (protocol violation), server error.
CODE = {
    "client_closed": 1000,
    "idle_timeout": 1000,
    "server_shutdown": 1001,
    "engine_error": 1011,
    "omni_init_failed": 1011,
    "engine_loading": 1013,
    "session_busy": 1013,
    "message_too_big": 1009,
    "client_too_slow": 1008,
}


class Connection:
    def __init__(self, ws, server):
        self.ws, self.server, self.host, self.cfg = ws, server, server.host, server.config
        self.id: str | None = None
        self.state = "uninitialized"
        self.init: P.InitRequest | None = None
        self.out: asyncio.Queue = asyncio.Queue(OUT_QUEUE)
        self.pending: deque = deque()
        self.worker: asyncio.Task | None = None
        self.turns = 0
        self.started = time.perf_counter()
        self.finished = asyncio.Event()  # resources released (the HTTP close waits for it)
        self.too_big = False  # the WebSocket layer refused an oversize message
        self.duplex: BackendDuplex | None = None  # a full_duplex session
        self.session = None  # the OmniSession of the engine slot this connection holds
        if hasattr(ws, "before_fail"):
            ws.before_fail = self._message_too_big

    # -- lifecycle -------------------------------------------------------------------------
    async def run(self) -> None:
        writer = asyncio.create_task(self._write())
        try:
            await self._read()
        except ConnectionClosed:
            if self.too_big:  # session.closed went out ahead of the 1009 close frame
                await self.terminate("message_too_big", self._too_big_text(), notify=False)
            await self.terminate("client_disconnected", notify=False)
        except Exception as e:  # noqa: BLE001 -- a bug here must not take the server down
            log.exception("session %s failed", self.id)
            await self.terminate("internal_error", f"{type(e).__name__}: {e}")
        finally:
            await self.terminate("client_disconnected", notify=False)  # no-op when already closed
            with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(writer, self.cfg.init_timeout_s)
            writer.cancel()

    async def terminate(
        self, reason: str, message: str | None = None, *, notify: bool = True, code: int | None = None
    ) -> None:
        """Stops the session (idempotent): cancels the turn, frees its slot, then best-effort
        session.closed and the socket close (``code``, else the reason's) go out through the writer."""
        if self.state == "closed":
            await self.finished.wait()
            return
        self.state = "closed"
        if message and reason in REFUSALS:
            refusals(reason, "session refused: %s: %s", reason, message)
        elif message:
            log.warning("session %s closed: %s: %s", self.id, reason, message)
        worker, me = self.worker, asyncio.current_task()
        if worker is not None and worker is not me and not worker.done():
            worker.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await worker  # returns once the engine stopped (within a chunk)
        self.pending.clear()
        if self.duplex is not None:  # before the slot is free for the next session
            with contextlib.suppress(Exception):
                await self.duplex.close()
        if self.id is not None:
            self.server.sessions.pop(self.id, None)
            await self.host.release(self.id)
        while not self.out.empty():  # no model content after a fail-fast
            self.out.get_nowait()
        if notify:
            self.out.put_nowait(P.closed(self.id, reason, message, self._end_metrics()))
        self.out.put_nowait((_CLOSE, code or CODE.get(reason, 1008), reason))
        self.finished.set()

    def _too_big_text(self) -> str:
        return f"a message over the {self.cfg.max_message_bytes}-byte limit (max_message_bytes)"

    def _message_too_big(self, detail: str) -> str | None:
        """Called by the WebSocket layer, synchronously, just before it closes with 1009: the
        best-effort session.closed it sends first (schema §7.5)."""
        if self.state == "closed":
            return None
        self.too_big = True
        ev = P.closed(self.id, "message_too_big", f"{self._too_big_text()}: {detail}", self._end_metrics())
        ev["server_send_ts"] = time.time()
        return json.dumps(ev)

    def _end_metrics(self) -> dict:
        return {"backend": BACKEND, "turns": self.turns, "wall_clock_ms": self._ms(self.started)}

    # -- reader ----------------------------------------------------------------------------
    async def _read(self) -> None:
        while self.state != "closed":
            timeout = self.cfg.init_timeout_s if self.state == "uninitialized" else self.cfg.idle_timeout_s
            try:
                raw = await asyncio.wait_for(self.ws.recv(), timeout)
            except asyncio.TimeoutError:
                if self.worker is not None and not self.worker.done():
                    continue  # a turn is running: not idle
                await self.terminate("idle_timeout", f"no message for {timeout:g} s")
                return
            try:
                msg = P.decode(raw)
                await self._dispatch(msg, P.kind(msg, self.cfg.compat))
            except ProtocolError as e:
                await self.terminate(e.code, str(e))

    async def _dispatch(self, msg: dict, kind: str) -> None:
        if kind == "close":  # --compat only
            reason = msg.get("reason")
            await self.terminate(reason if isinstance(reason, str) and reason else "client_closed", code=1000)
        elif kind == "unknown":
            if msg["type"] == "session.close":
                raise ProtocolError(
                    "session.close is not a data-channel message: close with POST /sessions/{session_id}/close",
                    "unexpected_message_type",
                )
            raise ProtocolError(f"unknown message type {msg['type']!r}", "unexpected_message_type")
        elif self.state == "uninitialized":
            if kind != "init":
                raise ProtocolError(f"the first message must be session.init, got {msg['type']!r}", "not_initialized")
            await self._init(msg)
        elif kind == "init":
            raise ProtocolError("session.init on an active session", "duplicate_init")
        else:
            self._push(msg)

    async def _init(self, msg: dict) -> None:
        req = P.parse_init(msg, self.cfg.compat)
        start = D.parse_backend_start(msg.get("payload") or {}) if req.mode == "full_duplex" else None
        sid = uuid.uuid4().hex
        self.session = await self.host.claim(sid)  # ProtocolError when no slot is free
        self.id = sid  # from here on terminate() frees the slot
        if start is not None:
            try:
                self.duplex = BackendDuplex(await self.host.open_duplex(self.session, start), sid, BACKEND)
            except OmniError as e:
                raise ProtocolError(f"{type(e).__name__}: {e}", "omni_init_failed") from None
        self.init, self.state = req, "active"
        self.server.sessions[sid] = self
        await self._send(P.event("session.created", session_id=sid, mode=req.mode, metrics=self._metrics()))

    def _push(self, msg: dict) -> None:
        if self.duplex is not None:
            turn = D.parse_backend_unit(msg)
        else:
            turn = P.parse_turn(msg, self.init, self.cfg.max_audio_seconds, self.cfg.max_new_tokens, self.cfg.compat)
        running = self.worker is not None and not self.worker.done()
        if len(self.pending) + running > self.cfg.max_pending_inputs:
            raise ProtocolError(
                f"more than {self.cfg.max_pending_inputs} inputs queued behind the running turn", "input_overflow"
            )
        self.pending.append(turn)
        if not running:
            self.worker = asyncio.create_task(self._work())

    # -- turns -----------------------------------------------------------------------------
    async def _work(self) -> None:
        while self.pending and self.state == "active":
            turn = self.pending.popleft()
            try:
                if self.duplex is not None:
                    for ev in await self.duplex.unit(turn):
                        await self._send(ev)
                else:
                    await self._turn(turn)
            except ProtocolError as e:
                await self.terminate(e.code, str(e))
            except MediaError as e:
                video = any(isinstance(p, Video) for p in getattr(turn, "content", ()))
                await self.terminate("video_decode_failed" if video else "media_decode_failed", str(e))
            except InvalidArgumentError as e:
                await self.terminate("invalid_input", str(e))
            except OmniError as e:
                await self.terminate("engine_error", f"{type(e).__name__}: {e}")
            except Exception as e:  # noqa: BLE001 -- an engine bug ends this session, not the server
                log.exception("turn failed")
                await self.terminate("engine_error", f"{type(e).__name__}: {e}")

    async def _turn(self, turn: P.Turn) -> None:
        rid = f"{self.id}_resp_{self.turns}"
        self.turns += 1
        t0 = time.perf_counter()
        texts, audio, first_audio, audio_n = [], [], None, 0
        timings, prompt = None, None
        chunks = self.host.run(self.session, turn)
        try:
            async for chunk in chunks:
                timings = chunk.timings or timings
                prompt = chunk.prompt_tokens if chunk.prompt_tokens is not None else prompt
                if chunk.text_delta:
                    texts.append(chunk.text_delta)
                    if turn.streaming:
                        await self._send(
                            P.event(
                                "response.output.delta",
                                kind="text",
                                text=chunk.text_delta,
                                session_id=self.id,
                                response_id=rid,
                                metrics=self._metrics(t0, first_audio, audio_n, prompt),
                            )
                        )
                if chunk.audio.size and turn.speech:
                    first_audio = first_audio if first_audio is not None else self._ms(t0)
                    audio_n += chunk.audio.size
                    if not turn.streaming:
                        audio.append(chunk.audio)
                        continue
                    for piece in P.audio_pieces(chunk.audio):
                        await self._send(
                            P.event(
                                "response.output.delta",
                                kind="audio",
                                audio=pcm_b64(piece),
                                session_id=self.id,
                                response_id=rid,
                                metrics=self._metrics(t0, first_audio, audio_n, prompt),
                            )
                        )
        finally:
            await chunks.aclose()  # stops the engine now, not when the generator is collected
        limit = turn.max_new_tokens or self.session.reply.max_new_tokens
        full = (
            None
            if turn.streaming or not turn.speech
            else pcm_b64(np.concatenate(audio) if audio else np.zeros(0, np.float32))
        )
        await self._send(
            P.event(
                "response.done",
                session_id=self.id,
                response_id=rid,
                text="".join(texts),
                audio=full,
                reason="max_new_tokens" if timings is not None and timings.n_tokens >= limit else "turn_end",
                metrics=self._metrics(t0, first_audio, audio_n, prompt, timings),
            )
        )

    # -- writer ----------------------------------------------------------------------------
    async def _send(self, ev: dict) -> None:
        if self.state != "closed":
            await self.out.put(ev)

    async def _write(self) -> None:
        """The only task that writes to the socket."""
        alive = True
        while True:
            item = await self.out.get()
            if isinstance(item, tuple) and item[0] is _CLOSE:
                if alive:
                    with contextlib.suppress(Exception):
                        await self.ws.close(item[1], item[2][:120])
                return
            if not alive:
                continue  # keep draining so producers never block on a dead socket
            item["server_send_ts"] = time.time()
            try:
                await asyncio.wait_for(self.ws.send(json.dumps(item)), self.cfg.send_timeout_s)
            except ConnectionClosed:
                alive = False
                asyncio.create_task(self.terminate("client_disconnected", notify=False))
            except asyncio.TimeoutError:  # the client stopped reading: free the slot, drop the socket
                alive = False
                asyncio.create_task(self.terminate("client_too_slow", self._slow_text(), notify=False))
                self.ws.transport.abort()

    def _slow_text(self) -> str:
        return f"the client read nothing for {self.cfg.send_timeout_s:g} s with a full send buffer"

    # -- metrics ---------------------------------------------------------------------------
    @staticmethod
    def _ms(t0: float) -> float:
        return round((time.perf_counter() - t0) * 1000, 1)

    def _metrics(self, t0: float | None = None, first_audio=None, audio_n: int = 0, prompt=None, timings=None) -> dict:
        m: dict = {"backend": BACKEND}
        if t0 is None:  # session.created
            e = self.host
            m.update(load_ms=round((e.load_s or 0) * 1000, 1), warmup_ms=round((e.warmup_s or 0) * 1000, 1))
            return m
        m["wall_clock_ms"] = self._ms(t0)
        if prompt is not None:
            m["prompt_tokens"] = prompt  # known once the prompt is built (before the prefill)
        if first_audio is not None:
            m["time_to_first_audio_ms"] = first_audio
        if audio_n:
            m["audio_ms"] = round(audio_n / P.OUTPUT_RATE * 1000, 1)
            m["rtf"] = round(m["wall_clock_ms"] / m["audio_ms"], 4)
        if timings is not None:
            m.update(P.timings_metrics(timings, m["wall_clock_ms"]))
        return m
