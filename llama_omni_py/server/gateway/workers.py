"""Where the gateway's workers come from. Each source has ``async start() -> [Worker]``,
``async stop()`` and ``describe()``:

* ``LocalWorkers``: one ``llama-omni worker`` process per device on this host, each pinned to
  its device's NUMA node (the placement plan), announcing its port on stdout;
* ``StaticWorkers``: workers started elsewhere, by address;
* ``RayWorkers`` (ray_workers.py): one Ray actor per GPU/NPU, across hosts."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

from ...env import ENV_WORKER_SECRET, for_child
from ...errors import ConfigError
from ..lifeline import EXIT_LOAD_FAILED, LOAD_FAILED
from .worker_slots import Worker

log = logging.getLogger(__name__)
START_TIMEOUT_S = 120.0


def devices_for(workers: int | None, device: str = "auto") -> list[str]:
    """One engine per accelerator: ``auto`` takes every accelerator of the build (or one CPU
    worker on a host without one); ``cpu`` gives ``workers`` CPU engines (default 1); a named
    device takes one worker."""
    from ...device.backends import backends

    if workers is not None and workers < 1:
        raise ConfigError("workers", f"must be >= 1, got {workers}")
    if device == "auto":
        accelerators = [b for b in backends() if b != "cpu"]
        if not accelerators:
            return ["cpu"] * (workers or 1)
        if workers is not None and workers > len(accelerators):
            raise ConfigError(
                "workers", f"{workers} workers but {len(accelerators)} accelerators ({accelerators}): one engine each"
            )
        return accelerators[: workers or len(accelerators)]
    if device == "cpu":
        return ["cpu"] * (workers or 1)
    if workers not in (None, 1):
        raise ConfigError("workers", f"one engine per accelerator: {device} takes one worker, not {workers}")
    return [device]


def numa_node_of(device: str) -> int | None:
    """The NUMA node the placement plan puts a session on ``device`` on (None: no NUMA info)."""
    from ...device.placement import plan_from_environment

    try:
        return plan_from_environment(device).node
    except Exception as e:  # noqa: BLE001 -- no pinning is better than no worker
        log.warning("no placement plan for %s: %s", device, e)
        return None


class LocalWorkers:
    """One ``llama-omni worker`` process per device, started by the gateway, restarted when it dies
    (``supervise``) and ending with the gateway (each worker watches its parent: ``--parent-pid``)."""

    def __init__(
        self,
        devices: list[str],
        worker_args: list[str],
        host: str = "127.0.0.1",
        pin: bool = True,
        secret: str | None = None,
    ):
        self.devices, self.worker_args, self.host, self.pin = devices, list(worker_args), host, pin
        self.secret = secret  # given to each worker in its environment (never on its command line)
        self.procs: list[subprocess.Popen] = []
        self.workers: list[Worker] = []
        self._readers: dict[int, threading.Thread] = {}  # pid -> the thread reading its stdout
        self._load_failures: dict[int, str] = {}  # pid -> the load error it reported

    def describe(self) -> str:
        return f"{len(self.devices)} local worker(s) on {', '.join(self.devices)}"

    def command(self, device: str) -> list[str]:
        cmd = [sys.executable, "-m", "llama_omni_py", "worker", "--host", self.host, "--port", "0", "--device", device]
        cmd += ["--parent-pid", str(os.getpid())]
        node = numa_node_of(device) if self.pin else None
        if node is not None:
            cmd += ["--numa-node", str(node)]
        return cmd + self.worker_args

    async def _launch(self, i: int) -> tuple[subprocess.Popen, int]:
        """Starts worker i's process; (process, the port it announced)."""
        cmd = self.command(self.devices[i])
        # not from a source tree: `-m llama_omni_py` there would import the uncompiled package
        env = for_child(drop=(ENV_WORKER_SECRET,), **({ENV_WORKER_SECRET: self.secret} if self.secret else {}))
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, cwd=tempfile.gettempdir(), env=env)
        try:
            port = await asyncio.wait_for(asyncio.to_thread(_announced_port, proc), START_TIMEOUT_S)
        except BaseException:
            proc.kill()
            proc.wait()
            raise
        reader = threading.Thread(target=self._read_reports, args=(proc,), name=f"worker_{i}-stdout", daemon=True)
        reader.start()
        self._readers[proc.pid] = reader
        return proc, port

    def _read_reports(self, proc: subprocess.Popen) -> None:
        """Drains the worker's stdout to its end, keeping what it reports there after its port: a
        failed load, {"load_failed": error}, printed before it exits (``EXIT_LOAD_FAILED``)."""
        for line in proc.stdout:
            try:
                report = json.loads(line)
            except ValueError:
                continue
            if isinstance(report, dict) and isinstance(report.get(LOAD_FAILED), str):
                self._load_failures[proc.pid] = report[LOAD_FAILED]

    async def _load_failure(self, proc: subprocess.Popen) -> str | None:
        """Why the exited ``proc`` failed to load its engine, or None when it did not report that."""
        reader = self._readers.get(proc.pid)
        if reader is not None:  # its stdout is at its end, or soon (a child may hold it a moment)
            await asyncio.to_thread(reader.join, 2.0)
        cause = self._load_failures.get(proc.pid)
        if cause is None and proc.returncode == EXIT_LOAD_FAILED:
            cause = "see the worker's log"
        return cause

    async def start(self) -> list[Worker]:
        for i, device in enumerate(self.devices):
            proc, port = await self._launch(i)
            self.procs.append(proc)
            self.workers.append(Worker(f"worker_{i}", self.host, port, gpu_id=i, device=device, secret=self.secret))
            log.warning("worker_%d (pid %d) on %s: http://%s:%d", i, proc.pid, device, self.host, port)
        return list(self.workers)

    async def supervise(self, gateway) -> None:
        """Watches the worker processes, each on its own: one that died (and is reaped here, no
        zombie) is marked offline -- or error with the cause it reported, when its engine failed
        to load (such a worker exits: ``EXIT_LOAD_FAILED``) -- and started again after its own backoff
        (gateway.config.restart_backoff_s, stepping up with each failure in a row; a worker that
        ran a minute starts the count over), while the others are watched and restarted as
        they fail."""
        await asyncio.gather(*(self._watch(i, gateway) for i in range(len(self.procs))))

    async def _watch(self, i: int, gateway) -> None:
        backoff = gateway.config.restart_backoff_s
        fails, since = 0, time.monotonic()
        while True:
            await asyncio.sleep(0.5)
            proc = self.procs[i]
            if proc.poll() is None:
                if time.monotonic() - since > 60:
                    fails = 0
                continue
            worker = self.workers[i]
            cause = await self._load_failure(proc)
            if cause is None:
                gateway.pool.mark_down(worker, "offline", f"process {proc.pid} exited with status {proc.returncode}")
            else:  # its engine failed to load: restarted like a dead one, the cause kept
                gateway.pool.mark_load_failed(worker, cause)
            delay = backoff[min(fails, len(backoff) - 1)]
            log.error("worker_%d: %s; starting it again in %g s", i, worker.error, delay)
            fails += 1
            await asyncio.sleep(delay)
            try:
                new, port = await self._launch(i)
            except Exception as e:  # noqa: BLE001 -- try again after the next backoff
                log.error("worker_%d did not start again: %s", i, e)
                continue
            self.procs[i], since = new, time.monotonic()
            self._readers.pop(proc.pid, None)
            self._load_failures.pop(proc.pid, None)
            worker.port = port
            gateway.pool.mark_down(worker, "loading", None)
            worker.restarts += 1
            gateway.metrics.worker_restarts.inc()
            log.warning("worker_%d started again (pid %d): http://%s:%d", i, new.pid, self.host, port)

    async def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                await asyncio.to_thread(proc.wait, 60)
            except subprocess.TimeoutExpired:
                proc.kill()


def _announced_port(proc: subprocess.Popen) -> int:
    """The worker's first stdout line: {"listening": url, "port": N}."""
    for line in proc.stdout:
        try:
            return int(json.loads(line)["port"])
        except (ValueError, KeyError, TypeError):
            continue
    raise RuntimeError(f"worker {proc.args} exited ({proc.wait()}) before it listened")


class StaticWorkers:
    def __init__(self, addresses: list[str], secret: str | None = None):
        self.secret = secret  # what those workers were started with (OMNI_WORKER_SECRET), if any
        self.addresses = []
        for a in addresses:
            host, _, port = a.strip().removeprefix("http://").rstrip("/").rpartition(":")
            if not host or not port.isdigit():
                raise ConfigError("connect", f"a worker address is host:port, got {a!r}")
            self.addresses.append((host, int(port)))

    def describe(self) -> str:
        return f"{len(self.addresses)} worker(s) at " + ", ".join(f"{h}:{p}" for h, p in self.addresses)

    async def start(self) -> list[Worker]:
        return [Worker(f"worker_{i}", h, p, gpu_id=i, secret=self.secret) for i, (h, p) in enumerate(self.addresses)]

    async def stop(self) -> None:
        pass
