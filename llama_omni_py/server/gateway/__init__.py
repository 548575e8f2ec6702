"""The gateway: the demo's public API (turn-based chat, queue, status), the OpenAI API and the
page over a pool of engine workers (one engine per accelerator, each serving /backend to one
session at a time), with a FIFO queue. ``llama-omni serve``; docs/serving.md."""

from .app import BackgroundGateway, build_app, run_gateway
from .config import GatewayConfig
from .service import Gateway

__all__ = ["BackgroundGateway", "Gateway", "GatewayConfig", "build_app", "run_gateway"]
