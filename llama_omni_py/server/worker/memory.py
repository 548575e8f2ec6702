"""Giving a finished session's memory back to the system. A conversation's buffers (its messages,
audio, encoded utterances) are freed when its slot is, but the C allocator keeps freed pages
mapped, so without help the worker's RSS would stay at the session's peak after the close.

glibc (Linux) keeps freed memory in two places:

* free chunks inside its heaps, and the top of the main heap: ``malloc_trim(0)`` returns them;
* the top of each per-thread heap (an "arena": glibc gives each thread that allocates one of its
  own, up to 8 per core). It is returned only once it passes a threshold that glibc raises after
  large frees (up to 64 MB), and ``malloc_trim`` leaves it alone. A session's work runs on pool
  threads, so what it freed there stayed: up to 13 MB after a session on the tiny set.

So a worker process allocates from the main heap alone (``one_heap()``: ``M_ARENA_MAX`` 1, set by
``serve()`` before the engine loads and the worker starts its threads; a program that embeds a
WorkerServer keeps its own allocator settings), and ``give_back`` after each session collects the
session's reference cycles and trims; docs/serving.md (the Realtime API's memory) has the figures.
Elsewhere (macOS, musl) both are no-ops, and an arena limit the user set (``MALLOC_ARENA_MAX``,
``GLIBC_TUNABLES``) is left as it is."""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging
import os

log = logging.getLogger(__name__)
M_ARENA_MAX = -8  # mallopt's parameter (malloc.h)
_libc = None


def _glibc():
    """The C library when it is glibc (None elsewhere)."""
    global _libc
    if _libc is None:
        _libc = False
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            libc.gnu_get_libc_version  # noqa: B018 -- glibc alone has it
            libc.malloc_trim.argtypes = [ctypes.c_size_t]
            libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
            _libc = libc
        except (OSError, AttributeError):  # not glibc: nothing to tune or trim
            pass
    return _libc or None


def one_heap() -> bool:
    """Threads that have not allocated yet allocate from the main heap, whose free memory
    ``malloc_trim`` returns whole; whether it applied (glibc, and no arena limit set by the user)."""
    if "MALLOC_ARENA_MAX" in os.environ or "arena_max" in os.environ.get("GLIBC_TUNABLES", ""):
        return False
    libc = _glibc()
    return bool(libc and libc.mallopt(M_ARENA_MAX, 1))


def give_back() -> None:
    """Frees what ended sessions left (cycles), then returns free heap pages to the system."""
    gc.collect()
    libc = _glibc()
    if libc is not None:
        libc.malloc_trim(0)
