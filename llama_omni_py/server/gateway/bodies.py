"""HTTP request bodies, read with a limit on every route. ``BodyLimit`` (ASGI middleware) answers
413 to a request whose declared ``Content-Length`` passes its route's limit before anything of
the body is read; ``read_body`` refuses a body whose bytes so far pass the limit (a body sent
without a length) before it is held in memory, and turns a client that hangs up mid-body into
``BodyGone``. The routes that take a request (``/api/chat``, ``/v1/chat/completions``) allow
the gateway's ``max_body_bytes``; every other route ``SMALL_BODY_BYTES``."""

from __future__ import annotations

from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse

from .. import jsonio

SMALL_BODY_BYTES = 64 << 10  # a route that takes a small JSON object (a session id) or nothing
LARGE_BODY_PATHS = frozenset({"/api/chat", "/v1/chat/completions"})


class BodyTooLarge(ValueError):
    pass


class BodyGone(ValueError):
    """The client went away before its whole body arrived (there is nobody to answer)."""


def _too_large(limit: int) -> BodyTooLarge:
    size = f"{limit / 2**20:g} MiB" if limit >= 1 << 20 else f"{limit >> 10} KiB"
    return BodyTooLarge(f"the request body is larger than this route's limit of {size}")


async def read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _too_large(limit)
    chunks, size = [], 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise _too_large(limit)
            chunks.append(chunk)
    except ClientDisconnect:
        raise BodyGone("the client disconnected before its request body arrived") from None
    return b"".join(chunks)


async def read_json(request: Request, limit: int, what: str = "the body"):
    """The body as a JSON object; BodyTooLarge, BodyGone or jsonio.BadJson (all ValueErrors)."""
    return jsonio.loads(await read_body(request, limit), what)


def body_error(e: ValueError) -> tuple[int, str]:
    """The HTTP status and message for a body read_json refused."""
    return (413 if isinstance(e, BodyTooLarge) else 400), str(e)


def limit_for(path: str, max_body_bytes: int) -> int:
    return max_body_bytes if path in LARGE_BODY_PATHS else SMALL_BODY_BYTES


class BodyLimit:
    """ASGI middleware: a declared body over its route's limit gets 413 at once (OpenAI's error
    object on ``/v1/...``, ``{"detail", "success": false}`` elsewhere), nothing of it read."""

    def __init__(self, app, max_body_bytes: int):
        self.app, self.max_body_bytes = app, max_body_bytes

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            limit = limit_for(scope.get("path", ""), self.max_body_bytes)
            declared = dict(scope.get("headers") or ()).get(b"content-length", b"")
            if declared.isdigit() and int(declared) > limit:
                message = str(_too_large(limit))
                if scope.get("path", "").startswith("/v1/"):
                    err = {"message": message, "type": "invalid_request_error", "param": None}
                    body = {"error": {**err, "code": "request_too_large"}}
                else:
                    body = {"detail": message, "success": False}
                return await JSONResponse(body, 413, headers={"Connection": "close"})(scope, receive, send)
        return await self.app(scope, receive, send)
