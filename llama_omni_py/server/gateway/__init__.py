"""The gateway (``llama-omni serve``; docs/serving.md): one public port over a pool of workers
(one engine per accelerator, each with its session slots) and a FIFO queue. It computes nothing
and loads no compiled core: it relays.

Owns: app (the ASGI app), service (the pool, worker sources, health checks, metrics), pool and
worker_slots (the queue, leases, what it knows of each worker), workers and ray_workers (where
workers come from), backend_client (one /backend session), turns (one turn on a leased worker),
the APIs -- turn_based_api (the demo's /ws/chat, /api/chat), duplex_api (whole-life sessions:
/ws/duplex, /ws/half_duplex), realtime_api (/v1/realtime), openai_api with openai_request and
openai_stop (/v1/chat/completions), status_api -- bodies, client_channel, audio_codec,
audio_store, metrics, config, and static/ (the pages).

May import: the server's shared pieces (auth, jsonio, limits, pcm, realtime_events,
worker_options) and the base and data layers (errors, checks, constants, env, media); never a
worker module (a Ray actor starts one through ``server.worker``'s face only).
"""

from .app import BackgroundGateway, build_app, run_gateway
from .config import GatewayConfig
from .service import Gateway

__all__ = ["BackgroundGateway", "Gateway", "GatewayConfig", "build_app", "run_gateway"]
