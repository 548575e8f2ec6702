"""Log lines that a crowd can repeat (refused sessions, full queues) go out at most once per
interval and kind; the next line that goes out says how many were held back."""

from __future__ import annotations

import logging
import time


class RateLimitedLog:
    def __init__(self, logger: logging.Logger, interval_s: float = 10.0, level: int = logging.WARNING, clock=None):
        self.logger, self.interval_s, self.level = logger, interval_s, level
        self.clock = clock or time.monotonic
        self._last: dict[str, float] = {}
        self._held: dict[str, int] = {}

    def __call__(self, kind: str, msg: str, *args) -> bool:
        """Logs ``msg % args`` unless a line of this ``kind`` went out within the interval; True
        when it was logged."""
        now = self.clock()
        last = self._last.get(kind)
        if last is not None and now - last < self.interval_s:
            self._held[kind] = self._held.get(kind, 0) + 1
            return False
        held = self._held.pop(kind, 0)
        if held:
            msg += " (%d more like it not logged in the last %.0f s)"
            args = (*args, held, now - last)
        self._last[kind] = now
        self.logger.log(self.level, msg, *args)
        return True
