"""Giving a finished session's memory back to the system. A conversation's large buffers (its
messages, audio, encoded utterances) are freed when its slot is, but glibc's allocator keeps
freed heap pages mapped, so the worker's RSS would stay at its peak after the close; collecting
the session's reference cycles and then ``malloc_trim(0)`` returns the free pages."""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging

log = logging.getLogger(__name__)
_libc = None


def _trim():
    global _libc
    if _libc is None:
        try:
            _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            _libc.malloc_trim.argtypes = [ctypes.c_size_t]
        except (OSError, AttributeError):  # not glibc: nothing to trim
            _libc = False
    return _libc.malloc_trim if _libc else None


def give_back() -> None:
    """Frees what ended sessions left (cycles), then returns free heap pages to the system."""
    gc.collect()
    trim = _trim()
    if trim is not None:
        trim(0)
