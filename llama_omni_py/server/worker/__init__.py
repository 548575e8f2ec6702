"""A worker (``llama-omni worker``): one OmniEngine of ``WorkerConfig.slots`` session
slots on one device, its protocols on one port (websockets' asyncio server), one protocol
session per slot. docs/server-protocol.md.

Owns: app (WorkerServer, BackgroundServer, serve), config (WorkerConfig), engine_host (EngineHost:
the engine's loading, health, slot admission), slot_socket (what every slot-holding WebSocket
shares), routes (plain HTTP: /health, close), memory, and one folder per protocol:

    backend/      /backend: the MiniCPM-o backend protocol (turn_based and full_duplex modes)
    duplex/       /ws/duplex: the demo's full-duplex protocol
    half_duplex/  /ws/half_duplex: the demo's hands-free mode
    realtime/     /v1/realtime: the OpenAI Realtime API (hands-free, or ?mode=full_duplex)

May import: the server's shared pieces (auth, jsonio, limits, pcm, realtime_events) and every
layer below the apps (session.py, duplex/, voice/, ...); never the gateway. Importing it loads
nothing: its names resolve on first use.
"""

from ..._lazy import lazy

__getattr__, __dir__ = lazy(
    __name__,
    {
        "WorkerServer": "llama_omni_py.server.worker.app",
        "BackgroundServer": "llama_omni_py.server.worker.app",
        "serve": "llama_omni_py.server.worker.app",
        "WorkerConfig": "llama_omni_py.server.worker.config",
        "EngineHost": "llama_omni_py.server.worker.engine_host",
    },
)
