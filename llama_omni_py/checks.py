"""Argument checks at the API boundary: every public entry point validates its arguments here,
so a bad value becomes a typed error naming it instead of a crash inside the native core.

Config objects raise :class:`ConfigError` (with ``field``); call arguments raise
:class:`InvalidArgumentError`. Both are ValueErrors.
"""

from __future__ import annotations

import base64
import binascii
import logging
import os
import secrets

from .errors import ConfigError, InvalidArgumentError

log = logging.getLogger(__name__)

SEED_MAX = 2**32 - 1
RANDOM_SEED = -1  # as in llama.cpp: draw a fresh seed


def usable_cpus() -> list[int]:
    """CPUs this process may run on (its affinity mask), ascending."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def is_int(value) -> bool:
    """An integer that is not a bool (True is an int in Python, never a count here)."""
    return isinstance(value, int) and not isinstance(value, bool)


def int_in(name: str, value, lo: int, hi: int | None = None, *, config: bool = True) -> int:
    """``value`` as an int in lo..hi (hi None: no upper bound)."""
    ok = is_int(value) and value >= lo and (hi is None or value <= hi)
    if not ok:
        rng = f"{lo}..{hi}" if hi is not None else f">= {lo}"
        _fail(name, f"must be an integer in {rng}, got {value!r}", config)
    return value


def number_in(name: str, value, lo: float, hi: float, *, config: bool = True, lo_open: bool = False) -> float:
    """A finite int/float in [lo, hi] (or (lo, hi] with lo_open)."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and lo <= value <= hi
    ok = ok and not (lo_open and value == lo)
    if not ok:
        _fail(name, f"must be a number in {'(' if lo_open else '['}{lo}, {hi}], got {value!r}", config)
    return float(value)


def threads(name: str, value, *, config: bool = True, cpus: int | None = None) -> int | None:
    """A thread count: None (the caller's default) or an int >= 1. More threads than usable CPUs
    only adds contention, so such a count is capped with a warning."""
    if value is None:
        return None
    int_in(name, value, 1, None, config=config)
    limit = cpus if cpus is not None else len(usable_cpus())
    if value > limit:
        log.warning("%s=%d is more than the %d CPUs this process may use; using %d", name, value, limit, limit)
        return limit
    return value


def seed(value, name: str = "seed", *, config: bool = False) -> int:
    """-1 draws a random seed (as llama.cpp does); else an integer in 0..2**32-1."""
    if is_int(value) and value == RANDOM_SEED:
        return secrets.randbelow(SEED_MAX + 1)
    if not (is_int(value) and 0 <= value <= SEED_MAX):
        _fail(name, f"must be -1 (random) or an integer in 0..{SEED_MAX}, got {value!r}", config)
    return value


def text(value, name: str = "text") -> str:
    """A str that UTF-8 can encode (no lone surrogates): what the tokenizer needs."""
    if not isinstance(value, str):
        raise InvalidArgumentError(f"{name} must be a string, got {type(value).__name__}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise InvalidArgumentError(f"{name} is not valid Unicode: {e.reason} at index {e.start}") from None
    return value


def choice(name: str, value, allowed: tuple, *, config: bool = True):
    if value not in allowed:
        _fail(name, f"must be one of {', '.join(map(repr, allowed))}, got {value!r}", config)
    return value


def flag(name: str, value) -> bool:
    """ConfigError unless ``value`` is True or False."""
    if not isinstance(value, bool):
        raise ConfigError(name, f"must be True or False, got {value!r}")
    return value


def instance(name: str, value, cls: type):
    """ConfigError unless ``value`` is a ``cls``."""
    if not isinstance(value, cls):
        raise ConfigError(name, f"must be a {cls.__name__}, got {type(value).__name__}")
    return value


def that(name: str, ok, message: str) -> None:
    """ConfigError(name, message) unless ``ok``."""
    if not ok:
        raise ConfigError(name, message)


def listen_address(host, port) -> None:
    """A server's host and port fields (port 0: any free port)."""
    that("host", isinstance(host, str) and host, "must be a host name or address")
    that("port", is_int(port) and 0 <= port <= 65535, "must be an integer in 0..65535")


def base64_bytes(value, name: str) -> bytes:
    """Strict base64 (no stray characters) of a non-empty string; ValueError naming ``name``
    otherwise (the wire layers turn it into their own error type)."""
    if not isinstance(value, str) or not value:
        raise ValueError(f"{name} must be a non-empty base64 string")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as e:
        raise ValueError(f"{name} is not valid base64: {e}") from None


def _fail(name: str, message: str, config: bool):
    if config:
        raise ConfigError(name, message)
    raise InvalidArgumentError(f"{name} {message}")
