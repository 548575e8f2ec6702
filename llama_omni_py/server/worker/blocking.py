"""The worker's pool for blocking calls. Every ``asyncio.to_thread`` and ``run_in_executor(None,
...)`` of the worker runs on it: a duplex unit pushed, a VAD append, an utterance encoded, a slot
emptied, a finished session's memory given back, the engine loaded or closed. asyncio's own
default pool starts a thread whenever a call finds none idle, up to min(32, CPUs + 4), and keeps
each one for the life of the process, so its size follows the host, not the work. This pool is
bounded by the slots instead, and its threads are named ``omni-block_N`` (also the name the
operating system shows, and the name that the threads a pool thread starts inherit).

A slot has at most ``PER_SLOT`` blocking calls at once: its session's current call (a session
makes one at a time), one that an ended session left running (a cancelled ``to_thread`` call
runs to its end) and the memory given back after the slot was emptied. ``ENGINE_WIDE`` is the
engine's load or close. A call beyond the bound waits for a free thread; no running call waits
for one still waiting, so waiting cannot deadlock.

A pool thread that ran a CPU graph (an utterance encoded) keeps the OpenMP team the CPU backend
started for it (the graph's threads less one) as long as the thread lives: the bound on the pool
bounds those too (docs/serving.md, "Threads")."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

from ...orchestration.channels import name_os_thread

PER_SLOT = 3
ENGINE_WIDE = 1
THREAD_PREFIX = "omni-block"


def max_threads(slots: int) -> int:
    """The most threads the pool of a worker of ``slots`` slots starts."""
    return PER_SLOT * max(1, slots) + ENGINE_WIDE


def use_blocking_pool(loop: asyncio.AbstractEventLoop, slots: int) -> ThreadPoolExecutor:
    """Makes a bounded, named pool ``loop``'s default executor (what ``asyncio.to_thread`` uses);
    the pool it installed. ``asyncio.run`` shuts it down with the loop."""
    pool = ThreadPoolExecutor(max_threads(slots), thread_name_prefix=THREAD_PREFIX, initializer=name_os_thread)
    loop.set_default_executor(pool)
    return pool
