"""WorkerServer, the worker: one engine of ``WorkerConfig.slots`` session slots, one
protocol session per slot, HTTP and WebSocket on one port (websockets' asyncio server).
``serve()`` runs it until SIGINT/SIGTERM, or a failed load when supervised (``llama-omni
worker``); ``BackgroundServer`` runs it in a thread (tests, benchmarks). The gateway (gateway/)
puts many of these behind one public API."""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import threading

from websockets.asyncio.server import serve as ws_serve

from ..lifeline import EXIT_LOAD_FAILED, LOAD_FAILED
from .backend.connection import Connection
from .blocking import use_blocking_pool
from .config import WorkerConfig
from .duplex.connection import DemoDuplexConnection
from .engine_host import EngineHost
from .half_duplex.connection import HalfDuplexConnection
from .memory import one_heap
from .realtime.connection import RealtimeConnection
from .realtime.full_duplex import RealtimeDuplexConnection
from .routes import BodyConnection, process_request
from .slot_socket import query

log = logging.getLogger(__name__)


class WorkerServer:
    """One worker: its EngineHost (``host``; tests give one that loads slowly or fails)
    and the protocol connections on its slots."""

    def __init__(self, config: WorkerConfig | None = None, host: EngineHost | None = None):
        self.config = config or WorkerConfig()
        self.host = host or EngineHost(self.config)
        self.sessions: dict[str, Connection] = {}
        self.half_duplex: dict[str, HalfDuplexConnection] = {}
        self.port: int | None = None
        self._ws = None
        self._load: asyncio.Task | None = None

    async def start(self) -> None:
        """Listens at once (health answers 503 loading) and loads the engine in the background."""
        worker = self.config
        use_blocking_pool(asyncio.get_running_loop(), worker.slots)  # blocking.py: what bounds the threads
        self._ws = await ws_serve(
            self._handle,
            worker.host,
            worker.port,
            process_request=self._route,
            create_connection=BodyConnection,
            max_size=worker.max_message_bytes,
            ping_interval=worker.ping_interval_s,
            ping_timeout=worker.ping_timeout_s,
            compression=None,
            open_timeout=worker.init_timeout_s,
        )
        self.port = self._ws.sockets[0].getsockname()[1]
        self._load = asyncio.create_task(self.host.load())
        log.warning("worker listening on http://%s:%d (WebSocket /backend, /health)", worker.host, self.port)

    async def load_failed(self) -> None:
        """Returns once the engine has failed to load (never, when it loads)."""
        await asyncio.shield(self._load)
        if self.host.state != "failed":
            await asyncio.Event().wait()

    def _route(self, connection, request):
        return process_request(self, connection, request)

    async def _handle(self, ws) -> None:
        path = ws.request.path.split("?", 1)[0]
        if path == "/ws/duplex":
            await DemoDuplexConnection(ws, self).run()
        elif path == "/ws/half_duplex":
            await HalfDuplexConnection(ws, self).run()
        elif path == "/v1/realtime":
            full = query(ws, "mode") == "full_duplex"
            await (RealtimeDuplexConnection if full else RealtimeConnection)(ws, self).run()
        else:
            await Connection(ws, self).run()

    async def close_session(self, session_id: str, reason: str | None = None) -> bool:
        """The HTTP control channel: True once the session is closed and its slot freed. The
        caller's reason (default ``client_closed``) becomes session.closed's ``reason``."""
        s = self.sessions.get(session_id)
        if s is None:
            return False
        await s.terminate(reason or "client_closed", code=1000)
        return True

    def stop_half_duplex(self, session_id: str | None = None) -> int:
        """Cuts the running reply of the half-duplex session (all of them when no id is given, as
        the demo's worker does); the number of replies cut."""
        conns = [c for sid, c in self.half_duplex.items() if session_id in (None, sid)]
        return sum(c.interrupt() for c in conns)

    async def stop(self) -> None:
        for s in list(self.sessions.values()):
            await s.terminate("server_shutdown", "the server is shutting down")
        if self._ws is not None:
            self._ws.close()
            await self._ws.wait_closed()
        if self._load is not None:
            await self._load
        await self.host.close()


def serve(config: WorkerConfig, announce: bool = False, exit_on_failed_load: bool = False) -> int:
    """Runs the server until SIGINT or SIGTERM; the process's exit status. ``announce``: print
    {"listening", "port"} as one JSON line on stdout once it listens (how a gateway learns a
    worker's port). ``exit_on_failed_load``: a failed load ends it with ``EXIT_LOAD_FAILED`` (and,
    when announcing, {"load_failed": error} on stdout first), so that whatever supervises it
    starts it again; otherwise it keeps answering /health with 503 and the error."""
    one_heap()  # before the engine loads: freed memory goes back to the system (memory.py)

    async def main() -> int:
        server = WorkerServer(config)
        await server.start()
        if announce:
            url = f"http://{config.host}:{server.port}"
            print(json.dumps({"listening": url, "port": server.port}), flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        ends = {asyncio.ensure_future(stop.wait())}
        if exit_on_failed_load:
            ends.add(asyncio.ensure_future(server.load_failed()))
        await asyncio.wait(ends, return_when=asyncio.FIRST_COMPLETED)
        for end in ends:
            end.cancel()
        failed = exit_on_failed_load and server.host.state == "failed"
        if failed:
            log.error("the engine failed to load; this worker exits (status %d)", EXIT_LOAD_FAILED)
            if announce:
                print(json.dumps({LOAD_FAILED: server.host.error}), flush=True)
        else:
            log.warning("shutting down")
        await server.stop()
        return EXIT_LOAD_FAILED if failed else 0

    return asyncio.run(main())


class BackgroundServer:
    """A WorkerServer on its own event loop in a daemon thread: ``with BackgroundServer(cfg) as s:
    s.url``. ``wait_ready()`` polls the engine state (not HTTP)."""

    def __init__(self, config: WorkerConfig, host: EngineHost | None = None):
        self.server = WorkerServer(config, host)
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="omni-server", daemon=True)

    def __enter__(self) -> BackgroundServer:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self.server.start(), self.loop).result(30)
        return self

    def __exit__(self, *exc) -> None:
        try:
            asyncio.run_coroutine_threadsafe(self.server.stop(), self.loop).result(120)
        finally:  # a stop that timed out still ends the loop and its thread
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(10)

    @property
    def url(self) -> str:
        return f"http://{self.server.config.host}:{self.server.port}"

    def wait_ready(self, timeout: float = 120.0) -> str:
        import time

        deadline = time.monotonic() + timeout
        while self.server.host.state == "loading" and time.monotonic() < deadline:
            time.sleep(0.05)
        return self.server.host.state
