"""Server soak: `llama-omni serve --workers 1 --slots 2` under a mixed load for --minutes: --clients
clients, each turning in order through a demo chat turn (WS /ws/chat), an OpenAI chat completion
(the official `openai` client) and an OpenAI Realtime session (the official client's realtime
connection: three text items, each answered with audio, then the close). The gateway's and the
worker's RSS and thread counts (/proc/<pid>/status) are sampled every --sample-s; the result
reports each RSS slope (MB per hour, a least-squares line over the samples after the first
--warmup-min minutes), each thread count's first, min, max and final value, the worker's threads
by name (/proc/<pid>/task/*/comm) at its first sample, its peak and its end, and every request
that was lost (an error, a refusal, no answer within --turn-timeout) or answered twice (more
than one done / response.done for it, or a completion with other than one choice). Exit code 1
when any was lost or duplicated, or the server did not live through it.

    python benchmarks/server_soak.py [--minutes 20] [--clients 4] [--model-dir DIR]

The package names its own Python threads (omni-block_N: the worker's pool for blocking calls;
omni-<stage>: a turn's stage threads; omni-async-brid: a stream's bridge to asyncio). Threads
named after the process (python) are its main thread, the lifeline watcher and the native
libraries' pools (docs/serving.md, "Threads").
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np
import psutil

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from common import write_result  # noqa: E402
from server_load import start_server  # noqa: E402
from websockets.asyncio.client import connect  # noqa: E402

MODEL = "MiniCPM-o-4.5"
KINDS = ("chat", "openai", "realtime")


async def chat_turn(url: str, text: str) -> dict:
    """One /ws/chat request: exactly one done, or it is lost."""
    async with connect(url.replace("http://", "ws://") + "/ws/chat", max_size=None) as ws:
        await ws.send(json.dumps({"messages": [{"role": "user", "content": text}], "streaming": True}))
        done = errors = 0
        async for raw in ws:
            ev = json.loads(raw)
            done += ev["type"] == "done"
            errors += ev["type"] == "error"
    return {"answers": done, "errors": errors}


async def openai_turn(client, text: str) -> dict:
    r = await client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": text}], max_tokens=20)
    return {"answers": len(r.choices), "errors": 0}


async def realtime_session(client, text: str, responses: int = 3) -> dict:
    """One Realtime connection: ``responses`` text items each answered with audio."""
    answers = errors = 0
    async with client.realtime.connect(model=MODEL) as conn:
        for i in range(responses):
            item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": f"{text} ({i})"}]}
            await conn.conversation.item.create(item=item)
            await conn.response.create()
            while True:
                ev = await conn.recv()
                if ev.type == "error":
                    errors += 1
                    break
                if ev.type == "response.done":
                    answers += ev.response.status == "completed"
                    errors += ev.response.status != "completed"
                    break
    return {"answers": answers, "errors": errors, "expected": responses}


async def client_loop(i: int, url: str, until: float, timeout: float, log: list) -> None:
    from openai import AsyncOpenAI

    oa = AsyncOpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=timeout)
    n = i
    while time.monotonic() < until:
        kind = KINDS[n % len(KINDS)]
        text = f"client {i} request {n}: tell me about the weather."
        t0 = time.monotonic()
        try:
            if kind == "chat":
                coro = chat_turn(url, text)
            elif kind == "openai":
                coro = openai_turn(oa, text)
            else:
                coro = realtime_session(oa, text)
            out = await asyncio.wait_for(coro, timeout)
        except Exception as e:  # noqa: BLE001 -- a lost request, counted
            out = {"answers": 0, "errors": 1, "exception": f"{type(e).__name__}: {e}"[:300]}
        out.update(kind=kind, client=i, s=round(time.monotonic() - t0, 2))
        log.append(out)
        n += 1


def worker_of(gateway: psutil.Process) -> psutil.Process | None:
    """The gateway's worker process (`llama_omni_py worker`), or None between a death and its
    restart."""
    for child in gateway.children(recursive=True):
        try:
            if "worker" in child.cmdline():
                return child
        except psutil.Error:
            continue
    return None


def proc_status(pid: int) -> dict:
    """VmRSS (MB) and Threads of /proc/<pid>/status."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key == "VmRSS":
                out["rss_mb"] = int(value.split()[0]) / 1024
            elif key == "Threads":
                out["threads"] = int(value)
    return out


def thread_names(pid: int) -> dict:
    """How many of the process's threads carry each name (/proc/<pid>/task/*/comm), most first."""
    names: Counter = Counter()
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            names[task.joinpath("comm").read_text().strip()] += 1
        except OSError:  # the thread ended meanwhile
            pass
    return dict(names.most_common())


class Sampler:
    """Samples (t, gateway RSS, worker RSS, gateway threads, worker threads) and keeps the worker's
    thread names at the first sample, at the (first) peak of its thread count and at the last."""

    def __init__(self, gateway: psutil.Process):
        self.gateway, self.worker = gateway, worker_of(gateway)
        self.samples: list = []
        self.names: dict = {}
        self.start = time.monotonic()

    def sample(self) -> None:
        if self.worker is None or not self.worker.is_running():
            self.worker = worker_of(self.gateway)  # restarted: follow the new process
        if self.worker is None:
            return
        try:
            g, w = proc_status(self.gateway.pid), proc_status(self.worker.pid)
            names = thread_names(self.worker.pid)
        except OSError:  # a process ended between the lookups
            return
        t = round(time.monotonic() - self.start, 1)
        self.samples.append((t, round(g["rss_mb"], 1), round(w["rss_mb"], 1), g["threads"], w["threads"]))
        at = {"t": t, "threads": w["threads"], "names": names}
        self.names.setdefault("first", at)
        if w["threads"] > self.names.get("peak", {"threads": -1})["threads"]:
            self.names["peak"] = at
        self.names["last"] = at


def spread(samples: list, column: int) -> dict:
    """first, min, max and final of one column of the samples."""
    values = [s[column] for s in samples]
    return {"first": values[0], "min": min(values), "max": max(values), "final": values[-1]}


def slope_mb_per_hour(samples: list, column: int, after_s: float) -> float | None:
    pts = [(t, row[column]) for t, *row in samples if t >= after_s]
    if len(pts) < 3:
        return None
    t, y = np.array(pts).T
    return round(float(np.polyfit(t / 3600.0, y, 1)[0]), 2)


def mean_seconds(log: list) -> dict:
    return {k: round(float(np.mean([r["s"] for r in log if r["kind"] == k] or [0])), 2) for k in KINDS}


async def soak(url: str, proc, args) -> dict:
    sampler = Sampler(psutil.Process(proc.pid))
    sampler.sample()  # before any request: the idle server
    log: list = []
    until = time.monotonic() + args.minutes * 60
    clients = [asyncio.create_task(client_loop(i, url, until, args.turn_timeout, log)) for i in range(args.clients)]
    while not all(c.done() for c in clients):
        await asyncio.wait(clients, timeout=args.sample_s)
        sampler.sample()
    await asyncio.gather(*clients)
    samples = sampler.samples
    lost = [r for r in log if r["errors"] or r["answers"] < r.get("expected", 1)]
    duplicated = [r for r in log if r["answers"] > r.get("expected", 1)]
    warm = args.warmup_min * 60
    by_kind = {k: sum(r["kind"] == k for r in log) for k in KINDS}
    answered = sum(r["answers"] for r in log)
    return {
        "requests": len(log),
        "by_kind": by_kind,
        "replies": answered,
        "lost": lost,
        "duplicated": duplicated,
        "rss_mb": {
            "gateway": {"first": samples[0][1], "last": samples[-1][1], "max": max(s[1] for s in samples)},
            "worker": {"first": samples[0][2], "last": samples[-1][2], "max": max(s[2] for s in samples)},
        },
        "rss_slope_mb_per_hour": {
            "gateway": slope_mb_per_hour(samples, 0, warm),
            "worker": slope_mb_per_hour(samples, 1, warm),
        },
        "threads": {"gateway": spread(samples, 3), "worker": spread(samples, 4)},
        "worker_thread_names": sampler.names,
        "sample_columns": ["s", "gateway_rss_mb", "worker_rss_mb", "gateway_threads", "worker_threads"],
        "samples": samples,
        "seconds_per_request": mean_seconds(log),
    }


def counters(url: str) -> dict:
    """The gateway's turn, worker-failure and restart counters from /metrics."""
    import urllib.request

    with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
        text = r.read().decode()
    names = ("omni_worker_failures_total", "omni_worker_restarts_total", "omni_turns_total")
    lines = [line.rsplit(" ", 1) for line in text.splitlines() if line.startswith(names)]
    return {name: float(value) for name, value in lines}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=20.0)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--slots", type=int, default=2)
    ap.add_argument("--model-dir", help="module set (default: a fresh tiny set)")
    ap.add_argument("--max-new-tokens", type=int, default=20)
    ap.add_argument("--codes-per-chunk", type=int, default=25)
    ap.add_argument("--sample-s", type=float, default=10.0, help="seconds between RSS and thread samples")
    ap.add_argument("--warmup-min", type=float, default=2.0, help="minutes left out of the RSS slope")
    ap.add_argument("--turn-timeout", type=float, default=180.0, help="seconds before a request counts as lost")
    ap.add_argument("--out", help="JSON path (default: benchmarks/results/server_soak-<time>.json)")
    args = ap.parse_args(argv)
    tmp = None
    model_dir = args.model_dir
    if model_dir is None:
        from llama_omni_py import make_models

        tmp = tempfile.TemporaryDirectory(prefix="omni-soak-")
        model_dir = tmp.name
        make_models(model_dir, "tiny")
    proc, url = start_server(model_dir, args.max_new_tokens, args.codes_per_chunk, 1, ("--slots", str(args.slots)))
    try:
        result = asyncio.run(soak(url, proc, args))
        result["server_alive"] = proc.poll() is None
        result["metrics"] = counters(url)
    finally:
        proc.terminate()
        proc.wait(60)
        if tmp is not None:
            tmp.cleanup()
    settings = {k: v for k, v in vars(args).items() if k != "out"}
    write_result("server_soak", {"settings": settings, "result": result}, (), args.out)
    slope, rss, threads = result["rss_slope_mb_per_hour"], result["rss_mb"], result["threads"]
    print(
        f"{result['requests']} requests ({result['by_kind']}), {result['replies']} replies; "
        f"{len(result['lost'])} lost, {len(result['duplicated'])} duplicated; RSS MB/h gateway {slope['gateway']} "
        f"worker {slope['worker']}; RSS MB gateway {rss['gateway']} worker {rss['worker']}; "
        f"threads gateway {threads['gateway']} worker {threads['worker']}"
    )
    for when, at in result["worker_thread_names"].items():
        print(f"worker threads, {when} (t={at['t']} s): {at['threads']} {at['names']}")
    return 0 if result["server_alive"] and not result["lost"] and not result["duplicated"] else 1


if __name__ == "__main__":
    sys.exit(main())
