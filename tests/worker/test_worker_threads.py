"""The worker's threads: its blocking calls run on a pool bounded by its slots (not by the host's
CPUs), whose threads carry their names to the operating system (/proc/<pid>/task/*/comm)."""

import asyncio
import threading
import time
from pathlib import Path

from server_client import running_server

from llama_omni_py.orchestration.channels import name_os_thread
from llama_omni_py.server.worker.blocking import THREAD_PREFIX, max_threads


def test_a_thread_gives_the_system_its_name():
    seen = {}

    def body():
        name_os_thread()
        seen["comm"] = Path(f"/proc/self/task/{threading.get_native_id()}/comm").read_text().strip()

    t = threading.Thread(target=body, name="omni-test-name")
    t.start()
    t.join()
    assert seen["comm"] == "omni-test-name"[:15]


def test_blocking_calls_share_a_pool_bounded_by_the_slots(tiny_dir):
    assert max_threads(1) == 4 and max_threads(2) == 7
    with running_server(tiny_dir, slots=2) as s:
        loop = s.loop
        pool = loop._default_executor
        assert pool._max_workers == max_threads(2) and pool._thread_name_prefix == THREAD_PREFIX

        async def burst():  # far more calls at once than the pool has threads: they wait their turn
            return await asyncio.gather(*(asyncio.to_thread(time.sleep, 0.05) for _ in range(40)))

        t0 = time.monotonic()
        assert len(asyncio.run_coroutine_threadsafe(burst(), loop).result(60)) == 40
        assert time.monotonic() - t0 >= 0.05 * 40 / max_threads(2) * 0.9
        threads = list(pool._threads)
        assert 1 <= len(threads) <= max_threads(2)
        for t in threads:
            comm = Path(f"/proc/self/task/{t.native_id}/comm").read_text().strip()
            assert t.name.startswith(THREAD_PREFIX) and comm == t.name[:15]
