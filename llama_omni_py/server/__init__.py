"""The demo server: MiniCPM-o demo backend protocol (turn_based) over WebSocket, health, a
browser page, one engine per process. ``llama-omni serve``; protocol in docs/server-protocol.md."""

from .worker.app import BackgroundServer, OmniServer, serve
from .worker.config import ServerConfig

__all__ = ["BackgroundServer", "OmniServer", "ServerConfig", "serve"]
