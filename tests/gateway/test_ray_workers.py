"""Workers as Ray actors: a local two-worker Ray cluster on the CPU (tiny set) behind the
gateway; two sessions stream at the same time, each on its own worker (actor process)."""

import asyncio
import json
import os
import socket
import subprocess
import sys
import time

import pytest
import ray
from server_client import SPEAK, chat_request, http, wait_until
from websockets.asyncio.client import connect

from llama_omni_py.server.gateway import BackgroundGateway, GatewayConfig
from llama_omni_py.server.gateway.ray_workers import RayWorkers
from llama_omni_py.server.worker_options import WorkerOptions


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory):
    # Ray's worker processes start in the driver's directory: not the source tree, whose package
    # is uncompiled
    here = os.getcwd()
    os.chdir(tmp_path_factory.mktemp("ray"))
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        _node_ip_address="127.0.0.1",  # the test cluster stays on the loopback interface
        object_store_memory=80 << 20,
        log_to_driver=False,
    )
    os.chdir(here)
    yield
    ray.shutdown()


async def timed_turn(url: str, text: str) -> dict:
    async with connect(url.replace("http", "ws") + "/ws/chat", max_size=None) as ws:
        await ws.send(json.dumps(chat_request(text, tts=SPEAK)))
        first = None
        async for raw in ws:
            msg = json.loads(raw)
            if msg["type"] == "chunk" and first is None:
                first = time.monotonic()
            if msg["type"] in ("done", "error"):
                return {"first": first, "end": time.monotonic(), "last": msg}


def test_two_ray_workers_stream_two_sessions_at_once(tiny_dir, ray_cluster):
    engine = WorkerOptions(str(tiny_dir), threads=1, max_new_tokens=40, t2w_threads=1, max_audio_per_chunk=25)
    source = RayWorkers(2, engine, accelerator="cpu", cpus_per_worker=1, host="127.0.0.1")
    assert source.actor_options() == {"num_cpus": 1, "max_restarts": 0}
    with BackgroundGateway(GatewayConfig(port=0, health_interval_s=0.25), [source]) as g:
        assert g.wait_ready(240) == "ready"
        workers = http(g.url + "/workers")[1]["workers"]
        assert len(workers) == 2 and len({w["port"] for w in workers}) == 2
        assert all(w["device"] == "cpu" and w["status"] == "idle" for w in workers)

        async def both():
            return await asyncio.gather(timed_turn(g.url, "first"), timed_turn(g.url, "second"))

        a, b = asyncio.run(both())
        assert a["last"]["type"] == b["last"]["type"] == "done"
        assert a["first"] < b["end"] and b["first"] < a["end"]  # both streamed at the same time
        # one turn on each actor (the worker is given back just after `done` reaches the client)
        wait_until(lambda: [w["total_requests"] for w in http(g.url + "/workers")[1]["workers"]] == [1, 1])
    assert source.actors == []  # the gateway's stop killed its actors


def test_actor_resources_per_accelerator():
    gpu = RayWorkers(2, WorkerOptions(), accelerator="gpu").actor_options()
    assert gpu == {"num_cpus": 1.0, "max_restarts": 0, "num_gpus": 1}
    npu = RayWorkers(8, WorkerOptions(), accelerator="npu", cpus_per_worker=8).actor_options()
    assert npu == {"num_cpus": 8, "max_restarts": 0, "resources": {"NPU": 1}}
    from llama_omni_py import ConfigError

    with pytest.raises(ConfigError, match="ray_accelerator"):
        RayWorkers(1, WorkerOptions(), accelerator="tpu")


def test_ray_workers_end_with_their_gateway(tiny_dir, ray_cluster, tmp_path):
    """SIGKILL a gateway that drives Ray worker actors: the actors are the gateway's (not
    detached), so Ray ends them with it and their ports close within seconds."""
    gcs = ray.get_runtime_context().gcs_address
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "llama_omni_py", "serve", "--port", str(port), "--ray", gcs]
    cmd += ["--ray-accelerator", "cpu", "--workers", "1", "--model-dir", str(tiny_dir), "--threads", "1"]
    cmd += ["--t2w-threads", "1"]
    gateway = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_until(lambda: _status(url + "/health") == 200, 240, 0.5)
        (worker,) = http(url + "/workers")[1]["workers"]
        worker_url = f"http://{worker['host']}:{worker['port']}/health"
        assert _status(worker_url) == 200
        gateway.kill()
        gateway.wait(10)
        wait_until(lambda: _status(worker_url) is None, 60, 0.5)
    finally:
        if gateway.poll() is None:
            gateway.kill()


def _status(url: str) -> int | None:
    try:
        return http(url)[0]
    except OSError:
        return None
