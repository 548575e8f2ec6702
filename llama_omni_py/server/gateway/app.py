"""The gateway as an ASGI app (Starlette; uvicorn serves it, and so can a Ray Serve ingress):
the demo's public API, the OpenAI API, read-outs and the page, all over one worker pool.
``run_gateway()`` serves it until SIGINT/SIGTERM; ``BackgroundGateway`` runs it in a thread."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from importlib import resources

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route, WebSocketRoute

from .. import auth
from ..limits import RateLimitedLog
from . import duplex_api, openai_api, realtime_api, status_api, turn_based_api
from .bodies import BodyLimit
from .config import GatewayConfig
from .service import Gateway

log = logging.getLogger(__name__)
_TYPES = {
    "html": "text/html; charset=utf-8",
    "js": "text/javascript; charset=utf-8",
    "css": "text/css; charset=utf-8",
    "ico": "image/x-icon",
}
STATIC = (
    *("index.html", "app.js", "style.css", "pcm.js", "common.js"),
    *("duplex.html", "duplex.js", "half_duplex.html", "half_duplex.js"),
)


async def page(request: Request) -> Response:
    name = request.path_params.get("name", "index.html")
    if name not in STATIC:
        return JSONResponse({"error": "no such file"}, 404)
    data = (resources.files("llama_omni_py.server.gateway") / "static" / name).read_bytes()
    return Response(data, media_type=_TYPES[name.rsplit(".", 1)[1]], headers={"Cache-Control": "no-store"})


async def favicon(request: Request) -> Response:
    """The pages' icon, at the path browsers ask for on their own (public: it reveals nothing)."""
    data = (resources.files("llama_omni_py.server.gateway") / "static" / "favicon.ico").read_bytes()
    return Response(data, media_type=_TYPES["ico"], headers={"Cache-Control": "public, max-age=86400"})


async def duplex_page(request: Request) -> Response:
    name = "half_duplex.html" if request.url.path == "/half_duplex" else "duplex.html"
    data = (resources.files("llama_omni_py.server.gateway") / "static" / name).read_bytes()
    return Response(data, media_type=_TYPES["html"], headers={"Cache-Control": "no-store"})


async def _not_found(request: Request, exc: HTTPException) -> JSONResponse:
    body = (
        {"error": f"no route for {request.method} {request.url.path}"}
        if exc.status_code == 404
        else {"error": exc.detail}
    )
    if request.url.path.startswith("/v1/"):
        body = {
            "error": {
                "message": str(body["error"]),
                "type": "invalid_request_error",
                "param": None,
                "code": "not_found" if exc.status_code == 404 else None,
            }
        }
    return JSONResponse(body, exc.status_code)


# and /static/...: no data behind them
PUBLIC_PATHS = frozenset({"/health", "/v1/health", "/", "/duplex", "/half_duplex", "/favicon.ico"})


class ApiKeys:
    """ASGI middleware: with API keys configured, every HTTP request and WebSocket handshake but
    the public paths needs one (auth.py: a Bearer or X-API-Key header; for browsers' WebSockets
    ?api_key= or the subprotocol openai-insecure-api-key.KEY). HTTP answers 401 in the
    interface's error shape; a WebSocket is refused before it opens (close 1008, HTTP 403 to
    the handshake)."""

    def __init__(self, app, keys: tuple):
        self.app, self.keys = app, keys

    async def __call__(self, scope, receive, send):
        path = scope.get("path", "")
        if (
            scope["type"] not in ("http", "websocket")
            or not self.keys
            or path in PUBLIC_PATHS
            or path.startswith("/static/")
        ):
            return await self.app(scope, receive, send)
        from starlette.datastructures import Headers

        token = (
            auth.bearer(Headers(scope=scope))
            or auth.query_token(scope.get("query_string", b"").decode("latin-1"))
            or auth.subprotocol_token(scope.get("subprotocols"))
        )
        if auth.allowed(token, self.keys):
            return await self.app(scope, receive, send)
        if scope["type"] == "websocket":
            await receive()  # websocket.connect
            await send({"type": "websocket.close", "code": 1008, "reason": "unauthorized"})
            return
        message = "a valid API key is required (Authorization: Bearer <key>)" if token is None else "invalid API key"
        if path.startswith("/v1/"):
            code = "invalid_api_key" if token else "missing_api_key"
            body = {"error": {"message": message, "type": "invalid_request_error", "param": None, "code": code}}
        else:
            body = {"detail": message, "success": False}
        await JSONResponse(body, 401, headers={"WWW-Authenticate": "Bearer"})(scope, receive, send)


def build_app(gateway: Gateway) -> Starlette:
    @contextlib.asynccontextmanager
    async def lifespan(app):
        await gateway.start()
        try:
            yield
        finally:
            await gateway.stop()

    routes = [
        Route("/health", status_api.health),
        Route("/v1/health", status_api.health),
        Route("/status", status_api.status),
        Route("/workers", status_api.workers),
        Route("/api/queue", status_api.queue),
        Route("/api/queue/{ticket_id}", status_api.ticket, methods=["GET", "DELETE"]),
        Route("/metrics", status_api.metrics),
        Route("/api/chat", turn_based_api.api_chat, methods=["POST"]),
        WebSocketRoute("/ws/chat", turn_based_api.ws_chat),
        WebSocketRoute("/ws/duplex/{session_id}", duplex_api.ws_duplex),
        WebSocketRoute("/ws/half_duplex/{session_id}", duplex_api.ws_half_duplex),
        Route("/api/half_duplex/stop", duplex_api.half_duplex_stop, methods=["POST"]),
        Route("/v1/chat/completions", openai_api.chat_completions, methods=["POST"]),
        WebSocketRoute("/v1/realtime", realtime_api.realtime),
        Route("/v1/models", openai_api.models),
        Route("/v1/models/{model}", openai_api.model),
        Route("/", page),
        Route("/duplex", duplex_page),
        Route("/half_duplex", duplex_page),
        Route("/static/{name}", page),
        Route("/favicon.ico", favicon),
    ]
    app = Starlette(
        routes=routes,
        lifespan=lifespan,
        exception_handlers={HTTPException: _not_found},
        middleware=[
            Middleware(BodyLimit, max_body_bytes=gateway.config.max_body_bytes),
            Middleware(ApiKeys, keys=gateway.config.api_keys),
        ],
    )
    app.state.gateway = gateway
    return app


class InvalidUtf8Lines(logging.Filter):
    """uvicorn logs a traceback for every text frame that is not UTF-8 (and closes it, 1007):
    anyone could flood the log. This keeps one line per ``interval_s``, counting the rest."""

    def __init__(self, interval_s: float):
        super().__init__()
        self.limited = RateLimitedLog(log, interval_s)

    def filter(self, record: logging.LogRecord) -> bool:
        if not str(record.msg).startswith("Invalid UTF-8 sequence"):
            return True
        self.limited("invalid_utf8", "a client sent a WebSocket text frame that is not UTF-8; closed it (1007)")
        return False


def quiet_invalid_utf8(interval_s: float) -> None:
    """Installs the filter on uvicorn's error log (once)."""
    logger = logging.getLogger("uvicorn.error")
    if not any(isinstance(f, InvalidUtf8Lines) for f in logger.filters):
        logger.addFilter(InvalidUtf8Lines(interval_s))


def uvicorn_config(app, cfg: GatewayConfig):
    import uvicorn

    quiet_invalid_utf8(cfg.log_interval_s)
    return uvicorn.Config(
        app,
        host=cfg.host,
        port=cfg.port,
        ws="websockets-sansio",
        ws_max_size=cfg.max_message_bytes,
        ws_ping_interval=cfg.ping_interval_s,
        ws_ping_timeout=cfg.ping_timeout_s,
        log_level="warning",
        lifespan="on",
        timeout_graceful_shutdown=5,
    )


def _server_class():
    import uvicorn

    class Server(uvicorn.Server):
        """uvicorn's server that tells its clients why it stops before it closes their sockets."""

        gateway: Gateway

        async def shutdown(self, sockets=None) -> None:
            with contextlib.suppress(Exception):  # nothing keeps the server from stopping
                await self.gateway.tell_shutdown()
            await super().shutdown(sockets)

        @contextlib.contextmanager
        def capture_signals(self):
            with super().capture_signals():
                yield
                self._captured_signals.clear()  # uvicorn would raise the signal again on the way out

    return Server


def _server(gateway: Gateway):
    server = _server_class()(uvicorn_config(build_app(gateway), gateway.config))
    server.gateway = gateway
    return server


def run_gateway(cfg: GatewayConfig, sources: list) -> None:
    """Serves until SIGINT or SIGTERM, then tells its clients, stops the workers and returns
    (exit status 0)."""
    gateway = Gateway(cfg, sources)
    server = _server(gateway)
    log.warning("gateway on http://%s:%d (%s)", cfg.host, cfg.port, ", ".join(s.describe() for s in sources))
    server.run()


class BackgroundGateway:
    """A gateway on its own event loop in a daemon thread (tests, benchmarks):
    ``with BackgroundGateway(cfg, sources) as g: g.url``."""

    def __init__(self, config: GatewayConfig, sources: list):
        self.gateway = Gateway(config, sources)
        self.server = _server(self.gateway)
        self.server.install_signal_handlers = lambda: None  # not the main thread
        self._thread = threading.Thread(target=lambda: asyncio.run(self.server.serve()), daemon=True)

    def __enter__(self) -> BackgroundGateway:
        self._thread.start()
        deadline = time.monotonic() + 120
        while not self.server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the gateway did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self._thread.join(60)

    @property
    def port(self) -> int:
        return self.server.servers[0].sockets[0].getsockname()[1]

    @property
    def url(self) -> str:
        return f"http://{self.gateway.config.host}:{self.port}"

    def wait_ready(self, timeout: float = 120.0, workers: int | None = None) -> str:
        """Waits until ``workers`` (default: all) are idle; returns the gateway state."""
        deadline = time.monotonic() + timeout
        pool = self.gateway.pool
        want = len(pool.workers) if workers is None else workers
        while time.monotonic() < deadline:
            if sum(w.status == "idle" for w in list(pool.workers.values())) >= want:
                break
            time.sleep(0.05)
        return self.gateway.state()
