"""``llama-omni serve --workers 2``: the gateway starts two worker processes, routes two
concurrent turns to different workers, and SIGTERM stops the gateway and its workers."""

import asyncio
import json
import signal
import socket
import subprocess
import sys
import time

import psutil
import pytest
from server_client import chat_request, http, ws_chat


def test_serve_starts_workers_routes_turns_and_stops(tiny_dir):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "llama_omni_py", "serve", "--port", str(port), "--workers", "2"]
    cmd += ["--device", "cpu", "--model-dir", str(tiny_dir), "--max-new-tokens", "8", "--max-audio-per-chunk", "25"]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, cwd=tiny_dir)  # not the source tree
    url = f"http://127.0.0.1:{port}"
    try:
        deadline, body = time.monotonic() + 120, None
        while time.monotonic() < deadline:
            try:
                status, body = http(url + "/status")
                if status == 200 and body["idle_workers"] == 2:
                    break
            except OSError:
                pass
            time.sleep(0.2)
        assert body and body["idle_workers"] == 2, body
        workers = http(url + "/workers")[1]["workers"]
        children = psutil.Process(proc.pid).children()
        assert len(children) == 2 and {w["port"] for w in workers} != {None}

        async def two():
            return await asyncio.gather(*(ws_chat(url, chat_request(f"hi {i}")) for i in range(2)))

        assert all(r[-1]["type"] == "done" for r in asyncio.run(two()))
        served = [w["total_requests"] for w in http(url + "/workers")[1]["workers"]]
        assert sum(served) == 2
    finally:
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(90)
    assert rc == 0, proc.stderr.read()
    assert not any(c.is_running() and c.status() != psutil.STATUS_ZOMBIE for c in children)


def test_worker_options_round_trip_through_flags():
    """The worker's options are written once: `serve` and `worker` share their flags, to_argv()
    gives them back to a local worker, and nothing imports the CLI to rebuild them."""
    import argparse
    import pickle

    from llama_omni_py.server.worker_options import WorkerOptions

    o = WorkerOptions("/models", threads=1, max_new_tokens=40, t2w_threads=2, max_message_mb=8.0, compat=True)
    p = argparse.ArgumentParser()
    WorkerOptions.add_arguments(p)
    assert WorkerOptions.from_args(p.parse_args(o.to_argv())) == o
    assert WorkerOptions().to_argv() == [] and pickle.loads(pickle.dumps(o)) == o
    cfg = o.server_config("127.0.0.1", 0, "cpu", numa_node=None)
    assert cfg.max_message_bytes == 8 * 2**20 and cfg.compat and cfg.engine.token2wav.threads == 2
    assert cfg.reply.max_new_tokens == 40 and cfg.engine.threads == 1


def test_duplex_bad_tokens_reach_every_duplex_session(tmp_path):
    """`--duplex-bad-tokens tokenizer_config.json`: its bad_token_ids are forbidden in every duplex
    session whose config names none of its own."""
    import argparse

    import llama_omni_py as omni
    from llama_omni_py.config import DuplexConfig
    from llama_omni_py.server.worker.duplex.protocol import DuplexStart
    from llama_omni_py.server.worker.engine_host import EngineHost
    from llama_omni_py.server.worker_options import WorkerOptions

    path = tmp_path / "tokenizer_config.json"
    path.write_text(json.dumps({"bad_token_ids": [271, 198]}))
    o = WorkerOptions(duplex_bad_tokens=str(path))
    p = argparse.ArgumentParser()
    WorkerOptions.add_arguments(p)
    assert WorkerOptions.from_args(p.parse_args(o.to_argv())) == o
    cfg = o.server_config("127.0.0.1", 0, "cpu")
    assert cfg.duplex_forbidden_token_ids == (198, 271)

    class Session:
        def duplex(self, system_prompt, ref_audio, config):
            return config

    host = EngineHost(cfg)
    assert asyncio.run(host.open_duplex(Session(), DuplexStart())).forbidden_token_ids == (198, 271)
    own = DuplexStart(config=DuplexConfig(forbidden_token_ids=[5]))
    assert asyncio.run(host.open_duplex(Session(), own)).forbidden_token_ids == (5,)
    with pytest.raises(omni.ModelFileError):
        WorkerOptions(duplex_bad_tokens=str(tmp_path / "none.json")).server_config("127.0.0.1", 0, "cpu")


def test_max_new_tokens_is_the_servers_cap(tiny_dir):
    """`--max-new-tokens` caps every request: a client asking for more gets at most that many."""
    from server_client import Client, user

    from llama_omni_py.server import BackgroundServer
    from llama_omni_py.server.worker_options import WorkerOptions

    cfg = WorkerOptions(str(tiny_dir), threads=1, max_new_tokens=6, t2w_threads=1).server_config("127.0.0.1", 0, "cpu")
    assert cfg.max_new_tokens == 6
    with BackgroundServer(cfg) as s:
        assert s.wait_ready() == "ready"

        async def ask():
            async with Client.open(s.url) as c:
                await c.init()
                return await c.turn([user(text="tell me a long story")], generation={"max_new_tokens": 500})

        done = asyncio.run(ask())[-1]
    assert done["type"] == "response.done" and done["metrics"]["n_tokens"] <= 6
    assert done["reason"] == "max_new_tokens"


def test_one_engine_per_accelerator_and_config_errors_name_the_field():
    from llama_omni_py import ConfigError
    from llama_omni_py.server.gateway import GatewayConfig
    from llama_omni_py.server.gateway.workers import LocalWorkers, StaticWorkers, devices_for

    assert devices_for(None, "auto") == ["cpu"] and devices_for(2, "cpu") == ["cpu", "cpu"]  # a CPU build
    assert devices_for(None, "cuda:1") == ["cuda:1"]
    for workers, device, field in ((0, "cpu", "workers"), (2, "cuda:0", "workers")):
        with pytest.raises(ConfigError, match=field):
            devices_for(workers, device)
    cmd = LocalWorkers(["cpu"], ["--model-dir", "x"]).command("cpu")
    assert cmd[3:5] == ["worker", "--host"] and "--numa-node" in cmd and cmd[-2:] == ["--model-dir", "x"]
    with pytest.raises(ConfigError, match="connect"):
        StaticWorkers(["nowhere"])
    for field, value in (
        ("max_queue_size", -1),
        ("send_buffer_bytes", 1000),
        ("idle_release_s", 0),
        ("ping_interval_s", -1.0),
        ("model_name", " "),
        ("port", 70000),
    ):
        with pytest.raises(ConfigError, match=field):
            GatewayConfig(**{field: value})
    with pytest.raises(ConfigError, match="idle_release_s"):
        GatewayConfig(idle_release_s=400, idle_timeout_s=300)
