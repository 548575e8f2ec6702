"""JSON from clients, read one way everywhere: every HTTP body and WebSocket message of the gateway
and the workers goes through :func:`loads`, which turns whatever a client can send -- bytes that
are not UTF-8, text that is not JSON, nesting deep enough to exhaust the parser's recursion, a
top level of the wrong type, NaN, Infinity or a number beyond a double -- into one
:class:`BadJson` (a ValueError) that each interface maps to its own error shape. Nothing a client
sends reaches a handler as an uncaught exception."""

from __future__ import annotations

import json
import math

MAX_DEPTH = 64  # deeper than any message of our protocols nests


class BadJson(ValueError):
    """The client's JSON could not be used; the message says why, for the client."""


def _depth(obj) -> int:
    """Nesting depth of parsed JSON, without recursion."""
    deepest, stack = 0, [(obj, 1)]
    while stack:
        node, d = stack.pop()
        deepest = max(deepest, d)
        if isinstance(node, dict):
            stack.extend((v, d + 1) for v in node.values() if isinstance(v, (dict, list)))
        elif isinstance(node, list):
            stack.extend((v, d + 1) for v in node if isinstance(v, (dict, list)))
    return deepest


def _constant(name: str):
    raise ValueError(f"{name} is not a JSON value")


def _finite(text: str) -> float:
    x = float(text)
    if not math.isfinite(x):
        raise ValueError(f"{text} is out of range for a number")
    return x


def loads(data, what: str = "the request", expect: type | None = dict, max_depth: int = MAX_DEPTH):
    """Parsed JSON of ``data`` (str or bytes), at most ``max_depth`` levels deep and, with
    ``expect``, of that top-level type; BadJson otherwise."""
    if isinstance(data, (bytes, bytearray, memoryview)):
        try:
            data = bytes(data).decode("utf-8")
        except UnicodeDecodeError:
            raise BadJson(f"{what} is not UTF-8 text") from None
    if not isinstance(data, str) or not data.strip():
        raise BadJson(f"{what} is empty; send a JSON object")
    try:
        obj = json.loads(data, parse_constant=_constant, parse_float=_finite)
    except RecursionError:
        raise BadJson(f"{what} nests deeper than {max_depth} levels") from None
    except ValueError as e:
        raise BadJson(f"{what} is not JSON: {e}") from None
    if _depth(obj) > max_depth:
        raise BadJson(f"{what} nests deeper than {max_depth} levels")
    if expect is not None and not isinstance(obj, expect):
        raise BadJson(f"{what} must be a JSON {'object' if expect is dict else expect.__name__}")
    return obj
