"""One turn on a leased worker: lease (queued when all are busy), open a /backend session, push
the input, hand each event to the caller, close the session and give the worker back. Every API
of the gateway (demo chat, OpenAI) runs its requests through ``run_turn``."""

from __future__ import annotations

import asyncio
import base64
import logging
import time
from dataclasses import dataclass

from .backend_client import BackendSession, SessionEnded, WorkerUnavailable
from .client_channel import SlowReader
from .pool import NoWorkerFor, QueueFull

log = logging.getLogger(__name__)

# session.closed reasons that mean the request was wrong (the rest are the server's trouble)
CLIENT_REASONS = frozenset(
    "invalid_json not_initialized unexpected_message_type duplicate_init invalid_mode mode_unsupported "
    "mode_mismatch empty_messages invalid_input invalid_audio audio_too_long voice_audio_decode_failed "
    "invalid_media media_decode_failed video_decode_failed input_overflow message_too_big".split()
)


class EndTurn(Exception):
    """Raised by an ``on_event`` handler to end the turn early (an OpenAI stop sequence): the
    worker's session is closed with ``reason``, which stops its generation, and ``run_turn``
    returns ``done`` (the caller's stand-in for the response.done that never comes)."""

    def __init__(self, done: dict, reason: str = "client_closed"):
        super().__init__(reason)
        self.done, self.reason = done, reason


class TurnFailed(Exception):
    """Why a turn did not complete; ``status`` is the matching HTTP status."""

    def __init__(self, reason: str, message: str, status: int):
        super().__init__(f"{reason}: {message}")
        self.reason, self.message, self.status = reason, message, status


@dataclass
class TurnOutcome:
    done: dict  # the response.done event
    queue_wait_s: float
    first_estimate_s: float  # the wait estimated when the ticket was queued (0: served at once)
    worker_id: str


async def run_turn(gateway, inp: dict, *, api: str, session_id=None, notify=None, on_event=None) -> TurnOutcome:
    """Runs ``inp`` (a backend-protocol turn_based input) on a worker. ``notify`` gets queue
    messages, ``on_event`` every delta and response.done (it may raise EndTurn). Raises TurnFailed."""
    metrics = gateway.metrics
    first_estimate = 0.0

    async def queued(msg):
        nonlocal first_estimate
        if msg["type"] == "queued":
            first_estimate = msg["estimated_wait_s"]
        if notify is not None:
            await notify(msg)

    outcome = "error"
    try:
        if gateway.state() == "unavailable":  # loading workers are worth waiting for; failed ones not
            metrics.refusals.labels(reason="no_worker").inc()
            causes = gateway.pool.why_down()
            why = "every worker failed or is unreachable" + (f": {causes}" if causes else "")
            raise TurnFailed("no_worker", f"no worker is available ({why})", 503)
        # A worker that vanished is marked offline; the turn is tried once more, but only when the
        # worker had made nothing of the reply yet: a turn is never replayed after partial output.
        # A whole (non-streamed) reply is streamed from the worker all the same, so that its
        # death mid-reply is known as such.
        forwarded = _Forwarded(on_event, whole=inp.get("streaming") is False)
        if forwarded.whole:
            inp = dict(inp, streaming=True)
        for attempt in (1, 2):
            try:
                async with gateway.pool.lease("chat", session_id, queued) as lease:
                    metrics.queue_wait.observe(lease.waited_s)
                    try:
                        done = await asyncio.wait_for(_on_worker(lease, inp, forwarded), gateway.config.turn_timeout_s)
                    except WorkerUnavailable as e:
                        gateway.pool.mark_down(lease.worker, "offline", str(e))
                        log.warning("worker %s unavailable: %s", lease.worker.id, e)
                        if forwarded.any:
                            metrics.worker_failures.inc()
                            raise TurnFailed(
                                "worker_failed",
                                f"the worker serving this turn failed after part of the reply was sent ({e}); "
                                "the reply is incomplete: send the request again",
                                502,
                            ) from None
                        if attempt == 2:
                            raise TurnFailed("worker_unavailable", str(e), 503) from None
                        continue
                    except asyncio.TimeoutError:
                        raise TurnFailed(
                            "timeout", f"the turn took more than {gateway.config.turn_timeout_s:g} s", 504
                        ) from None
                    outcome = "completed"
                    metrics.observe_done(done)
                    return TurnOutcome(done, lease.waited_s, first_estimate, lease.worker.id)
            except QueueFull as e:
                metrics.refusals.labels(reason="queue_full").inc()
                gateway.refusal_log("queue_full", "request refused: %s", e)
                raise TurnFailed("queue_full", str(e), 429) from None
            except NoWorkerFor as e:
                metrics.refusals.labels(reason="no_worker").inc()
                raise TurnFailed("no_worker", str(e), 503) from None
        raise AssertionError("unreachable")
    except TurnFailed as e:
        outcome = "refused" if e.status in (429, 503) else "failed"
        raise
    except asyncio.CancelledError:
        outcome = "cancelled"
        raise
    except SlowReader:
        outcome = "dropped"
        raise
    finally:
        metrics.turns.labels(api=api, outcome=outcome).inc()


class _Forwarded:
    """Wraps on_event and remembers whether the worker made any of the reply (``any``). For a
    ``whole`` reply the deltas stay here: their audio becomes response.done's ``audio`` (base64
    float32 24 kHz, as the worker sends a non-streamed reply), which is all on_event sees."""

    def __init__(self, on_event, whole: bool = False):
        self.on_event, self.whole, self.any = on_event, whole, False
        self.audio: list[bytes] = []

    async def __call__(self, ev: dict) -> None:
        if ev["type"] == "response.output.delta":
            self.any = True
            if self.whole:
                if ev.get("kind") == "audio":
                    self.audio.append(base64.b64decode(ev["audio"]))
                return
        elif self.whole and ev["type"] == "response.done" and self.audio:
            ev["audio"] = base64.b64encode(b"".join(self.audio)).decode("ascii")
        if self.on_event is not None:
            await self.on_event(ev)


async def _on_worker(lease, inp: dict, on_event) -> dict:
    backend = BackendSession(lease.worker.url, secret=lease.worker.secret)
    reason = "client_disconnected"
    try:
        try:
            await backend.open({})
            async for ev in backend.turn(inp):
                if on_event is not None:
                    try:
                        await on_event(ev)
                    except EndTurn as e:
                        reason = e.reason
                        return e.done
                if ev["type"] == "response.done":
                    reason = "client_closed"
                    return ev
        except SessionEnded as e:
            reason = "backend_closed"
            status = 400 if e.reason in CLIENT_REASONS else 503 if e.reason == "engine_loading" else 500
            raise TurnFailed(e.reason, e.message or e.reason, status) from None
        raise WorkerUnavailable("the worker ended the turn without response.done")
    except SlowReader:
        reason = "client_too_slow"
        raise
    finally:
        t0 = time.perf_counter()
        await asyncio.shield(backend.close(reason))
        log.debug("closed backend session on %s in %.3f s", lease.worker.id, time.perf_counter() - t0)
