"""The worker pool: workers (one engine each, with one or more session slots), a FIFO queue
of tickets and the leases that hand one slot of a worker to one session.

Every request type goes through one queue. ``lease()`` is the one way to get a slot::

    async with pool.lease("chat", session_id, notify=send_queue_message) as lease:
        ...  # a slot of lease.worker is yours until the block ends (or lease.release())

A ticket is served at once when a worker that supports its session type has a free slot (the
least busy such worker); otherwise it waits, and ``notify`` gets ``queued`` (position, estimated
wait, ticket id), then ``queue_update`` every ``update_s`` and finally ``queue_done``. Dispatch
walks the queue in order and gives each free slot to the first ticket it can serve (first come,
first served within a capability). Session types that hold a slot for their whole life (duplex)
use the same lease; see docs/serving.md, "Adding a session type" and "Slots"."""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import logging
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field

from .worker_slots import ALIVE, CAPABILITY_HINTS, SESSION_TYPES, STATUSES, SessionType, Worker, now_iso  # noqa: F401 -- Worker: pool's API

log = logging.getLogger(__name__)


UNKNOWN_REMAINING_S = 15.0  # a session past its estimate is guessed to end within this
EMA_ALPHA, EMA_MIN_SAMPLES = 0.3, 3


class QueueFull(Exception):
    pass


class NoWorkerFor(Exception):
    """No worker in the pool can ever serve this session type."""


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
    """A slot of a worker held by one session; ``release()`` (idempotent) gives it back."""

    def __init__(self, pool: WorkerPool, worker: Worker, ticket: Ticket):
        self.pool, self.worker, self.ticket = pool, worker, ticket
        self.waited_s = time.monotonic() - ticket.t0
        self.t0 = time.monotonic()
        self.started_at = now_iso()
        self.status = ticket.type.busy_status  # the worker's status while this is its newest session
        self.last_activity = self.t0
        self.released = False

    def info(self) -> dict:
        return {
            "session_id": self.ticket.session_id,
            "request_type": self.type.name,
            "status": self.status,
            "started_at": self.started_at,
        }

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

    def report_health(
        self, worker: Worker, status: str, error: str | None = None, slots_busy: int | None = None, **facts
    ) -> None:
        """What a health check found: idle (ready, ``slots_busy`` of its slots taken, default
        none), busy (ready, default every slot taken), loading, error or offline. The gateway's own
        leases count as taken whatever the worker said."""
        worker.last_heartbeat = now_iso()
        for k, v in facts.items():
            setattr(worker, k, v)
        worker.error = error
        if status in ("idle", "busy"):
            worker.health = "ready"
            worker.load_error = None
            if slots_busy is None:
                slots_busy = worker.slots if status == "busy" else 0
            worker.report_slots(worker.slots, slots_busy)
            self._dispatch()
        else:
            worker.health = status

    def mark_down(self, worker: Worker, status: str, error: str | None) -> None:
        """The gateway itself found the worker down (offline, error) or starting (loading); a
        health check that finds it ready again brings it back."""
        worker.health, worker.error = status, error

    def mark_load_failed(self, worker: Worker, cause: str) -> None:
        """The worker's engine failed to load (``cause``: the worker's error). It serves nothing and
        is no hope for queued requests -- even while a restart of it loads -- until it reports ready."""
        worker.load_error = cause
        worker.health, worker.error = "error", worker.trouble

    def why_down(self, capability: str | None = None) -> str:
        """What is known of the workers that cannot serve (those with ``capability``, when given):
        "worker_0: its engine failed to load: ...; worker_1: ...", or "" when nothing is known."""
        return "; ".join(
            f"{w.id}: {w.trouble}"
            for w in self.workers.values()
            if w.trouble and not w.may_serve and (capability is None or capability in w.capabilities)
        )

    # -- queue -----------------------------------------------------------------------------
    def session_type(self, name: str) -> SessionType:
        return SESSION_TYPES[name]

    def can_serve(self, t: SessionType) -> bool:
        return any(t.capability in w.capabilities for w in self.workers.values())

    def enqueue(self, type_name: str, session_id: str | None = None) -> Ticket:
        """A ticket, assigned at once when a capable worker has a free slot, else queued (QueueFull
        when the queue is at its limit; NoWorkerFor when no worker could ever serve it)."""
        t = SESSION_TYPES[type_name]
        if not self.can_serve(t):
            hint = CAPABILITY_HINTS.get(t.capability)
            why = f"no worker of this server serves {t.name} sessions ({t.capability})"
            raise NoWorkerFor(why + (f"; {hint}" if hint else ""))
        ticket = Ticket(f"q_{uuid.uuid4().hex[:12]}", t, session_id, asyncio.get_running_loop().create_future())
        worker = self._free_for(t)
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
        return await asyncio.shield(ticket.future)

    def release(self, lease: Lease) -> None:
        w, t = lease.worker, lease.type
        took = time.monotonic() - lease.t0
        if lease in w.leases:
            w.leases.remove(lease)
        w.total_requests += 1
        w.total_ms += took * 1000
        avg, n = self.ema.get(t.name, (t.eta_s, 0))
        self.ema[t.name] = (took if n == 0 else EMA_ALPHA * took + (1 - EMA_ALPHA) * avg, n + 1)
        self._dispatch()
        self._recalc()
        self.changed.set()

    @contextlib.asynccontextmanager
    async def lease(self, type_name: str, session_id: str | None = None, notify=None, always_done: bool = False):
        """Holds a slot of a worker for the block. ``notify(message)`` (async) gets the queue messages
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
                ticket.future.result().release()
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
        serve them died or failed to load, and none came back: a restart gets that long) fail
        with NoWorkerFor naming what is known of the workers, instead of waiting forever.
        Returns how many failed; called by the health loop."""
        now, failed = time.monotonic(), 0
        for cap in {t.type.capability for t in self.queue.values()}:
            if any(cap in w.capabilities and w.may_serve for w in self.workers.values()):
                self._stranded_since.pop(cap, None)
                continue
            since = self._stranded_since.setdefault(cap, now)
            if now - since < grace_s:
                continue
            causes = self.why_down(cap)
            for ticket in [t for t in self.queue.values() if t.type.capability == cap]:
                self.queue.pop(ticket.id)
                if not ticket.future.done():
                    why = f"no worker is left to serve {ticket.type.name} sessions (none for {now - since:.0f} s)"
                    ticket.future.set_exception(NoWorkerFor(why + (f": {causes}" if causes else "")))
                failed += 1
        if failed:
            self._recalc()
        return failed

    def waiting_for(self, worker: Worker) -> bool:
        """Someone in the queue could use a slot of this worker (a request of any type it serves)."""
        return any(x.type.capability in worker.capabilities for x in self.queue.values())

    async def hold_for_life(self, lease: Lease, session, short_s: float, long_s: float, on_idle=None) -> bool:
        """Runs ``session`` (a coroutine) while it holds ``lease``; when the client has been idle
        for ``short_s`` while a request of any type that its worker serves waits (``long_s``
        otherwise) the session is cancelled, the worker given back, and ``on_idle(idle_s)`` told.
        True when it was reclaimed."""
        task = asyncio.ensure_future(session)
        try:
            while not task.done():
                limit = short_s if self.waiting_for(lease.worker) else long_s
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
    def _free_for(self, t: SessionType) -> Worker | None:
        """The least busy worker with a free slot that serves ``t`` (the first such on a tie)."""
        free = [w for w in self.workers.values() if w.slots_free and t.capability in w.capabilities]
        return min(free, key=lambda w: (w.slots_busy / w.slots, w.slots_busy), default=None)

    def _assign(self, ticket: Ticket, worker: Worker) -> None:
        ticket.position, ticket.estimated_wait_s = 0, 0.0
        lease = Lease(self, worker, ticket)
        worker.leases.append(lease)
        ticket.future.set_result(lease)
        self.changed.set()

    def _dispatch(self) -> None:
        """Gives free slots to the oldest tickets they can serve."""
        for ticket in list(self.queue.values()):
            if ticket.future.done():
                self.queue.pop(ticket.id, None)
                continue
            worker = self._free_for(ticket.type)
            if worker is None:
                continue
            self.queue.pop(ticket.id)
            self._assign(ticket, worker)
        self._recalc()

    def eta(self, name: str) -> float:
        avg, n = self.ema.get(name, (self.eta_base.get(name, 30.0), 0))
        return avg if n >= EMA_MIN_SAMPLES else self.eta_base.get(name, 30.0)

    def slot_free_times(self) -> list[float]:
        """When each slot of the pool is expected free (s from now; a min-heap): 0 for a free
        slot, a leased one when its session's expected length is over (slots held by others and
        slots of workers that are down are left out)."""
        now = time.monotonic()
        heap = []
        for w in self.workers.values():
            for lease in w.leases if w.status in ALIVE else ():
                left = self.eta(lease.type.name) - (now - lease.t0)
                heap.append(left if left > 0 else UNKNOWN_REMAINING_S)
            heap += [0.0] * w.slots_free
        heapq.heapify(heap)
        return heap

    def _recalc(self) -> None:
        """Positions (1-based) and estimated waits: each queued ticket takes the slot that frees
        first, which is then busy for that ticket's type's expected length."""
        heap = self.slot_free_times()
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
        """One entry per leased slot."""
        now = time.monotonic()
        out = []
        for w in self.workers.values():
            for lease in w.leases:
                elapsed = now - lease.t0
                out.append(
                    {
                        "worker_id": w.id,
                        "request_type": lease.type.name,
                        "session_id": lease.ticket.session_id,
                        "started_at": lease.started_at,
                        "elapsed_s": round(elapsed, 1),
                        "estimated_remaining_s": round(max(0.0, self.eta(lease.type.name) - elapsed), 1),
                    }
                )
        return out

    def lease_of(self, session_id: str, type_name: str) -> Lease | None:
        """The running lease of that session and type (None: none runs)."""
        for w in self.workers.values():
            for lease in w.leases:
                if lease.ticket.session_id == session_id and lease.type.name == type_name:
                    return lease
        return None

    def counts(self) -> dict:
        c = dict.fromkeys(STATUSES, 0)
        for w in self.workers.values():
            c[w.status] = c.get(w.status, 0) + 1
        return c

    def slot_counts(self) -> dict:
        """Slots of every worker: in all, taken, free now."""
        ws = list(self.workers.values())
        return {
            "slots_total": sum(w.slots for w in ws),
            "slots_busy": sum(w.slots_busy for w in ws),
            "slots_free": sum(w.slots_free for w in ws),
        }

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
