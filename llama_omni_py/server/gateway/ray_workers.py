"""Workers as Ray actors: one per GPU (Ray's ``GPU`` resource), per Ascend NPU (the ``NPU``
resource) or, for tests and CPU hosts, per ``num_cpus`` slice, placed by Ray on any host of the
cluster. Each actor runs an ordinary worker (``/backend``, ``/health``) on its node's
address; the gateway queues and routes to them like local workers, and a session stays on its
worker (it holds that worker's WebSocket). Needs the ``ray`` extra (``pip install
"llama-omni-py[ray]"``)."""

from __future__ import annotations

import asyncio
import logging

from ...errors import ConfigError
from ..worker_options import WorkerOptions
from .worker_slots import Worker

log = logging.getLogger(__name__)
DEVICE = {"gpu": "cuda:0", "npu": "cann:0", "cpu": "cpu"}  # Ray makes the assigned device index 0
START_TIMEOUT_S = 300.0


class EngineWorkerActor:
    """Runs inside a Ray actor process: a worker on this node, pinned to the NUMA node of
    the device Ray assigned (CUDA_VISIBLE_DEVICES / ASCEND_RT_VISIBLE_DEVICES are set by Ray)."""

    def __init__(self, options: WorkerOptions, accelerator: str, host: str | None = None, secret: str | None = None):
        import ray

        from ...device.placement import pin_process_to_node
        from ..worker import BackgroundServer
        from .workers import numa_node_of

        self.device = DEVICE[accelerator]
        self.host = host or ray.util.get_node_ip_address()
        node = numa_node_of(self.device)
        if node is not None:
            pin_process_to_node(node)
        self.server = BackgroundServer(options.server_config(self.host, 0, self.device, node, secret))
        self.server.__enter__()

    def address(self) -> tuple[str, int, str]:
        return self.host, self.server.server.port, self.device

    def stop(self) -> None:
        self.server.__exit__(None, None, None)


class RayWorkers:
    def __init__(
        self,
        workers: int,
        options: WorkerOptions,
        address: str | None = None,
        accelerator: str = "gpu",
        cpus_per_worker: float = 1.0,
        host: str | None = None,
        secret: str | None = None,
    ):
        if accelerator not in DEVICE:
            raise ConfigError("ray_accelerator", f"must be one of {sorted(DEVICE)}, got {accelerator!r}")
        if workers < 1:
            raise ConfigError("workers", f"must be >= 1, got {workers}")
        self.n, self.options, self.address, self.accelerator = workers, options, address, accelerator
        self.cpus_per_worker, self.host, self.secret = cpus_per_worker, host, secret
        self.actors: list = []
        self._started_ray = False

    def describe(self) -> str:
        return f"{self.n} Ray worker actor(s), one {self.accelerator.upper()} each"

    def actor_options(self) -> dict:
        opts: dict = {"num_cpus": self.cpus_per_worker, "max_restarts": 0}
        if self.accelerator == "gpu":
            opts["num_gpus"] = 1
        elif self.accelerator == "npu":
            opts["resources"] = {"NPU": 1}  # Ray's resource name for Ascend NPUs
        return opts

    async def start(self) -> list[Worker]:
        import ray

        if not ray.is_initialized():
            ray.init(address=self.address or None, include_dashboard=False, logging_level=logging.WARNING)
            self._started_ray = True
        actor = ray.remote(EngineWorkerActor).options(**self.actor_options())
        self.actors = [actor.remote(self.options, self.accelerator, self.host, self.secret) for _ in range(self.n)]
        refs = [a.address.remote() for a in self.actors]
        addresses = await asyncio.wait_for(asyncio.to_thread(ray.get, refs), START_TIMEOUT_S)
        workers = []
        for i, (host, port, device) in enumerate(addresses):
            workers.append(Worker(f"worker_{i}", host, port, gpu_id=i, device=device, secret=self.secret))
            log.warning("worker_%d (Ray actor) on %s: http://%s:%d", i, device, host, port)
        return workers

    async def stop(self) -> None:
        import ray

        if not ray.is_initialized():
            return
        for a in self.actors:
            try:
                await asyncio.wait_for(asyncio.to_thread(ray.get, a.stop.remote()), 60)
            except Exception as e:  # noqa: BLE001 -- the actor may be gone already
                log.warning("stopping a Ray worker: %s", e)
            ray.kill(a)
        self.actors = []
        if self._started_ray:
            ray.shutdown()
