"""Writing into a directory that several processes share (the user cache). Everything is written
under a name no other process or thread uses and moved into place in one step, so that a reader
sees either nothing or the whole thing; a generated set is also built under a file lock, so that
processes that start at the same moment write it once and the others use its files.

    lock_path(target)      the lock file beside ``target``
    writing(target, what)  holds that lock (a warning says so when another process holds it)
    temp_name(target)      ``target.<pid>.<random>.partial``: this writer's own name beside it
    write_bytes(path, data)  a small file replaced in one step (the last writer wins)
    build_once(target, build, complete, what)   a directory written once, by whichever process
                           gets the lock first; the others wait and use its files

Imports nothing of the package: it runs without the compiled core.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import secrets
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Callable

log = logging.getLogger(__name__)

PARTIAL = ".partial"
WAIT_NOTICE_S = 60.0  # how often a waiting process says it is still waiting


def lock_path(target: Path) -> Path:
    """The lock file of ``target``: ``.<name>.lock`` in the same directory."""
    return target.with_name(f".{target.name}.lock")


def temp_name(target: Path) -> Path:
    """A name beside ``target`` (same file system, so a rename moves it in one step) that no other
    process or thread picks: ``<name>.<pid>.<random>.partial``."""
    return target.with_name(f"{target.name}.{os.getpid()}.{secrets.token_hex(4)}{PARTIAL}")


def _is_temp_of(name: str, target: Path) -> bool:
    return re.fullmatch(re.escape(target.name) + r"\.\d+\.[0-9a-f]+" + re.escape(PARTIAL), name) is not None


@contextlib.contextmanager
def writing(target: Path, what: str | None = None) -> Iterator[None]:
    """Holds the lock of ``target`` while the block runs. When another process holds it, a warning
    names ``what`` (else the path) and the wait goes on, with a reminder every minute; a process
    that dies releases its lock with it."""
    from filelock import FileLock, Timeout

    target.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(lock_path(target)))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        log.warning("another process is writing %s; waiting for it", what or target)
        t0 = time.monotonic()
        while True:
            try:
                lock.acquire(timeout=WAIT_NOTICE_S)
                break
            except Timeout:
                log.warning("still waiting for %s (%.0f s)", what or target, time.monotonic() - t0)
        log.info("%s: waited %.1f s for the other process", what or target, time.monotonic() - t0)
    try:
        yield
    finally:
        lock.release()


def write_bytes(path: Path, data: bytes) -> None:
    """Writes ``data`` to ``path`` under a temporary name of this writer's own, moved onto ``path``
    in one step: a reader sees the old bytes or the new ones, never a mix (a small cache file
    that any process may rewrite; the last writer wins)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_name(path)
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def remove(path: Path) -> None:
    """Removes a file or a directory tree; what is already gone is no error."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def _left_behind(target: Path) -> list[Path]:
    """Temporary names of ``target`` left by a writer that was stopped (only the lock holder writes)."""
    if not target.parent.is_dir():
        return []
    return [p for p in target.parent.iterdir() if _is_temp_of(p.name, target)]


def _complete(complete: Callable[[Path], bool], target: Path) -> bool:
    try:
        return complete(target)
    except OSError:  # read while another writer moved an old copy aside
        return False


def _install(tmp: Path, target: Path, complete: Callable[[Path], bool]) -> None:
    """Moves the directory ``tmp`` onto ``target`` in one step. When ``target`` is there already,
    a complete one is kept (``tmp`` is dropped: another writer that takes no lock finished first)
    and any other is moved aside and removed."""
    try:
        os.replace(tmp, target)  # POSIX: also onto an empty directory
        return
    except OSError:
        if not target.exists():
            raise
    if _complete(complete, target):
        remove(tmp)
        return
    aside = temp_name(target)
    os.replace(target, aside)
    os.replace(tmp, target)
    remove(aside)


def build_once(target: Path, build: Callable[[Path], object], complete: Callable[[Path], bool], what: str) -> Path:
    """``target``, a directory, complete: as it is when ``complete(target)`` holds; else built by
    ``build(tmp)`` into a temporary directory beside it, under the lock of ``target``, and moved
    into place in one step. A process that finds the lock taken waits for it, then checks again
    and uses the other's files; only when they are still not complete does it build them itself.
    ``build`` raises when what it wrote is not whole (its temporary directory is then removed);
    temporary names a stopped writer left behind are removed while the lock is held."""
    target = Path(target)
    if _complete(complete, target):
        return target
    with writing(target, what):
        if _complete(complete, target):  # another process wrote it while this one waited
            return target
        for stale in _left_behind(target):
            log.info("removing %s, left by a writer that was stopped", stale)
            remove(stale)
        tmp = temp_name(target)
        log.warning("writing %s to %s", what, target)
        try:
            tmp.mkdir(parents=True)
            build(tmp)
            _install(tmp, target, complete)
        finally:
            if tmp.exists():
                remove(tmp)
    return target
