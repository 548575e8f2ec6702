"""Running a test body on several threads at once (an engine's slots)."""

import threading


def in_threads(fn, n: int, timeout: float = 600.0) -> list:
    """``fn(k)`` for k in 0..n-1, each on its own thread; their results in order. Any exception a
    thread raised fails the test, and so does a thread still running after ``timeout``."""
    out, errors = [None] * n, []

    def body(k):
        try:
            out[k] = fn(k)
        except BaseException as e:  # noqa: BLE001 -- reported below
            errors.append(e)

    threads = [threading.Thread(target=body, args=(k,)) for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    assert not any(t.is_alive() for t in threads), "a thread hangs"
    assert not errors, errors
    return out
