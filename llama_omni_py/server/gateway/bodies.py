"""HTTP request bodies, read with a limit: a body larger than the gateway's ``max_body_bytes`` is
refused (413) as soon as its declared length or its bytes so far pass the limit, before it is
held in memory."""

from __future__ import annotations

from starlette.requests import Request


class BodyTooLarge(ValueError):
    pass


def _too_large(limit: int) -> BodyTooLarge:
    return BodyTooLarge(f"the request body is larger than this server's limit of {limit / 2**20:g} MiB")


async def read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _too_large(limit)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise _too_large(limit)
        chunks.append(chunk)
    return b"".join(chunks)
