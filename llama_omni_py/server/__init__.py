"""Serving: workers and the gateway in front of them (``llama-omni worker``, ``llama-omni
serve``; docs/serving.md, docs/server-protocol.md). Needs the ``server`` extra.

    worker/    one engine per process: the backend protocol on /backend (turn-based and full
               duplex), the demo's /ws/duplex and /ws/half_duplex, the OpenAI Realtime API on
               /v1/realtime, /health -- one folder or module per protocol
    gateway/   the public face: a FIFO queue over a pool of workers, the demo's chat API, the
               OpenAI API, the duplex relays, status and metrics, the pages (static/)
    auth, jsonio, limits, lifeline, pcm, realtime_events, worker_options
               what both sides share

The gateway never imports the worker's modules (it speaks to workers over the wire; a Ray actor
starts one through ``server.worker``'s face), and neither side loads the compiled core on import.
This package imports nothing until a name is used.
"""

from .._lazy import lazy

__getattr__, __dir__ = lazy(
    __name__,
    {
        "BackgroundServer": "llama_omni_py.server.worker.app",
        "WorkerServer": "llama_omni_py.server.worker.app",
        "serve": "llama_omni_py.server.worker.app",
        "WorkerConfig": "llama_omni_py.server.worker.config",
    },
)
