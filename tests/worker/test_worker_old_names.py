"""The worker's old names, kept for one release: each works and warns (DeprecationWarning)."""

import pytest

import llama_omni_py.server as server
from llama_omni_py.server.worker import engine_host


def test_omni_server_is_the_worker_server():
    with pytest.warns(DeprecationWarning, match="WorkerServer"):
        assert server.OmniServer is server.WorkerServer


def test_engine_is_the_engine_host_and_engine_is_host():
    with pytest.warns(DeprecationWarning, match="EngineHost"):
        assert engine_host.Engine is engine_host.EngineHost
    config = server.WorkerConfig(port=0)
    host = engine_host.EngineHost(config)
    with pytest.warns(DeprecationWarning, match="host="):
        worker = server.WorkerServer(config, engine=host)
    assert worker.host is host and host.state == "loading"  # nothing loads before start()
