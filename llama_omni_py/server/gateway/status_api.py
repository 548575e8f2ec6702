"""The gateway's read-outs: ``/health`` (per-worker state, queue length), ``/status``,
``/workers``, ``/api/queue`` (and one ticket, cancel), ``/metrics`` (Prometheus)."""

from __future__ import annotations

from datetime import datetime, timezone

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from .metrics import CONTENT_TYPE


def _gw(request: Request):
    return request.app.state.gateway


async def health(request: Request) -> JSONResponse:
    """200 when a worker can serve (idle or busy: requests queue), 503 while every worker is
    still loading or none is usable. Slots: per worker and in all (docs/serving.md, "Slots")."""
    gw = _gw(request)
    state = gw.state()
    body = {
        "status": {"ready": "healthy", "loading": "loading"}.get(state, "unavailable"),
        "timestamp": datetime.now(timezone.utc).isoformat(),
        "queue_length": len(gw.pool.queue),
        **gw.pool.slot_counts(),
        # a worker runs a generated set: the pages say its replies are gibberish by design
        "random_weights": any(w.random_weights for w in gw.pool.workers.values()),
        "workers": [
            {
                "worker_id": w.id,
                "status": w.status,
                "device": w.device,
                "error": w.error,
                "slots": w.slots,
                "slots_busy": w.slots_busy,
                "slots_free": w.slots_free,
            }
            for w in gw.pool.workers.values()
        ],
    }
    return JSONResponse(body, 200 if state == "ready" else 503)


async def status(request: Request) -> JSONResponse:
    gw = _gw(request)
    c = gw.pool.counts()
    busy = sum(c[s] for s in ("busy_chat", "busy_half_duplex"))
    return JSONResponse(
        {
            "gateway_healthy": gw.state() == "ready",
            "total_workers": len(gw.pool.workers),
            "idle_workers": c["idle"],
            "busy_workers": busy,
            "duplex_workers": c["duplex_active"] + c["duplex_paused"],
            "loading_workers": c["loading"],
            "error_workers": c["error"],
            "offline_workers": c["offline"],
            **gw.pool.slot_counts(),
            "queue_length": len(gw.pool.queue),
            "max_queue_size": gw.pool.max_queue_size,
            "running_tasks": gw.pool.running_tasks(),
        }
    )


async def workers(request: Request) -> JSONResponse:
    pool = _gw(request).pool
    ws = [w.info() for w in pool.workers.values()]
    return JSONResponse({"total": len(ws), **pool.slot_counts(), "workers": ws})


async def queue(request: Request) -> JSONResponse:
    return JSONResponse(_gw(request).pool.queue_status())


async def ticket(request: Request) -> JSONResponse:
    pool, tid = _gw(request).pool, request.path_params["ticket_id"]
    if request.method == "DELETE":
        return JSONResponse({"success": pool.cancel(tid)})
    t = pool.ticket(tid)
    if t is None:
        return JSONResponse({"found": False, "message": "Ticket not in queue (may have been assigned or cancelled)"})
    return JSONResponse({"found": True, "ticket": t.info()})


async def metrics(request: Request) -> Response:
    return Response(_gw(request).metrics.render(), media_type=CONTENT_TYPE)
