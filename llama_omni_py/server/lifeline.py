"""A worker process that ends with the process that started it (the gateway): on Linux the kernel
sends it SIGTERM when the parent dies (PR_SET_PDEATHSIG); everywhere, a watchdog thread looks at
the parent once a second, sends the same SIGTERM, and ends the process outright if the graceful
stop has not done so within ``grace_s``."""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import sys
import threading
import time

log = logging.getLogger(__name__)
PR_SET_PDEATHSIG = 1


def _parent_gone(parent_pid: int) -> bool:
    return os.getppid() != parent_pid


def die_with_parent(parent_pid: int, grace_s: float = 30.0) -> None:
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM))
        except (OSError, AttributeError) as e:  # the watchdog still covers it
            log.warning("PR_SET_PDEATHSIG unavailable: %s", e)

    def watch() -> None:
        while not _parent_gone(parent_pid):
            time.sleep(1.0)
        log.warning("the gateway (pid %d) is gone; this worker stops", parent_pid)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(grace_s)
        os._exit(1)  # the graceful stop hung

    threading.Thread(target=watch, name="lifeline", daemon=True).start()
    if _parent_gone(parent_pid):  # it died before the kernel could be told
        os.kill(os.getpid(), signal.SIGTERM)
