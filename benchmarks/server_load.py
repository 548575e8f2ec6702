"""Server load test: N clients x M turns against `llama-omni serve` (the gateway in front of
--workers workers, one session each, a FIFO queue) over the demo chat API (WS /ws/chat,
one request per connection). Every turn must complete (done); one refused (error, e.g. a full
queue), failed or taking longer than --turn-timeout makes the exit code 1. Reports turn latency,
queue wait (request sent -> queue_done, and the gateway's own histogram), time to first audio,
refusals, and /health latency probed throughout.

    python benchmarks/server_load.py [--clients 16] [--turns 5] [--workers 2] [--model-dir DIR | --url URL]

--backend measures one worker alone (`llama-omni worker`, WS /backend, one session at a
time): there a turn is either completed or refused as busy (session_busy), as the backend protocol
prescribes. Without --url the server is started on a free port over --model-dir (default: a tiny
random-weight set written to a temporary directory), replies capped at --max-new-tokens LLM tokens
and --codes-per-chunk speech codes per 10-token chunk.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from common import write_result  # noqa: E402
from websockets.asyncio.client import connect  # noqa: E402


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _health(url: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(url + "/health", timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def _idle_workers(url: str) -> int:
    with urllib.request.urlopen(url + "/status", timeout=10) as r:
        return json.loads(r.read())["idle_workers"]


def start_server(
    model_dir: str, max_new_tokens: int, codes_per_chunk: int, workers: int | None, extra: tuple = ()
) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    command = ["worker"] if workers is None else ["serve", "--workers", str(workers)]
    cmd = [
        sys.executable,
        "-m",
        "llama_omni_py",
        *command,
        "--port",
        str(port),
        "--model-dir",
        str(Path(model_dir).resolve()),
        "--device",
        "cpu",
        "--max-new-tokens",
        str(max_new_tokens),
        "--max-audio-per-chunk",
        str(codes_per_chunk),
        *extra,
    ]
    # Not from the source tree: `-m llama_omni_py` there would import the uncompiled package.
    proc = subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=tempfile.gettempdir()
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited: {proc.stderr.read()}")
        try:
            if _health(url)[0] == 200 and (workers is None or _idle_workers(url) == workers):
                return proc, url
        except OSError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise RuntimeError("the server did not become ready in 300 s")


async def one_turn(url: str, text: str, timeout: float, backend: bool) -> dict:
    """One request: {'outcome': completed | refused | failed | hung, ...}."""
    out: dict = {"outcome": "failed"}
    try:
        return await asyncio.wait_for((_session if backend else _chat)(url, text, out), timeout)
    except asyncio.TimeoutError:
        out["outcome"] = "hung"
    except Exception as e:  # noqa: BLE001 -- counted as a failure
        out.update(outcome="failed", error=f"{type(e).__name__}: {e}")
    return out


async def _chat(url: str, text: str, out: dict) -> dict:
    """One /ws/chat request through the gateway."""
    async with connect(url.replace("http://", "ws://") + "/ws/chat", max_size=None) as ws:
        sent = time.perf_counter()
        await ws.send(json.dumps({"messages": [{"role": "user", "content": text}], "streaming": True}))
        audio, started = 0, sent
        async for raw in ws:
            ev = json.loads(raw)
            if ev["type"] == "queued":
                out.update(queued=True, estimated_wait_s=ev["estimated_wait_s"], position=ev["position"])
            elif ev["type"] == "queue_done":
                started = time.perf_counter()
            elif ev["type"] == "chunk" and ev.get("audio_data"):
                out.setdefault("ttfa_ms", (time.perf_counter() - started) * 1000)
                out.setdefault("ttfa_incl_queue_ms", (time.perf_counter() - sent) * 1000)
                audio += len(ev["audio_data"]) * 3 // 4 // 4
            elif ev["type"] == "done":
                now = time.perf_counter()
                out.update(
                    outcome="completed",
                    turn_ms=(now - started) * 1000,
                    queue_wait_ms=(started - sent) * 1000,
                    audio_s=audio / 24000,
                )
            elif ev["type"] == "error":
                full = "queue_full" in ev.get("code", "") or "Queue full" in ev.get("error", "")
                out.update(outcome="refused" if full else "failed", reason=ev.get("code"), diagnostic=ev.get("error"))
    return out


async def _session(url: str, text: str, out: dict) -> dict:
    t0 = time.perf_counter()
    async with connect(url.replace("http://", "ws://") + "/backend", max_size=None) as ws:
        await ws.send(json.dumps({"type": "session.init", "payload": {"mode": "turn_based"}}))
        ev = json.loads(await ws.recv())
        if ev["type"] == "session.closed":
            ok = ev.get("reason") == "session_busy" and ev.get("diagnostic", {}).get("message")
            return {
                "outcome": "refused" if ok else "failed",
                "reason": ev.get("reason"),
                "diagnostic": ev.get("diagnostic", {}).get("message"),
            }
        out["setup_ms"] = (time.perf_counter() - t0) * 1000
        out["session_id"] = ev["session_id"]
        sent = time.perf_counter()
        await ws.send(
            json.dumps(
                {"type": "input.append", "input": {"messages": [{"role": "user", "content": text}], "streaming": True}}
            )
        )
        audio = 0
        while True:
            ev = json.loads(await ws.recv())
            if ev["type"] == "response.output.delta" and ev["kind"] == "audio":
                out.setdefault("ttfa_ms", (time.perf_counter() - sent) * 1000)
                audio += len(ev["audio"]) * 3 // 4 // 4
            elif ev["type"] == "response.done":
                out.update(outcome="completed", turn_ms=(time.perf_counter() - sent) * 1000, audio_s=audio / 24000)
                break
            elif ev["type"] == "session.closed":
                out.update(reason=ev.get("reason"), diagnostic=ev.get("diagnostic"))
                return out
        sid = out.pop("session_id")
        req = urllib.request.Request(f"{url}/sessions/{sid}/close", data=b"{}", method="POST")  # close is HTTP only
        await asyncio.to_thread(lambda: urllib.request.urlopen(req, timeout=30).read())
        ev = json.loads(await ws.recv())
        if ev["type"] != "session.closed" or ev.get("reason") != "client_closed":
            out.update(outcome="failed", error=f"unexpected close event {ev}")
    return out


async def client(url: str, turns: int, timeout: float, rng: random.Random, backend: bool) -> list[dict]:
    results = []
    for i in range(turns):
        await asyncio.sleep(rng.uniform(0.0, 0.2))  # clients drift apart
        results.append(await one_turn(url, f"Question {i}: tell me about the weather.", timeout, backend))
    return results


async def probe_health(url: str, stop: asyncio.Event) -> list[float]:
    lat = []
    while not stop.is_set():
        t0 = time.perf_counter()
        status, _ = await asyncio.to_thread(_health, url)
        if status != 200:
            raise RuntimeError(f"/health answered {status} under load")
        lat.append((time.perf_counter() - t0) * 1000)
        await asyncio.sleep(0.1)
    return lat


def pct(values) -> dict | None:
    if not values:
        return None
    v = np.asarray(values)
    return {
        "n": int(v.size),
        **{f"p{p}": round(float(np.percentile(v, p)), 1) for p in (50, 90, 99)},
        "max": round(float(v.max()), 1),
    }


def queue_wait_histogram(url: str) -> dict:
    """The gateway's omni_queue_wait_seconds histogram (count, sum, buckets) from /metrics."""
    with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
        text = r.read().decode()
    out: dict = {"buckets": {}}
    for line in text.splitlines():
        if line.startswith("omni_queue_wait_seconds_bucket"):
            le = line.split('le="')[1].split('"')[0]
            out["buckets"][le] = float(line.rsplit(" ", 1)[1])
        elif line.startswith(("omni_queue_wait_seconds_count", "omni_queue_wait_seconds_sum")):
            out[line.split(" ")[0].rsplit("_", 1)[1]] = float(line.rsplit(" ", 1)[1])
        elif line.startswith("omni_refusals_total"):
            out.setdefault("refusals", {})[line.split('"')[1]] = float(line.rsplit(" ", 1)[1])
    return out


async def run(url: str, clients: int, turns: int, timeout: float, seed: int, backend: bool) -> dict:
    stop = asyncio.Event()
    prober = asyncio.create_task(probe_health(url, stop))
    t0 = time.perf_counter()
    per_client = await asyncio.gather(
        *(client(url, turns, timeout, random.Random(seed + i), backend) for i in range(clients))
    )
    wall = time.perf_counter() - t0
    stop.set()
    health_ms = await prober
    flat = [r for rs in per_client for r in rs]
    count = {k: sum(r["outcome"] == k for r in flat) for k in ("completed", "refused", "failed", "hung")}
    done = [r for r in flat if r["outcome"] == "completed"]
    return {
        "clients": clients,
        "turns_per_client": turns,
        "wall_s": round(wall, 2),
        "outcomes": count,
        "turn_ms": pct([r["turn_ms"] for r in done]),
        "ttfa_ms": pct([r["ttfa_ms"] for r in done if "ttfa_ms" in r]),
        "ttfa_incl_queue_ms": pct([r["ttfa_incl_queue_ms"] for r in done if "ttfa_incl_queue_ms" in r]),
        "queue_wait_ms": pct([r["queue_wait_ms"] for r in done if "queue_wait_ms" in r]),
        "queued_turns": sum(bool(r.get("queued")) for r in flat),
        "setup_ms": pct([r["setup_ms"] for r in done if "setup_ms" in r]),
        "health_ms": pct(health_ms),
        "audio_s_per_turn": pct([r["audio_s"] for r in done]),
        "refusal_diagnostics": sorted({r["diagnostic"] for r in flat if r["outcome"] == "refused"}),
        "failures": [r for r in flat if r["outcome"] in ("failed", "hung")],
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--turns", type=int, default=5)
    ap.add_argument("--workers", type=int, default=2, help="workers behind the gateway")
    ap.add_argument("--backend", action="store_true", help="one worker's /backend alone (no gateway)")
    ap.add_argument("--url", help="an already running server (else one is started)")
    ap.add_argument("--model-dir", help="module set for the started server (default: a fresh tiny set)")
    ap.add_argument("--max-new-tokens", type=int, default=20)
    ap.add_argument(
        "--codes-per-chunk",
        type=int,
        default=25,
        help="speech codes per text chunk (random weights never end one; 25 = 1 s, real speech's rate)",
    )
    ap.add_argument("--turn-timeout", type=float, default=120.0, help="seconds before a turn counts as hung")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", help="JSON path (default: benchmarks/results/server_load-<time>.json)")
    args = ap.parse_args(argv)
    proc, tmp = None, None
    url = args.url
    if url is None:
        model_dir = args.model_dir
        if model_dir is None:
            from llama_omni_py import make_models

            tmp = tempfile.TemporaryDirectory(prefix="omni-load-")
            model_dir = tmp.name
            make_models(model_dir, "tiny")
        proc, url = start_server(
            model_dir, args.max_new_tokens, args.codes_per_chunk, None if args.backend else args.workers
        )
    try:
        result = asyncio.run(run(url, args.clients, args.turns, args.turn_timeout, args.seed, args.backend))
        status, health = _health(url)
        result["health_after"] = {"status": status, **health}
        if not args.backend:
            result["gateway_queue_wait_s"] = queue_wait_histogram(url)
        if proc is not None:
            result["server_alive"] = proc.poll() is None
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(60)
        if tmp is not None:
            tmp.cleanup()
    write_result(
        "server_load", {"settings": {k: v for k, v in vars(args).items() if k != "out"}, "result": result}, (), args.out
    )
    o = result["outcomes"]
    print(
        f"{o['completed']} completed, {o['refused']} refused, {o['failed']} failed, {o['hung']} hung "
        f"in {result['wall_s']} s; {result['queued_turns']} queued; queue wait ms {result['queue_wait_ms']}; "
        f"turn ms {result['turn_ms']}; TTFA ms {result['ttfa_ms']}; health ms {result['health_ms']}"
    )
    lost = o["failed"] or o["hung"] or (o["refused"] and not args.backend)
    ok = not lost and status == 200 and result.get("server_alive", True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
