"""Who may use a server: the token a request carries, checked in constant time. The gateway takes
API keys from its clients (``Authorization: Bearer KEY``, ``X-API-Key: KEY``, or, on a WebSocket,
which browsers cannot give headers, ``?api_key=KEY`` or the subprotocol
``openai-insecure-api-key.KEY``); a worker takes one shared secret from its
gateway (``Authorization: Bearer SECRET``), so that nobody else can open sessions on it."""

from __future__ import annotations

import hmac
from urllib.parse import parse_qs


def bearer(headers) -> str | None:
    """The token of an ``Authorization: Bearer ...`` or ``X-API-Key`` header (any mapping with
    case-insensitive get), or None."""
    value = headers.get("authorization") or ""
    if value[:7].lower() == "bearer ":
        return value[7:].strip() or None
    return (headers.get("x-api-key") or "").strip() or None


def query_token(query: str) -> str | None:
    values = parse_qs(query or "").get("api_key")
    return values[0] if values else None


SUBPROTOCOL_KEY = "openai-insecure-api-key."  # how OpenAI's browser Realtime client passes its key


def subprotocol_token(subprotocols) -> str | None:
    """The key a browser WebSocket offers as the subprotocol ``openai-insecure-api-key.KEY`` (a
    browser can set no header but ``Sec-WebSocket-Protocol``), or None."""
    for p in subprotocols or ():
        if p.startswith(SUBPROTOCOL_KEY):
            return p[len(SUBPROTOCOL_KEY) :] or None
    return None


def allowed(token: str | None, keys) -> bool:
    """Whether ``token`` is one of ``keys`` (each compared in constant time)."""
    if not token:
        return False
    given = token.encode()
    return any(hmac.compare_digest(given, k.encode()) for k in keys)


def authorization_header(secret: str | None) -> dict:
    return {"Authorization": f"Bearer {secret}"} if secret else {}
