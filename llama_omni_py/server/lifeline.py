"""How a worker process lives and dies with the gateway that started it (both sides use this).

A worker whose engine fails to load prints ``{"load_failed": error}`` on stdout (after the
``{"listening", "port"}`` line that gave its port) and exits with ``EXIT_LOAD_FAILED``; the
gateway restarts it as it restarts a worker that died, and tells waiting clients the error.

A worker ends with the process that started it (``--parent-pid``). A watcher thread waits for
the parent to exit -- on a pidfd where the kernel has them (Linux 5.3+: it wakes the moment the
parent is gone), else by looking at the parent PID every ``POLL_S`` -- then logs and ends the
process at once with ``os._exit``. Nothing is stopped gracefully: every client reached the worker
through the gateway, so nobody is left to tell, and a native call in flight (a turn on each slot)
need not finish first. The wait and the exit do not involve the event loop, so a busy loop or a
long native call (they release the GIL) cannot hold the worker up."""

from __future__ import annotations

import logging
import os
import select
import threading
import time

log = logging.getLogger(__name__)
POLL_S = 0.1  # where there are no pidfds
LOG_GRACE_S = 0.3  # for the last log line, at most
EXIT_STATUS = 1  # the gateway is gone
EXIT_LOAD_FAILED = 3  # the engine failed to load (reported on stdout as LOAD_FAILED first)
LOAD_FAILED = "load_failed"


def _parent_gone(parent_pid: int) -> bool:
    return os.getppid() != parent_pid


def _pidfd(parent_pid: int) -> int | None:
    """A pidfd of the parent, or None (no pidfds here, or the parent is already gone)."""
    try:
        fd = os.pidfd_open(parent_pid)
    except (AttributeError, OSError):
        return None
    if _parent_gone(parent_pid):  # the PID was the parent's, but it exited before the pidfd was open
        os.close(fd)
        return None
    return fd


def _wait_for_exit(parent_pid: int, fd: int | None) -> None:
    if fd is not None:
        while not select.select([fd], [], [])[0]:  # readable once the process has exited
            pass
        return
    while not _parent_gone(parent_pid):
        time.sleep(POLL_S)


def _exit_after(seconds: float) -> None:
    time.sleep(seconds)
    os._exit(EXIT_STATUS)


def die_with_parent(parent_pid: int) -> None:
    """Ends this process within milliseconds of ``parent_pid`` exiting (however it ended)."""
    fd = _pidfd(parent_pid)

    def watch() -> None:
        _wait_for_exit(parent_pid, fd)
        # the exit comes even when the log cannot be written (a full pipe nobody reads any more)
        threading.Thread(target=_exit_after, args=(LOG_GRACE_S,), name="lifeline-exit", daemon=True).start()
        log.warning("the gateway (pid %d) is gone; this worker ends now", parent_pid)
        for handler in logging.getLogger().handlers:
            handler.flush()
        os._exit(EXIT_STATUS)

    threading.Thread(target=watch, name="lifeline", daemon=True).start()
