"""The gateway's state: the worker pool, where its workers come from, their health checks,
metrics and the rate-limited refusal log. The HTTP/WebSocket routes (app.py) read and drive it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from ..limits import RateLimitedLog
from .audio_store import AudioStore
from .backend_client import WorkerUnavailable, health
from .client_channel import SlowReader
from .config import GatewayConfig
from .metrics import GatewayMetrics
from .pool import WorkerPool
from .worker_slots import Worker

log = logging.getLogger(__name__)


class Gateway:
    def __init__(self, config: GatewayConfig, sources: list):
        self.config = config
        self.sources = sources  # each: async start() -> [Worker], async stop(), describe() -> str
        self.pool = WorkerPool(config.max_queue_size, config.queue_update_s)
        self.metrics = GatewayMetrics(lambda: self.pool)
        self.refusal_log = RateLimitedLog(log, config.log_interval_s)
        self.audio = AudioStore(config.audio_ttl_s)
        self.started = time.time()
        self.clients: dict = {}  # ClientChannel -> its protocol's Face (duplex_api): told of a shutdown
        self._health_task: asyncio.Task | None = None
        self._supervisors: list[asyncio.Task] = []

    async def start(self) -> None:
        try:
            for source in self.sources:
                for worker in await source.start():
                    self.pool.add(worker)
        except BaseException:
            for source in self.sources:  # no orphaned worker processes or actors
                await source.stop()
            raise
        await self.check_all()
        self._health_task = asyncio.create_task(self._health_loop())
        for source in self.sources:  # sources that own their workers' processes restart them
            if hasattr(source, "supervise"):
                self._supervisors.append(asyncio.create_task(source.supervise(self)))

    async def stop(self) -> None:
        for task in [self._health_task, *self._supervisors]:
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        for source in self.sources:
            await source.stop()

    async def tell_shutdown(self, grace_s: float = 2.0) -> None:
        """Every client connection, running or queued, gets an error in its protocol saying the
        server is stopping, then a close 1012 (service restart), before uvicorn drops them."""
        channels = list(self.clients.items())
        for channel, face in channels:
            with contextlib.suppress(SlowReader):
                channel.put(face.error("the server is shutting down: connect again later", "server_shutdown"))
            channel.close(1012, "server shutting down")
        if channels:
            await asyncio.gather(*(channel.closed(grace_s) for channel, _ in channels))

    # -- health of the workers ---------------------------------------------------------------
    async def _health_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.health_interval_s)
            await self.check_all()
            failed = self.pool.fail_stranded(self.config.no_worker_grace_s)
            if failed:
                self.metrics.refusals.labels(reason="no_worker").inc(failed)
                log.warning("%d queued request(s) failed: no live worker could serve them", failed)

    async def check_all(self) -> None:
        await asyncio.gather(*(self.check(w) for w in list(self.pool.workers.values())))

    async def check(self, worker: Worker) -> None:
        try:
            status, body = await health(worker.url)
        except WorkerUnavailable as e:
            if worker.load_error is not None:  # gone after its load failed (exited, or being restarted)
                self.pool.mark_load_failed(worker, worker.load_error)
            else:
                self.pool.report_health(worker, "offline", str(e))
            return
        facts = {}
        if body.get("device"):
            facts["device"] = body["device"]
        if body.get("capabilities"):
            facts["capabilities"] = frozenset(body["capabilities"])
        if "random_weights" in body:
            facts["random_weights"] = body["random_weights"] is True
        if isinstance(body.get("slots"), int) and body["slots"] >= 1:
            facts["slots"] = body["slots"]
        if status == 200 and body.get("status") == "ready":
            active = bool(body.get("session_active"))
            taken = body.get("slots_busy")  # a worker of one slot before slots: session_active says it
            taken = taken if isinstance(taken, int) else None
            self.pool.report_health(worker, "busy" if active else "idle", None, taken, **facts)
        elif body.get("status") == "loading":
            self.pool.report_health(worker, "loading", None, **facts)
        elif body.get("status") == "error" and body.get("error"):  # its engine failed to load
            self.pool.report_health(worker, "error", None, **facts)
            self.pool.mark_load_failed(worker, str(body["error"]))
        else:
            self.pool.report_health(worker, "error", body.get("error") or f"/health answered {status}", **facts)

    # -- readiness ---------------------------------------------------------------------------
    def state(self) -> str:
        """ready (some worker can serve), loading (none yet, some still loading) or unavailable."""
        c = self.pool.counts()
        if c["idle"] or any(self.pool.workers[w].busy for w in self.pool.workers):
            return "ready"
        return "loading" if c["loading"] else "unavailable"
