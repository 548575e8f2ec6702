"""The demo server: MiniCPM-o demo backend protocol (turn_based) over WebSocket, health, a
browser page, one engine per process. ``llama-omni serve``; protocol in docs/server-protocol.md."""

from .app import BackgroundServer, OmniServer, serve
from .config import ServerConfig

__all__ = ["BackgroundServer", "OmniServer", "ServerConfig", "serve"]
