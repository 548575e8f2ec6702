"""What the gateway knows of one worker: where it is, what it can serve, its health, and
its session slots -- how many it has (its /health's ``slots``), which the gateway's own leases
hold, and how many others hold (sessions the gateway did not give it). A worker serves as many
sessions at once as it has slots (docs/serving.md, "Slots"). The session types and worker
statuses of the pool live here too."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone


@dataclass(frozen=True)
class SessionType:
    name: str  # request_type in /status and /api/queue
    busy_status: str  # the worker's status while it serves this type
    capability: str  # what a worker must advertise to serve it
    eta_s: float  # first guess of a session's length, until the running average has 3 samples
    whole_life: bool  # holds the slot for the session's whole life (duplex), not one request


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
# what the operator of a pool without a capability is told to do about it
CAPABILITY_HINTS = {
    "half_duplex": "a worker serves these once the voice extra is installed: pip install 'llama-omni-py[voice]'",
}
BUSY = {t.busy_status for t in SESSION_TYPES.values()} | {"duplex_paused"}
ALIVE = BUSY | {"idle", "loading"}  # a worker in one of these may still serve
STATUSES = ("idle", *sorted(BUSY), "loading", "error", "offline")
DOWN = ("loading", "error", "offline")  # health states in which a worker serves nothing


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
    health: str = "loading"  # ready, loading, error or offline: the last health check's (or the gateway's) finding
    slots: int = 1  # sessions it serves at once (its /health's `slots`)
    external: int = 0  # slots held by sessions the gateway did not give it (its /health's `slots_busy`)
    leases: list = field(default_factory=list)  # the gateway's sessions on it (pool.Lease), oldest first
    error: str | None = None
    load_error: str | None = None  # why its engine failed to load, until it reports ready again
    total_requests: int = 0
    total_ms: float = 0.0
    last_heartbeat: str | None = None
    restarts: int = 0  # times the gateway started this worker again after it died
    random_weights: bool = False  # it runs a generated set (its /health says): replies are gibberish
    secret: str | None = field(default=None, repr=False)  # what the worker requires of this gateway

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def status(self) -> str:
        """idle (ready, no session), the busy status of its newest session (busy_chat, duplex_active,
        duplex_paused, ...), or its health when down (loading, error, offline)."""
        if self.health in DOWN:
            return self.health
        if self.leases:
            return self.leases[-1].status
        return "busy_chat" if self.external else "idle"

    @property
    def busy(self) -> bool:
        return self.status in BUSY

    @property
    def may_serve(self) -> bool:
        """It serves, or may soon: up, or loading -- but not a restart of a worker whose engine
        failed to load (that one counts once it reports ready)."""
        return self.status in ALIVE and self.load_error is None

    @property
    def trouble(self) -> str | None:
        """Why it does not serve, when known: a failed load (until it reports ready), else its error."""
        return f"its engine failed to load: {self.load_error}" if self.load_error else self.error

    @property
    def leased(self) -> bool:
        """The gateway has given it a session (its own state wins over what /health reported)."""
        return bool(self.leases)

    @property
    def slots_busy(self) -> int:
        return min(self.slots, len(self.leases) + self.external)

    @property
    def slots_free(self) -> int:
        """Slots a new session can take now (none while the worker is down)."""
        return 0 if self.health in DOWN else max(0, self.slots - len(self.leases) - self.external)

    def report_slots(self, slots: int, busy: int) -> None:
        """What its /health said: ``slots`` in all, ``busy`` of them taken (the gateway's leases
        among them; a slot it released may still read busy until the worker has emptied it)."""
        self.slots = max(1, slots)
        self.external = max(0, busy - len(self.leases))

    def info(self) -> dict:
        newest = self.leases[-1] if self.leases else None
        return {
            "worker_id": self.id,
            "host": self.host,
            "port": self.port,
            "gpu_id": self.gpu_id,
            "device": self.device,
            "status": self.status,
            "error": self.error,
            "slots": self.slots,
            "slots_busy": self.slots_busy,
            "slots_free": self.slots_free,
            "sessions": [lease.info() for lease in self.leases],
            "current_session_id": newest.ticket.session_id if newest else None,
            "total_requests": self.total_requests,
            "avg_inference_time_ms": round(self.total_ms / self.total_requests, 1) if self.total_requests else 0.0,
            "last_heartbeat": self.last_heartbeat,
            "current_request_type": newest.type.name if newest else None,
            "task_started_at": newest.started_at if newest else None,
            "capabilities": sorted(self.capabilities),
            "restarts": self.restarts,
        }
