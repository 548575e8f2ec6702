"""Stage threads joined by bounded queues: a source generator (the LLM) feeds a chain of stages
(TTS, Token2Wav), the caller iterates the last queue.

* Backpressure: every queue is bounded; a full queue blocks its producer.
* Cancellation: ``cancel()`` sets one event that every blocking put/get polls, so each stage
  stops within the chunk it is working on.
* Errors: the first exception in any stage cancels the others and is re-raised to the caller
  as ``PipelineError`` naming the stage, with the original as ``__cause__``.
* Every stage records (stage, start, end) per item for profiling and overlap checks, plus
  "<stage>.wait" (starved by its input queue) and "<stage>.blocked" (its output queue full).
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Any, Callable, Iterable, Iterator

from .errors import PipelineError

_END = object()
_POLL = 0.05  # seconds between cancellation checks while blocked


class Pipeline:
    def __init__(self, source: tuple[str, Callable[[], Iterable[Any]]],
                 stages: list[tuple[str, Callable[[Any], Iterable[Any]]]], queue_sizes: list[int],
                 on_thread_start: Callable[[], None] | None = None):
        if len(queue_sizes) != len(stages) + 1 or min(queue_sizes) < 1:
            raise ValueError("one positive queue size per stage, plus the output queue")
        self.cancelled = threading.Event()
        self.events: list[tuple[str, float, float]] = []  # (stage, start, end) per produced item
        self._error: tuple[str, BaseException] | None = None
        self._lock = threading.Lock()
        self._queues = [queue.Queue(maxsize=n) for n in queue_sizes]
        self._on_start = on_thread_start  # e.g. pin the stage thread (runs inside it)
        name, gen = source
        self._threads = [threading.Thread(target=self._run_source, args=(name, gen, self._queues[0]),
                                          name=f"omni-{name}", daemon=True)]
        for i, (sname, fn) in enumerate(stages):
            self._threads.append(threading.Thread(target=self._run_stage, args=(sname, fn, self._queues[i], self._queues[i + 1]),
                                                  name=f"omni-{sname}", daemon=True))
        for t in self._threads:
            t.start()

    # -- stage bodies ----------------------------------------------------------------------
    def _put(self, q: queue.Queue, item) -> bool:
        while not self.cancelled.is_set():
            try:
                q.put(item, timeout=_POLL)
                return True
            except queue.Full:
                pass
        return False

    def _get(self, q: queue.Queue, stage: str):
        t0 = time.perf_counter()
        while not self.cancelled.is_set():
            try:
                item = q.get(timeout=_POLL)
                self.events.append((stage + ".wait", t0, time.perf_counter()))  # starved by upstream
                return item
            except queue.Empty:
                pass
        return _END

    def _fail(self, stage: str, exc: BaseException) -> None:
        with self._lock:
            if self._error is None:
                self._error = (stage, exc)
        self.cancelled.set()

    def _emit(self, stage: str, items: Iterable[Any], out: queue.Queue) -> bool:
        it = iter(items)
        while True:
            t0 = time.perf_counter()
            try:
                item = next(it)
            except StopIteration:
                return True
            t1 = time.perf_counter()
            self.events.append((stage, t0, t1))
            if not self._put(out, item):
                return False
            self.events.append((stage + ".blocked", t1, time.perf_counter()))  # backpressure

    def _run_source(self, name: str, gen: Callable[[], Iterable[Any]], out: queue.Queue) -> None:
        try:
            if self._on_start:
                self._on_start()
            if self._emit(name, gen(), out):
                self._put(out, _END)
        except BaseException as e:  # noqa: BLE001 -- forwarded to the caller
            self._fail(name, e)

    def _run_stage(self, name: str, fn: Callable[[Any], Iterable[Any]], inp: queue.Queue, out: queue.Queue) -> None:
        try:
            if self._on_start:
                self._on_start()
            while True:
                item = self._get(inp, name)
                if item is _END:
                    self._put(out, _END)
                    return
                if not self._emit(name, fn(item), out):
                    return
        except BaseException as e:  # noqa: BLE001
            self._fail(name, e)

    # -- caller side -----------------------------------------------------------------------
    def __iter__(self) -> Iterator[Any]:
        out = self._queues[-1]
        while True:
            try:
                item = out.get(timeout=_POLL)
            except queue.Empty:
                self._raise_if_failed()
                if self.cancelled.is_set():
                    return
                continue
            if item is _END or self.cancelled.is_set():  # nothing more after cancel()
                self._raise_if_failed()
                return
            yield item

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            stage, exc = self._error
            raise PipelineError(stage, f"{type(exc).__name__}: {exc}") from exc

    def cancel(self) -> None:
        self.cancelled.set()

    def close(self, timeout: float = 30.0) -> None:
        """Cancels and joins every stage thread."""
        self.cancel()
        deadline = time.monotonic() + timeout
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
        alive = [t.name for t in self._threads if t.is_alive()]
        if alive:
            raise PipelineError("close", f"stage threads still running: {alive}")

    @property
    def alive(self) -> bool:
        return any(t.is_alive() for t in self._threads)
