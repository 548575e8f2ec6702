"""Writing into the shared cache (modelset/cache_write.py): a directory built once under a file
lock, in a temporary directory moved into place whole; a second writer waits and reuses the first
one's files; nothing temporary is left behind. Also the GGUF writer's own temporary names."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from filelock import FileLock, Timeout

from llama_omni_py.modelset import cache_write
from llama_omni_py.modelset.cache_write import build_once, lock_path, temp_name, write_bytes, writing
from llama_omni_py.modelset.gguf_writer import GgufWriter

ROOT = Path(__file__).resolve().parents[2]


def _complete(d: Path) -> bool:
    return (d / "done").is_file() and (d / "data").read_text() == "whole"


def _build(d: Path) -> None:
    (d / "data").write_text("whole")
    (d / "done").write_text("")


def _leftovers(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if p.name.endswith(cache_write.PARTIAL))


def test_a_second_writer_waits_and_reuses_the_first_ones_files(tmp_path, caplog):
    target = tmp_path / "cache" / "set"
    inside, release = threading.Event(), threading.Event()
    builds, results = [], {}

    def slow_build(d: Path) -> None:
        builds.append(threading.current_thread().name)
        inside.set()
        assert release.wait(30)
        _build(d)

    def run(name: str) -> None:
        results[name] = build_once(target, slow_build, _complete, "the test set")

    caplog.set_level(logging.INFO, logger=cache_write.__name__)
    first = threading.Thread(target=run, args=("first",), name="first")
    first.start()
    assert inside.wait(30)
    # the first holds the lock, its files are still under a temporary name
    assert not target.exists() and len(_leftovers(target.parent)) == 1
    second = threading.Thread(target=run, args=("second",), name="second")
    second.start()
    deadline = time.monotonic() + 30
    while "another process is writing the test set" not in caplog.text:
        assert time.monotonic() < deadline, caplog.text
        time.sleep(0.01)
    release.set()
    first.join(30)
    second.join(30)
    assert builds == ["first"]  # written once; the second reused it
    assert results == {"first": target, "second": target}
    assert _complete(target) and _leftovers(target.parent) == []
    waits = [r for r in caplog.records if "another process is writing" in r.message]
    assert [r.threadName for r in waits] == ["second"] and waits[0].levelno == logging.WARNING


def test_processes_started_together_write_once(tmp_path):
    """Processes (not threads) meet the same lock: one builds, the others wait and reuse it."""
    target, go, log = tmp_path / "set", tmp_path / "go", tmp_path / "builds.log"
    code = textwrap.dedent(
        f"""
        import os, sys, time
        from pathlib import Path
        from llama_omni_py.modelset.cache_write import build_once
        target, go, log = Path({str(target)!r}), Path({str(go)!r}), Path({str(log)!r})
        def build(d):
            with open(log, "a") as f:
                f.write(f"{{os.getpid()}}\\n")
            time.sleep(1.0)  # long enough that the others meet the lock
            (d / "data").write_text("whole")
            (d / "done").write_text("")
        def complete(d):
            return (d / "done").is_file() and (d / "data").read_text() == "whole"
        Path(sys.argv[1]).write_text("")
        while not go.exists():
            time.sleep(0.005)
        print(build_once(target, build, complete, "the test set"))
        """
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, str(tmp_path / f"ready{i}")],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for i in range(3)
    ]
    try:
        deadline = time.monotonic() + 60
        while not all((tmp_path / f"ready{i}").exists() for i in range(3)):
            assert time.monotonic() < deadline and all(p.poll() is None for p in procs)
            time.sleep(0.01)
        go.write_text("")
        outs = [p.communicate(timeout=60) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert [p.returncode for p in procs] == [0, 0, 0], [err for _, err in outs]
    assert {out.strip() for out, _ in outs} == {str(target)}
    assert len(log.read_text().split()) == 1  # one process built it
    assert sum("another process is writing the test set" in err for _, err in outs) >= 1
    assert _complete(target) and _leftovers(tmp_path) == []


def test_a_failed_build_leaves_nothing_and_the_next_call_builds(tmp_path):
    target = tmp_path / "set"

    def broken(d: Path) -> None:
        (d / "data").write_text("half")
        raise RuntimeError("stopped")

    with pytest.raises(RuntimeError, match="stopped"):
        build_once(target, broken, _complete, "the test set")
    assert not target.exists() and _leftovers(tmp_path) == []
    assert build_once(target, _build, _complete, "the test set") == target and _complete(target)


def test_an_incomplete_set_is_replaced_whole_and_leftovers_are_removed(tmp_path):
    target = tmp_path / "set"
    target.mkdir()
    (target / "data").write_text("an older version's")
    (target / "extra").write_text("")
    stale = temp_name(target)  # what a writer killed half-way leaves
    stale.mkdir()
    (stale / "data").write_text("half")
    other = tmp_path / "set-real.123.abcd.partial"  # another target's: not touched
    other.mkdir()
    build_once(target, _build, _complete, "the test set")
    assert sorted(p.name for p in target.iterdir()) == ["data", "done"] and _complete(target)
    assert _leftovers(tmp_path) == [other.name]


def test_a_complete_set_takes_no_lock(tmp_path):
    target = tmp_path / "set"
    target.mkdir()
    _build(target)
    calls = []
    assert build_once(target, calls.append, _complete, "the test set") == target
    assert calls == [] and not lock_path(target).exists()


def test_a_set_finished_by_a_writer_without_the_lock_is_kept(tmp_path):
    """A writer that takes no lock (an older version) moved a whole set in first: ours is dropped."""
    target = tmp_path / "set"

    def build_while_another_finishes(d: Path) -> None:
        _build(d)
        (d / "mine").write_text("")
        target.mkdir()
        _build(target)

    build_once(target, build_while_another_finishes, _complete, "the test set")
    assert sorted(p.name for p in target.iterdir()) == ["data", "done"]
    assert _leftovers(tmp_path) == []


def test_writing_holds_the_lock_file_beside_the_target(tmp_path):
    target = tmp_path / "sub" / "thing"

    def try_lock() -> bool:  # from another thread: the lock is reentrant in the thread holding it
        got = []

        def attempt():
            lock = FileLock(str(lock_path(target)))
            try:
                lock.acquire(timeout=0)
            except Timeout:
                got.append(False)
            else:
                lock.release()
                got.append(True)

        t = threading.Thread(target=attempt)
        t.start()
        t.join(30)
        return got == [True]

    with writing(target, "the thing"):
        assert lock_path(target) == tmp_path / "sub" / ".thing.lock"
        assert not try_lock()
    assert try_lock()


def test_write_bytes_replaces_a_file_in_one_step(tmp_path):
    path = tmp_path / "sub" / "hashes.json"
    stop, seen = threading.Event(), set()

    def read():
        while not stop.is_set():
            try:
                seen.add(path.read_bytes())
            except FileNotFoundError:
                pass

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for i in range(200):
            write_bytes(path, bytes([i % 2]) * 100_000)
    finally:
        stop.set()
        reader.join(30)
    assert seen <= {b"\0" * 100_000, b"\1" * 100_000}  # never a mix, never a short file
    assert path.read_bytes() == b"\1" * 100_000 and sorted(p.name for p in path.parent.iterdir()) == ["hashes.json"]


def _gguf(path: Path, value: float, pause: float = 0.0):
    """A one-tensor writer and its data (``pause``: seconds before the data comes)."""
    w = GgufWriter(path)
    w.add("general.name", "string", "t")
    w.declare("t", (64, 4), "f32")

    def data(name, ne, dtype):
        time.sleep(pause)
        yield np.full(256, value, np.float32)

    return w, data


def test_two_writers_of_one_gguf_file_each_use_their_own_temporary_name(tmp_path):
    path = tmp_path / "m.gguf"
    errors = []

    def write():
        try:
            w, data = _gguf(path, 1.0, pause=0.3)
            w.write(data)
        except Exception as e:  # the failure this guards against: a temporary name shared
            errors.append(e)

    threads = [threading.Thread(target=write) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert errors == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.gguf"]
    assert np.frombuffer(path.read_bytes()[-1024:], np.float32).tolist() == [1.0] * 256


def test_a_gguf_write_that_fails_leaves_no_temporary_file(tmp_path):
    w, _ = _gguf(tmp_path / "m.gguf", 1.0)

    def short(name, ne, dtype):
        yield np.zeros(3, np.float32)

    with pytest.raises(ValueError, match="expected"):
        w.write(short)
    assert list(tmp_path.iterdir()) == []
