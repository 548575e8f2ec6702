"""The worker pool: engine workers (one engine, one session each), a FIFO queue of tickets and the
leases that hand a worker to one session at a time.

Every request type goes through one queue. ``lease()`` is the one way to get a worker::

    async with pool.lease("chat", session_id, notify=send_queue_message) as lease:
        ...  # lease.worker is yours until the block ends (or lease.release())

A ticket is served at once when an idle worker supports its session type; otherwise it waits,
and ``notify`` gets ``queued`` (position, estimated wait, ticket id), then ``queue_update`` every
``update_s`` and finally ``queue_done``. Dispatch walks the queue in order and gives each idle
worker to the first ticket it can serve (first come, first served within a capability).
Session types that hold a worker for their whole life (duplex) use the same lease; see
docs/serving.md, "Adding a session type"."""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import logging
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import datetime, timezone

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SessionType:
    name: str  # request_type in /status and /api/queue
    busy_status: str  # the worker's status while it serves this type
    capability: str  # what a worker must advertise to serve it
    eta_s: float  # first guess of a session's length, until the running average has 3 samples
    whole_life: bool  # holds the worker for the session's whole life (duplex), not one request


SESSION_TYPES = {
    t.name: t
    for t in (
        SessionType("chat", "busy_chat", "turn_based", 15.0, False),
        SessionType("half_duplex_audio", "busy_half_duplex", "half_duplex", 180.0, True),
        SessionType("realtime", "busy_half_duplex", "half_duplex", 180.0, True),  # the OpenAI Realtime API
        SessionType("realtime_duplex", "duplex_active", "full_duplex", 120.0, True),  # ... with mode=full_duplex
        SessionType("audio_duplex", "duplex_active", "full_duplex", 120.0, True),
        SessionType("omni_duplex", "duplex_active", "full_duplex", 90.0, True),
    )
}
BUSY = {t.busy_status for t in SESSION_TYPES.values()} | {"duplex_paused"}
ALIVE = BUSY | {"idle", "loading"}  # a worker in one of these may still serve
STATUSES = ("idle", *sorted(BUSY), "loading", "error", "offline")
UNKNOWN_REMAINING_S = 15.0  # a session past its estimate is guessed to end within this
EMA_ALPHA, EMA_MIN_SAMPLES = 0.3, 3


class QueueFull(Exception):
    pass


class NoWorkerFor(Exception):
    """No worker in the pool can ever serve this session type."""


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat()


@dataclass
class Worker:
    id: str
    host: str
    port: int
    gpu_id: int = 0
    device: str = "?"
    capabilities: frozenset = frozenset({"turn_based"})
    status: str = "loading"
    error: str | None = None
    session_id: str | None = None
    request_type: str | None = None
    task_started_at: str | None = None
    task_t0: float | None = None
    total_requests: int = 0
    total_ms: float = 0.0
    last_heartbeat: str | None = None
    leased: bool = False  # the gateway's own state: it wins over what /health reported
    restarts: int = 0  # times the gateway started this worker again after it died
    secret: str | None = field(default=None, repr=False)  # what the worker requires of this gateway

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def busy(self) -> bool:
        return self.status in BUSY

    def info(self) -> dict:
        return {
            "worker_id": self.id,
            "host": self.host,
            "port": self.port,
            "gpu_id": self.gpu_id,
            "device": self.device,
            "status": self.status,
            "error": self.error,
            "current_session_id": self.session_id,
            "total_requests": self.total_requests,
            "avg_inference_time_ms": round(self.total_ms / self.total_requests, 1) if self.total_requests else 0.0,
            "last_heartbeat": self.last_heartbeat,
            "current_request_type": self.request_type,
            "task_started_at": self.task_started_at,
            "capabilities": sorted(self.capabilities),
            "restarts": self.restarts,
        }


@dataclass
class Ticket:
    id: str
    type: SessionType
    session_id: str | None
    future: asyncio.Future
    enqueued_at: str = field(default_factory=now_iso)
    t0: float = field(default_factory=time.monotonic)
    position: int = 0  # 1-based while queued, 0 once assigned
    estimated_wait_s: float = 0.0
    cancelled: bool = False

    def info(self) -> dict:
        return {
            "ticket_id": self.id,
            "request_type": self.type.name,
            "session_id": self.session_id,
            "enqueued_at": self.enqueued_at,
            "position": self.position,
            "estimated_wait_s": self.estimated_wait_s,
            "wait_elapsed_s": round(time.monotonic() - self.t0, 1),
            "cancelled": self.cancelled,
        }


class Lease:
    """A worker held by one session; ``release()`` (idempotent) gives it back."""

    def __init__(self, pool: WorkerPool, worker: Worker, ticket: Ticket):
        self.pool, self.worker, self.ticket = pool, worker, ticket
        self.waited_s = time.monotonic() - ticket.t0
        self.t0 = time.monotonic()
        self.last_activity = self.t0
        self.released = False

    def touch(self) -> None:
        """Marks client activity (whole-life sessions: the idle clock restarts)."""
        self.last_activity = time.monotonic()

    @property
    def type(self) -> SessionType:
        return self.ticket.type

    def release(self) -> None:
        if not self.released:
            self.released = True
            self.pool.release(self)


class WorkerPool:
    def __init__(self, max_queue_size: int = 1000, update_s: float = 3.0, eta_s: dict | None = None, metrics=None):
        self.workers: OrderedDict[str, Worker] = OrderedDict()
        self.queue: OrderedDict[str, Ticket] = OrderedDict()
        self.max_queue_size, self.update_s, self.metrics = max_queue_size, update_s, metrics
        self.eta_base = {name: t.eta_s for name, t in SESSION_TYPES.items()} | (eta_s or {})
        self.ema: dict[str, tuple[float, int]] = {}  # type -> (average seconds, samples)
        self.changed = asyncio.Event()  # set on every release and dispatch (tests, idle reclaim)
        self._stranded_since: dict[str, float] = {}  # capability -> when its last live worker went

    # -- workers ---------------------------------------------------------------------------
    def add(self, worker: Worker) -> Worker:
        self.workers[worker.id] = worker
        self._dispatch()
        return worker

    def report_health(self, worker: Worker, status: str, error: str | None = None, **facts) -> None:
        """What a health check found: idle (ready and free), busy (a session the gateway did not
        give it), loading, error or offline. A worker the gateway has leased stays busy."""
        worker.last_heartbeat = now_iso()
        for k, v in facts.items():
            setattr(worker, k, v)
        worker.error = error
        if worker.leased:
            return
        worker.status = "busy_chat" if status == "busy" else status
        if status == "idle":
            self._dispatch()

    # -- queue -----------------------------------------------------------------------------
    def session_type(self, name: str) -> SessionType:
        return SESSION_TYPES[name]

    def can_serve(self, t: SessionType) -> bool:
        return any(t.capability in w.capabilities for w in self.workers.values())

    def enqueue(self, type_name: str, session_id: str | None = None) -> Ticket:
        """A ticket, assigned at once when a capable worker is idle, else queued (QueueFull when
        the queue is at its limit; NoWorkerFor when no worker could ever serve it)."""
        t = SESSION_TYPES[type_name]
        if not self.can_serve(t):
            raise NoWorkerFor(f"no worker of this server serves {t.name} sessions ({t.capability})")
        ticket = Ticket(f"q_{uuid.uuid4().hex[:12]}", t, session_id, asyncio.get_running_loop().create_future())
        worker = self._idle_for(t)
        if worker is not None and not any(x.type.capability == t.capability for x in self.queue.values()):
            self._assign(ticket, worker)
            return ticket
        if len(self.queue) >= self.max_queue_size:
            raise QueueFull(f"Queue full ({self.max_queue_size} requests)")
        self.queue[ticket.id] = ticket
        self._dispatch()
        self._recalc()
        return ticket

    def cancel(self, ticket_id: str) -> bool:
        ticket = self.queue.pop(ticket_id, None)
        if ticket is None:
            return False
        ticket.cancelled = True
        if not ticket.future.done():
            ticket.future.cancel()
        self._recalc()
        return True

    async def wait(self, ticket: Ticket) -> Lease:
        worker = await asyncio.shield(ticket.future)
        return Lease(self, worker, ticket)

    def release(self, lease: Lease) -> None:
        w, t = lease.worker, lease.type
        took = time.monotonic() - lease.t0
        w.leased = False
        w.session_id = w.request_type = w.task_started_at = w.task_t0 = None
        w.total_requests += 1
        w.total_ms += took * 1000
        avg, n = self.ema.get(t.name, (t.eta_s, 0))
        self.ema[t.name] = (took if n == 0 else EMA_ALPHA * took + (1 - EMA_ALPHA) * avg, n + 1)
        if w.status in BUSY:
            w.status = "idle"
        self._dispatch()
        self._recalc()
        self.changed.set()

    @contextlib.asynccontextmanager
    async def lease(self, type_name: str, session_id: str | None = None, notify=None, always_done: bool = False):
        """Holds a worker for the block. ``notify(message)`` (async) gets the queue messages
        (``queue_done`` even without a wait when ``always_done``, as duplex clients expect);
        leaving the block while queued cancels the ticket."""
        ticket = self.enqueue(type_name, session_id)
        updates = None
        try:
            if not ticket.future.done() and notify is not None:
                await notify(self.queued_message(ticket))
                updates = asyncio.create_task(self._updates(ticket, notify))
            lease = await self.wait(ticket)
        except BaseException:
            self.cancel(ticket.id)
            if ticket.future.done() and not ticket.future.cancelled():  # assigned as we left
                Lease(self, ticket.future.result(), ticket).release()
            raise
        finally:
            if updates is not None:
                updates.cancel()
        try:
            if notify is not None and (updates is not None or always_done):
                await notify({"type": "queue_done"})
            yield lease
        finally:
            lease.release()

    def fail_stranded(self, grace_s: float) -> int:
        """Tickets whose capability no live worker has had for ``grace_s`` (every worker that could
        serve them died and none came back: a restart gets that long) fail with NoWorkerFor
        instead of waiting forever. Returns how many failed; called by the health loop."""
        now, failed = time.monotonic(), 0
        for cap in {t.type.capability for t in self.queue.values()}:
            if any(cap in w.capabilities and w.status in ALIVE for w in self.workers.values()):
                self._stranded_since.pop(cap, None)
                continue
            since = self._stranded_since.setdefault(cap, now)
            if now - since < grace_s:
                continue
            for ticket in [t for t in self.queue.values() if t.type.capability == cap]:
                self.queue.pop(ticket.id)
                if not ticket.future.done():
                    why = f"no worker is left to serve {ticket.type.name} sessions (none for {now - since:.0f} s)"
                    ticket.future.set_exception(NoWorkerFor(why))
                failed += 1
        if failed:
            self._recalc()
        return failed

    def waiting_for(self, t: SessionType) -> bool:
        """Someone in the queue could use a worker of this type's capability."""
        return any(x.type.capability == t.capability for x in self.queue.values())

    async def hold_for_life(self, lease: Lease, session, short_s: float, long_s: float, on_idle=None) -> bool:
        """Runs ``session`` (a coroutine) while it holds ``lease``; when the client has been idle
        for ``short_s`` while others wait (``long_s`` otherwise) the session is cancelled, the
        worker given back, and ``on_idle(idle_s)`` told. True when it was reclaimed."""
        task = asyncio.ensure_future(session)
        try:
            while not task.done():
                limit = short_s if self.waiting_for(lease.type) else long_s
                idle = time.monotonic() - lease.last_activity
                if idle >= limit:
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await task
                    if on_idle is not None:
                        on_idle(idle)
                    lease.release()
                    return True
                await asyncio.wait({task}, timeout=min(1.0, limit - idle))
            task.result()
            return False
        finally:
            if not task.done():
                task.cancel()

    async def _updates(self, ticket: Ticket, notify) -> None:
        while True:
            await asyncio.sleep(self.update_s)
            if ticket.future.done():
                return
            await notify(
                {
                    "type": "queue_update",
                    "position": ticket.position,
                    "estimated_wait_s": ticket.estimated_wait_s,
                    "queue_length": len(self.queue),
                }
            )

    def queued_message(self, ticket: Ticket) -> dict:
        return {
            "type": "queued",
            "position": ticket.position,
            "estimated_wait_s": ticket.estimated_wait_s,
            "ticket_id": ticket.id,
            "queue_length": len(self.queue),
        }

    # -- dispatch ----------------------------------------------------------------------------
    def _idle_for(self, t: SessionType) -> Worker | None:
        return next((w for w in self.workers.values() if w.status == "idle" and t.capability in w.capabilities), None)

    def _assign(self, ticket: Ticket, worker: Worker) -> None:
        worker.leased = True
        worker.status = ticket.type.busy_status
        worker.session_id = ticket.session_id
        worker.request_type = ticket.type.name
        worker.task_started_at, worker.task_t0 = now_iso(), time.monotonic()
        ticket.position, ticket.estimated_wait_s = 0, 0.0
        ticket.future.set_result(worker)
        self.changed.set()

    def _dispatch(self) -> None:
        """Gives idle workers to the oldest tickets they can serve."""
        for ticket in list(self.queue.values()):
            if ticket.future.done():
                self.queue.pop(ticket.id, None)
                continue
            worker = self._idle_for(ticket.type)
            if worker is None:
                continue
            self.queue.pop(ticket.id)
            self._assign(ticket, worker)
        self._recalc()

    def eta(self, name: str) -> float:
        avg, n = self.ema.get(name, (self.eta_base.get(name, 30.0), 0))
        return avg if n >= EMA_MIN_SAMPLES else self.eta_base.get(name, 30.0)

    def _recalc(self) -> None:
        """Positions (1-based) and estimated waits: each queued ticket takes the worker that frees
        first, which is then busy for that ticket's type's expected length."""
        now = time.monotonic()
        heap = []
        for w in self.workers.values():
            if w.busy and w.task_t0 is not None and w.request_type is not None:
                left = self.eta(w.request_type) - (now - w.task_t0)
                heap.append(left if left > 0 else UNKNOWN_REMAINING_S)
            elif w.status == "idle":
                heap.append(0.0)
        heapq.heapify(heap)
        for i, ticket in enumerate(self.queue.values()):
            ticket.position = i + 1
            if heap:
                t = heapq.heappop(heap)
                ticket.estimated_wait_s = round(max(0.0, t), 1)
                heapq.heappush(heap, t + self.eta(ticket.type.name))
            else:
                ticket.estimated_wait_s = 0.0

    # -- views ---------------------------------------------------------------------------------
    def running_tasks(self) -> list[dict]:
        now = time.monotonic()
        out = []
        for w in self.workers.values():
            if w.leased and w.task_t0 is not None:
                elapsed = now - w.task_t0
                out.append(
                    {
                        "worker_id": w.id,
                        "request_type": w.request_type,
                        "started_at": w.task_started_at,
                        "elapsed_s": round(elapsed, 1),
                        "estimated_remaining_s": round(max(0.0, self.eta(w.request_type) - elapsed), 1),
                    }
                )
        return out

    def counts(self) -> dict:
        c = dict.fromkeys(STATUSES, 0)
        for w in self.workers.values():
            c[w.status] = c.get(w.status, 0) + 1
        return c

    def queue_status(self) -> dict:
        self._recalc()
        return {
            "queue_length": len(self.queue),
            "max_queue_size": self.max_queue_size,
            "items": [t.info() for t in self.queue.values()],
            "running_tasks": self.running_tasks(),
        }

    def ticket(self, ticket_id: str) -> Ticket | None:
        self._recalc()
        return self.queue.get(ticket_id)
