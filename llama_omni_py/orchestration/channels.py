"""Stage threads joined by bounded channels: a source (the LLM) feeds a chain of stages (TTS,
Token2Wav); the caller iterates the last channel.

* Hand-off is blocking: a full channel blocks its producer (backpressure), an empty one its
  consumer; nothing polls.
* The end of the stream travels as a sentinel behind the last item; a stage's exception travels
  the same way and is raised to the caller as :class:`PipelineError` naming the stage (the
  original as ``__cause__``); the other stages are cancelled.
* ``cancel()`` closes every channel at once: blocked puts and gets return, each stage stops
  after the native call in flight. ``close()`` cancels and joins the threads; iterating stops
  cleanly when the consumer drops the iterator (GeneratorExit).
* A stage emits with ``emit(item)`` to the next channel, or ``emit.output(item)`` straight to
  the caller (text that need not wait for audio).
* Every stage records (stage, start, end) per emitted item for profiling, plus "<stage>.wait"
  (starved by its input) and "<stage>.blocked" (its output full).
"""

from __future__ import annotations

import sys
import threading
import time
from collections import deque
from collections.abc import Iterator
from typing import Any, Callable

from ..errors import PipelineError

_END = object()  # sentinel: the producer is done
_CLOSED = object()  # returned by get() once the channel is closed


def name_os_thread(name: str | None = None) -> None:
    """Gives the calling thread ``name`` (default: its Python name) as its operating-system name
    too, so that ``top -H``, debuggers and /proc/<pid>/task/*/comm tell the package's threads
    apart (Linux keeps the first 15 bytes). Elsewhere, or where it cannot, nothing changes."""
    if not sys.platform.startswith("linux"):
        return
    try:
        with open(f"/proc/self/task/{threading.get_native_id()}/comm", "w") as f:
            f.write(name or threading.current_thread().name)
    except OSError:
        pass


class _Failure:
    def __init__(self, stage: str, exc: BaseException):
        self.stage, self.exc = stage, exc


class Channel:
    """A bounded FIFO between threads that can be closed, waking every waiter."""

    def __init__(self, size: int):
        self._items: deque = deque()
        self._size = size
        self._cond = threading.Condition()
        self._closed = False

    def put(self, item, force: bool = False) -> bool:
        """Blocks while full; False when the channel was closed. ``force`` ignores the bound (for
        sentinels, so a failing stage never blocks)."""
        with self._cond:
            while not force and len(self._items) >= self._size and not self._closed:
                self._cond.wait()
            if self._closed:
                return False
            self._items.append(item)
            self._cond.notify_all()
            return True

    def get(self):
        """Blocks while empty; _CLOSED once the channel was closed."""
        with self._cond:
            while not self._items and not self._closed:
                self._cond.wait()
            if self._closed:
                return _CLOSED
            item = self._items.popleft()
            self._cond.notify_all()
            return item

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._items.clear()
            self._cond.notify_all()


class Emitter:
    """What a stage body calls to hand items on; False means the pipeline was cancelled."""

    def __init__(self, pipe: Pipeline, stage: str, out: Channel):
        self._pipe, self._stage, self._out = pipe, stage, out
        self.mark = time.perf_counter()  # start of the current item's compute

    def __call__(self, item) -> bool:
        return self._send(self._out, item, ".blocked")

    @property
    def cancelled(self) -> bool:
        """Whether the pipeline was cancelled (for a stage that works long before it emits)."""
        return self._pipe.cancelled

    def output(self, item) -> bool:
        return self._send(self._pipe._channels[-1], item, ".out_blocked")

    def _send(self, channel: Channel, item, blocked: str) -> bool:
        t1 = time.perf_counter()
        self._pipe.events.append((self._stage, self.mark, t1))
        ok = channel.put(item)
        self.mark = time.perf_counter()
        self._pipe.events.append((self._stage + blocked, t1, self.mark))
        return ok


Source = Callable[[Emitter], None]
Stage = Callable[[Any, Emitter], None]


class Pipeline:
    def __init__(
        self,
        source: tuple[str, Source],
        stages: list[tuple[str, Stage]],
        queue_sizes: list[int],
        on_thread_start: Callable[[], None] | None = None,
    ):
        if len(queue_sizes) != len(stages) + 1 or min(queue_sizes) < 1:
            raise ValueError("one positive queue size per stage, plus the output queue")
        self.events: list[tuple[str, float, float]] = []  # (stage, start, end)
        self._channels = [Channel(n) for n in queue_sizes]
        self._cancelled = threading.Event()
        self._on_start = on_thread_start  # e.g. pin the stage thread (runs inside it)
        name, body = source
        self._threads = [
            threading.Thread(
                target=self._run_source, args=(name, body, self._channels[0]), name=f"omni-{name}", daemon=True
            )
        ]
        for i, (sname, fn) in enumerate(stages):
            self._threads.append(
                threading.Thread(
                    target=self._run_stage,
                    args=(sname, fn, self._channels[i], self._channels[i + 1]),
                    name=f"omni-{sname}",
                    daemon=True,
                )
            )
        for t in self._threads:
            t.start()

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    # -- stage threads ---------------------------------------------------------------------
    def _run_source(self, name: str, body: Source, out: Channel) -> None:
        name_os_thread()
        try:
            if self._on_start:
                self._on_start()
            body(Emitter(self, name, out))
            out.put(_END, force=True)
        except BaseException as e:  # noqa: BLE001 -- forwarded to the caller
            self._fail(name, e, out)

    def _run_stage(self, name: str, fn: Stage, inp: Channel, out: Channel) -> None:
        name_os_thread()
        try:
            if self._on_start:
                self._on_start()
            emit = Emitter(self, name, out)
            while True:
                t0 = time.perf_counter()
                item = inp.get()
                emit.mark = time.perf_counter()
                self.events.append((name + ".wait", t0, emit.mark))
                if item is _CLOSED:
                    return
                if item is _END or isinstance(item, _Failure):
                    out.put(item, force=True)  # the end (or an upstream failure) travels on
                    return
                fn(item, emit)
                if self.cancelled:
                    return
        except BaseException as e:  # noqa: BLE001
            self._fail(name, e, out)

    def _fail(self, stage: str, exc: BaseException, out: Channel) -> None:
        # Downstream stages stop at once; the failure reaches the caller through the chain.
        failure = _Failure(stage, exc)
        for ch in self._channels[self._channels.index(out) :]:
            ch.put(failure, force=True)

    # -- caller side -----------------------------------------------------------------------
    def __iter__(self) -> Iterator[Any]:
        out = self._channels[-1]
        try:
            while True:
                item = out.get()
                if item is _END or item is _CLOSED:
                    return
                if isinstance(item, _Failure):
                    self.cancel()
                    raise PipelineError(item.stage, f"{type(item.exc).__name__}: {item.exc}") from item.exc
                yield item
        finally:
            self.cancel()  # normal end, consumer gone (GeneratorExit) or failure: stop every stage

    def cancel(self) -> None:
        self._cancelled.set()
        for ch in self._channels:
            ch.close()

    def close(self, timeout: float = 30.0) -> None:
        """Cancels and joins every stage thread."""
        self.cancel()
        deadline = time.monotonic() + timeout
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
        alive = [t.name for t in self._threads if t.is_alive()]
        if alive:
            raise PipelineError("close", f"stage threads still running after {timeout:g} s: {alive}")

    @property
    def alive(self) -> bool:
        return any(t.is_alive() for t in self._threads)


def iterate_in_thread(make_iterator: Callable[[], Iterator[Any]], cancel: Callable[[], None], loop):
    """An async generator over a blocking iterator that runs in its own thread (for asyncio
    callers). Backpressure: at most two items wait for the consumer. When the consumer stops
    early, ``cancel()`` is called and the thread is awaited before returning."""
    import asyncio

    queue: asyncio.Queue = asyncio.Queue(maxsize=2)
    finished = loop.create_future()
    abandoned = threading.Event()
    end = object()

    def put(item) -> None:
        asyncio.run_coroutine_threadsafe(queue.put(item), loop).result()

    def run() -> None:
        name_os_thread()
        try:
            for item in make_iterator():
                if abandoned.is_set():
                    break
                put(item)
            if not abandoned.is_set():
                put(end)
        except BaseException as e:  # noqa: BLE001 -- raised in the consumer
            if not abandoned.is_set():
                put(_Failure("", e))
        finally:
            loop.call_soon_threadsafe(lambda: finished.done() or finished.set_result(None))

    async def agen():
        thread = threading.Thread(target=run, name="omni-async-bridge", daemon=True)
        thread.start()
        try:
            while True:
                item = await queue.get()
                if item is end:
                    return
                if isinstance(item, _Failure):
                    raise item.exc
                yield item
        finally:
            abandoned.set()
            cancel()
            while not queue.empty():  # a put blocked on a full queue now completes
                queue.get_nowait()
            await finished

    return agen()
