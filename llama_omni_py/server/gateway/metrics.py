"""Prometheus metrics of one gateway (its own registry, so several gateways can live in one
process): turns, time to first audio, RTF, queue wait, refusals, queue length, workers by state,
session slots (in all and per worker)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

CONTENT_TYPE = CONTENT_TYPE_LATEST
SECONDS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
RTF = (0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 4.0, 8.0)


class GatewayMetrics:
    def __init__(self, pool_view=None):
        r = self.registry = CollectorRegistry()
        self.turns = Counter(
            "omni_turns",
            "Turns by API and outcome (completed, failed, refused, cancelled, error)",
            ["api", "outcome"],
            registry=r,
        )
        self.ttfa = Histogram(
            "omni_time_to_first_audio_seconds",
            "From the turn's start on a worker to its first audio",
            buckets=SECONDS,
            registry=r,
        )
        self.rtf = Histogram("omni_rtf", "Turn wall time / audio duration", buckets=RTF, registry=r)
        self.queue_wait = Histogram(
            "omni_queue_wait_seconds", "Time a request waited for a worker", buckets=SECONDS, registry=r
        )
        self.refusals = Counter(
            "omni_refusals", "Requests refused (queue_full, no_worker, loading)", ["reason"], registry=r
        )
        self.queue_length = Gauge("omni_queue_length", "Tickets waiting for a worker", registry=r)
        self.worker_restarts = Counter(
            "omni_worker_restarts", "Local worker processes started again after they died", registry=r
        )
        self.worker_failures = Counter(
            "omni_worker_failures", "Turns that lost their worker after part of the reply was sent", registry=r
        )
        self.workers = Gauge("omni_workers", "Workers by state", ["status"], registry=r)
        self.slots = Gauge("omni_slots", "Session slots of all workers: total, busy, free", ["state"], registry=r)
        self.worker_slots = Gauge(
            "omni_worker_slots", "Session slots of each worker: total, busy, free", ["worker", "state"], registry=r
        )
        self._pool_view = pool_view

    def observe_done(self, done: dict) -> None:
        m = done.get("metrics") or {}
        if m.get("time_to_first_audio_ms") is not None:
            self.ttfa.observe(m["time_to_first_audio_ms"] / 1000)
        if m.get("rtf") is not None:
            self.rtf.observe(m["rtf"])

    def render(self) -> bytes:
        if self._pool_view is not None:
            pool = self._pool_view()
            self.queue_length.set(len(pool.queue))
            for status, n in pool.counts().items():
                self.workers.labels(status=status).set(n)
            for key, n in pool.slot_counts().items():
                self.slots.labels(state=key.removeprefix("slots_")).set(n)
            for w in pool.workers.values():
                for state, n in (("total", w.slots), ("busy", w.slots_busy), ("free", w.slots_free)):
                    self.worker_slots.labels(worker=w.id, state=state).set(n)
        return generate_latest(self.registry)
