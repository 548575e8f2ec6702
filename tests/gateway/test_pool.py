"""The worker pool without engines: FIFO order, estimated waits, capabilities, the queue limit,
cancellation, idle reclaim of whole-life sessions; and the rate-limited refusal log."""

import asyncio
import logging

import pytest

from llama_omni_py.server.gateway.pool import NoWorkerFor, QueueFull, Worker, WorkerPool
from llama_omni_py.server.limits import RateLimitedLog


def pool_with(n=1, caps=("turn_based",), **kw) -> WorkerPool:
    pool = WorkerPool(**kw)
    for i in range(n):
        w = pool.add(Worker(f"worker_{i}", "127.0.0.1", 1000 + i, capabilities=frozenset(caps)))
        pool.report_health(w, "idle")
    return pool


def test_fifo_positions_estimates_and_release():
    async def go():
        pool = pool_with(1)
        first = pool.enqueue("chat")
        assert first.future.done() and first.position == 0  # an idle worker: served at once
        lease = await pool.wait(first)
        assert lease.worker.status == "busy_chat" and lease.worker.leased
        waiting = [pool.enqueue("chat", f"s{i}") for i in range(3)]
        assert [t.position for t in waiting] == [1, 2, 3]
        assert [t.estimated_wait_s for t in waiting] == [15.0, 30.0, 45.0]  # 15 s per chat until learned
        pool.report_health(lease.worker, "idle")  # health never overrides the gateway's own lease
        assert lease.worker.status == "busy_chat"
        lease.release()
        assert waiting[0].future.done() and not waiting[1].future.done()
        assert [t.position for t in waiting[1:]] == [1, 2]
        assert pool.cancel(waiting[1].id) and not pool.cancel(waiting[1].id)
        assert waiting[1].future.cancelled() and waiting[2].position == 1
        return pool

    pool = asyncio.run(go())
    assert pool.workers["worker_0"].total_requests == 1


def test_queue_limit_and_capabilities():
    async def go():
        pool = pool_with(1, max_queue_size=1)
        await pool.wait(pool.enqueue("chat"))
        pool.enqueue("chat")
        with pytest.raises(QueueFull, match="Queue full"):
            pool.enqueue("chat")
        with pytest.raises(NoWorkerFor, match="full_duplex"):
            pool.enqueue("omni_duplex")

    asyncio.run(go())


def test_lease_sends_queue_messages_and_gives_the_worker_back():
    async def go():
        pool = pool_with(1, update_s=0.05)
        seen = []

        async def notify(msg):
            seen.append(msg["type"])

        holder = await pool.wait(pool.enqueue("chat"))

        async def second():
            async with pool.lease("chat", "s2", notify) as lease:
                return lease.worker.id, lease.waited_s

        task = asyncio.create_task(second())
        await asyncio.sleep(0.2)
        holder.release()
        worker, waited = await task
        return seen, worker, waited, pool

    seen, worker, waited, pool = asyncio.run(go())
    assert seen[0] == "queued" and "queue_update" in seen and seen[-1] == "queue_done" and worker == "worker_0"
    assert waited >= 0.15 and pool.workers["worker_0"].status == "idle"


def test_leaving_the_queue_cancels_the_ticket():
    async def go():
        pool = pool_with(1)
        await pool.wait(pool.enqueue("chat"))

        async def waiter():
            async with pool.lease("chat"):
                pass

        task = asyncio.create_task(waiter())
        await asyncio.sleep(0.05)
        assert len(pool.queue) == 1
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return pool

    assert len(asyncio.run(go()).queue) == 0


def test_idle_whole_life_session_gives_its_worker_back_while_others_wait():
    async def go():
        pool = pool_with(1, caps=("full_duplex",))
        lease = await pool.wait(pool.enqueue("omni_duplex", "a"))
        told = []
        forever = asyncio.Event()
        holder = asyncio.create_task(pool.hold_for_life(lease, forever.wait(), 0.2, 60.0, told.append))
        await asyncio.sleep(0.4)
        assert not holder.done()  # idle, but nobody waits: the long limit applies
        nxt = pool.enqueue("omni_duplex", "b")
        reclaimed = await asyncio.wait_for(holder, 5)
        return reclaimed, told, nxt.future.done(), lease.released

    reclaimed, told, served, released = asyncio.run(go())
    assert reclaimed and released and served and told and told[0] >= 0.2


def test_idle_whole_life_session_yields_to_a_waiting_request_of_another_type():
    # An idle Realtime session on a worker that also serves chat: a queued chat request gets the
    # worker after the short idle limit, not after the long one.
    async def go():
        pool = pool_with(1, caps=("turn_based", "half_duplex", "full_duplex"))
        lease = await pool.wait(pool.enqueue("realtime", "rt"))
        told = []
        holder = asyncio.create_task(pool.hold_for_life(lease, asyncio.Event().wait(), 0.2, 60.0, told.append))
        chat = pool.enqueue("chat", "c")
        assert not chat.future.done()
        reclaimed = await asyncio.wait_for(holder, 5)
        return reclaimed, told, chat.future.done()

    reclaimed, told, served = asyncio.run(go())
    assert reclaimed and served and told and told[0] >= 0.2


def test_refusals_are_logged_once_per_interval(caplog):
    clock = [0.0]
    log = RateLimitedLog(logging.getLogger("omni.test"), interval_s=10.0, clock=lambda: clock[0])
    with caplog.at_level(logging.WARNING, "omni.test"):
        for _ in range(500):
            log("session_busy", "refused: %s", "busy")
        clock[0] = 11.0
        log("session_busy", "refused: %s", "busy")
        log("queue_full", "refused: %s", "full")
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ["refused: busy", "refused: busy (499 more like it not logged in the last 11 s)", "refused: full"]


def test_slots_least_busy_first_then_queue():
    async def go():
        pool = WorkerPool()
        for i in range(2):
            w = pool.add(Worker(f"worker_{i}", "127.0.0.1", 1000 + i))
            pool.report_health(w, "idle", slots=2)
        leases = [await pool.wait(pool.enqueue("chat", f"s{i}")) for i in range(4)]
        assert [x.worker.id for x in leases] == ["worker_0", "worker_1", "worker_0", "worker_1"]  # least busy first
        assert pool.slot_counts() == {"slots_total": 4, "slots_busy": 4, "slots_free": 0}
        fifth = pool.enqueue("chat", "s4")
        assert not fifth.future.done() and fifth.position == 1 and fifth.estimated_wait_s == 15.0
        w1 = pool.workers["worker_1"]
        assert w1.info()["slots_busy"] == 2 and [s["session_id"] for s in w1.info()["sessions"]] == ["s1", "s3"]
        assert len(pool.running_tasks()) == 4 and pool.lease_of("s3", "chat") is leases[3]
        pool.report_health(w1, "busy", slots_busy=2, slots=2)  # its own count includes the gateway's leases
        assert w1.slots_free == 0 and not fifth.future.done()
        leases[3].release()
        assert fifth.future.done() and (await pool.wait(fifth)).worker is w1
        return pool

    asyncio.run(go())


def test_slots_held_by_others_and_down_workers_take_nothing():
    async def go():
        pool = WorkerPool()
        w = pool.add(Worker("worker_0", "127.0.0.1", 1000))
        pool.report_health(w, "busy", slots_busy=2, slots=3)  # two sessions the gateway did not give
        assert (w.status, w.slots_free) == ("busy_chat", 1)
        first = await pool.wait(pool.enqueue("chat", "a"))
        assert first.worker is w and w.slots_free == 0 and not pool.enqueue("chat", "b").future.done()
        pool.mark_down(w, "offline", "gone")
        assert w.status == "offline" and w.slots_free == 0 and pool.slot_free_times() == []
        pool.report_health(w, "idle", slots=1)  # a worker of one slot, before slots: session_active only
        assert w.slots_free == 0  # the gateway's lease holds it
        first.release()
        assert w.slots_busy == 1 and w.status == "busy_chat"  # the queued ticket took it

    asyncio.run(go())
