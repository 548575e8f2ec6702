"""The random set written by processes that start together on one empty cache (workers of two
``serve`` started at once): one writes it, the others wait and use its files; every process
loads it, every file is whole and the same in all, and nothing temporary is left."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from llama_omni_py.modelset.layout import discover, validate
from llama_omni_py.modelset.random_set import random_set_dir

PROCESSES = 4
WRITE_PAUSE_S = 2.0  # the writer holds the lock at least this long, so the others meet it

CHILD = textwrap.dedent(
    """
    import hashlib, json, logging, sys, time
    from pathlib import Path

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    import llama_omni_py as omni
    from llama_omni_py.modelset import generate
    from llama_omni_py.modelset.layout import discover, validate

    omni.OmniSession  # the face's lazy imports, done before the start line
    write = generate.make_models

    def slow_write(*args, **kwargs):
        time.sleep(float(sys.argv[3]))
        return write(*args, **kwargs)

    generate.make_models = slow_write
    ready, go = Path(sys.argv[1]), Path(sys.argv[2])
    ready.write_text("")
    while not go.exists():
        time.sleep(0.005)
    with omni.OmniSession(None, "cpu") as session:  # what a worker does with no model named
        root = Path(session.model_dir)
    validate(discover(root))
    files = {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }
    print(json.dumps({"root": str(root), "files": files}))
    """
)


def _hashes(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def test_processes_started_together_write_the_random_set_once(tmp_path, tiny_dir):
    cache = tmp_path / "cache"
    env = dict(os.environ, XDG_CACHE_HOME=str(cache))
    go = tmp_path / "go"
    ready = [tmp_path / f"ready{i}" for i in range(PROCESSES)]
    t0 = time.monotonic()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, str(r), str(go), str(WRITE_PAUSE_S)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=tmp_path,
        )
        for r in ready
    ]
    try:
        deadline = time.monotonic() + 120
        while not all(r.exists() for r in ready):
            assert time.monotonic() < deadline, "the processes did not start"
            assert all(p.poll() is None for p in procs), [p.communicate()[1][-2000:] for p in procs if p.poll()]
            time.sleep(0.01)
        go.write_text("")
        outs = [p.communicate(timeout=180) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()
    elapsed = time.monotonic() - t0
    errs = [err for _, err in outs]
    assert [p.returncode for p in procs] == [0] * PROCESSES, [e[-3000:] for e in errs]

    # one process wrote the set; at least one met its lock and waited; nobody wrote it twice
    writers = [e for e in errs if ": writing the random set (tiny) to " in e]
    waiters = [e for e in errs if "another process is writing the random set (tiny)" in e]
    assert len(writers) == 1, errs
    assert waiters and writers[0] not in waiters, errs

    # every process loaded the same directory and read the same, whole files: those make_models
    # writes for the tiny set (the session fixture's copy)
    root = cache / "llama-omni-py" / "demo-models"
    results = [json.loads(out.strip().splitlines()[-1]) for out, _ in outs]
    assert {r["root"] for r in results} == {str(root)}
    expected = _hashes(tiny_dir)
    assert expected and all(r["files"] == expected for r in results)
    validate(discover(root))

    # nothing temporary left: the set and its lock file only, no partial file anywhere
    assert {p.name for p in root.parent.iterdir()} <= {"demo-models", ".demo-models.lock"}
    assert [p for p in cache.rglob("*") if "partial" in p.name] == []
    assert elapsed < 180


def test_a_set_an_older_version_wrote_is_replaced_whole(tmp_path, monkeypatch, tiny_dir):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    old = tmp_path / "llama-omni-py" / "demo-models"
    old.mkdir(parents=True)
    (old / "MiniCPM-o-4_5-F16.gguf").write_bytes(b"GGUF not a whole file")
    (old / "left-over.txt").write_text("")
    root = random_set_dir()
    assert root == old
    validate(discover(root))
    assert _hashes(root) == _hashes(tiny_dir)
    assert {p.name for p in root.parent.iterdir()} <= {"demo-models", ".demo-models.lock"}
