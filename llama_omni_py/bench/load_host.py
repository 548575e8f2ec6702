"""One process of the load benchmark (``llama-omni bench --mode load``, load.py): an engine of
``slots`` session slots, or one single-slot OmniSession (a worker, as users run them today).

    python -m llama_omni_py.bench.load_host SPEC_JSON

SPEC_JSON: {"model_dir", "device", "slots", "single": bool,
           "config": {"engine": EngineConfig fields, "reply": ReplyConfig fields}}.
The process answers one JSON line per command read from stdin, on the stdout it had at start
(the native libraries' prints go to stderr instead):

    -> (at start)                  {"ready": true, "load_s", "memory", "process", "resolved"}
    {"cmd": "run", "kind", "seeds", "t0", ...}  -> {"sessions": [...], "process", "scheduler"}
    {"cmd": "quit"}                -> the process exits

``run`` streams one session per seed (slot i gets seeds[i]) from one thread each, all starting at
``t0`` (time.monotonic(), the same clock in every process of the host). A session that fails is
recorded with its error; the process keeps serving.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import threading
import time
import traceback

from ..constants import OUTPUT_SAMPLE_RATE
from . import prompts
from .duplex import CASE_RATE, _speechlike, run_units

TEXT_PROMPTS = ("story", "weather")  # slot i asks TEXT_PROMPTS[i % 2]: two prompt lengths


def process_memory(pid: int | str = "self") -> dict:
    """Resident memory of a process in bytes: ``rss`` (what top shows; pages of a file mapped by
    several processes count in each), ``pss`` (shared pages divided among their users: the sum
    over processes is the physical memory they hold), ``anon`` (private allocations), ``hwm``
    (peak rss)."""
    fields = {"VmRSS": "rss", "VmHWM": "hwm", "RssAnon": "anon"}
    out = {v: 0 for v in fields.values()}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key = line.split(":", 1)[0]
            if key in fields:
                out[fields[key]] = int(line.split()[1]) * 1024
    out["pss"] = out["rss"]
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    out["pss"] = int(line.split()[1]) * 1024
    except OSError:  # kernels before 4.14: rss stands in
        pass
    return out


def _sha1(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()[:16]


def _turn_based(session, kind: str, slot: int, seed: int, max_new_tokens: int) -> dict:
    """One streamed reply: arrival of the first and last audio, the reply's Timings."""
    name = TEXT_PROMPTS[slot % len(TEXT_PROMPTS)] if kind == "text" else "audio"
    start = time.monotonic()
    first = last = None
    text, timings = [], None
    for ch in session.stream(**prompts.PROMPTS[name].inputs(), seed=seed, max_new_tokens=max_new_tokens):
        text.append(ch.text_delta)
        if ch.audio.size:
            last = time.monotonic()
            first = first or last
        timings = ch.timings or timings
    t = timings
    return {
        "prompt": name,
        "start": start,
        "end": last or time.monotonic(),
        "time_to_first_audio_s": None if first is None else first - start,
        "audio_s": t.audio_s,
        "n_tokens": t.n_tokens,
        "n_tts_tokens": t.n_tts_tokens,
        "stage_ms": {"llm": t.llm_ms, "tts": t.tts_ms, "token2wav": t.token2wav_ms, "apm": t.apm_ms},
        "reply_sha1": _sha1("".join(text)),
    }


def _duplex(session, seed: int, units: int, interval_s: float, force_listen: int) -> dict:
    """A duplex conversation of ``units`` 1 s units of speech-like audio (no frames)."""
    from ..config import DuplexConfig

    case = [(_speechlike(i, CASE_RATE), None) for i in range(units)]
    start = time.monotonic()
    with session.duplex(config=DuplexConfig(seed=seed, force_listen_count=force_listen)) as d:
        frames = run_units(d, case, interval_s)
    end = time.monotonic()
    spoke = [f for f in frames if not f["is_listen"] and f["audio_samples"]]
    texts = "|".join(f"{f['is_listen']}:{f['text_chars']}:{f['n_tts_tokens']}" for f in frames)
    stage = {s: sum(f["stage_ms"][s] for f in frames) for s in ("apm", "prefill", "decode", "tts", "token2wav")}
    return {
        "prompt": f"duplex-{units}",
        "start": start,
        "end": end,
        "time_to_first_audio_s": spoke[0]["t_result_s"] if spoke else None,  # from the first push
        "audio_s": sum(f["audio_samples"] for f in frames) / OUTPUT_SAMPLE_RATE,
        "n_tokens": sum(f["n_tokens"] for f in frames),
        "n_tts_tokens": sum(f["n_tts_tokens"] for f in frames),
        "stage_ms": {
            "llm": stage["prefill"] + stage["decode"],
            "tts": stage["tts"],
            "token2wav": stage["token2wav"],
            "apm": stage["apm"],
        },
        "speaking_units": len(spoke),
        "reply_sha1": _sha1(texts),
    }


def run_session(session, cmd: dict, slot: int, seed: int) -> dict:
    """One session of the phase, started at cmd["t0"]; an error is recorded, not raised."""
    time.sleep(max(0.0, cmd["t0"] - time.monotonic()))
    try:
        if cmd["kind"] == "duplex":
            rec = _duplex(session, seed, cmd["units"], cmd["interval_s"], cmd["force_listen"])
        else:
            rec = _turn_based(session, cmd["kind"], slot, seed, cmd["max_new_tokens"])
        rec["error"] = None
    except Exception as e:  # recorded: the run is marked invalid, the other sessions go on
        now = time.monotonic()
        rec = {"prompt": cmd["kind"], "start": now, "end": now, "error": f"{type(e).__name__}: {e}"}
        traceback.print_exc(file=sys.stderr)
    rec.update(slot=slot, seed=seed, kind=cmd["kind"])
    return rec


class Host:
    """The loaded engine (or lone session) and its open sessions."""

    def __init__(self, spec: dict):
        from ..config import EngineConfig, ReplyConfig, Token2WavConfig
        from ..session import OmniEngine, OmniSession

        fields = dict(spec["config"]["engine"])
        fields["token2wav"] = Token2WavConfig(threads=fields.pop("t2w_threads", None))
        config, reply = EngineConfig(**fields), ReplyConfig(**spec["config"]["reply"])
        t0 = time.perf_counter()
        if spec["single"]:
            self.sessions = [OmniSession(spec["model_dir"], spec["device"], config, reply=reply)]
            self.engine = self.sessions[0].engine
        else:
            self.engine = OmniEngine(spec["model_dir"], spec["device"], spec["slots"], config, reply=reply)
            self.sessions = [self.engine.session() for _ in range(spec["slots"])]
        self.load_s = time.perf_counter() - t0

    def memory(self) -> tuple[dict | None, str | None]:
        try:
            return self.engine.memory(), None
        except AttributeError as e:  # a module without its byte counts
            return None, str(e)

    def scheduler(self) -> dict:
        s = self.engine.scheduler_stats
        return {"llm_batches": int(s["llm_batches"]), "llm_batched_steps": int(s["llm_batched_steps"])}

    def resolved(self) -> dict:
        s = self.sessions[0]
        return {
            "device": s.device,
            "llm_threads": s.engine_config.llm_threads,
            "t2w_threads": s.token2wav.threads,
            "pinned": s.placement is not None,
        }

    def run(self, cmd: dict) -> dict:
        seeds = cmd["seeds"]
        if len(seeds) > len(self.sessions):
            raise ValueError(f"{len(seeds)} sessions asked of a host with {len(self.sessions)}")
        before = self.scheduler()
        out: list[dict | None] = [None] * len(seeds)

        def body(i):
            out[i] = run_session(self.sessions[i], cmd, cmd["slot_base"] + i, seeds[i])

        threads = [threading.Thread(target=body, args=(i,), name=f"load-session-{i}") for i in range(len(seeds))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        after = self.scheduler()
        return {
            "sessions": out,
            "process": process_memory(),
            "scheduler": {k: after[k] - before[k] for k in after},
        }

    def close(self) -> None:
        for s in self.sessions:
            s.close()
        self.engine.close()


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    reply = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # native prints must not reach the protocol stream
    sys.stdout = sys.stderr

    def send(obj):
        reply.write(json.dumps(obj) + "\n")

    try:
        host = Host(json.loads(argv[0]))
    except Exception as e:
        traceback.print_exc(file=sys.stderr)
        send({"ready": False, "error": f"{type(e).__name__}: {e}"})
        return 1
    memory, note = host.memory()
    send(
        {
            "ready": True,
            "pid": os.getpid(),
            "load_s": host.load_s,
            "memory": memory,
            "memory_note": note,
            "process": process_memory(),
            "resolved": host.resolved(),
        }
    )
    try:
        for line in sys.stdin:
            cmd = json.loads(line)
            if cmd["cmd"] == "quit":
                break
            try:
                send(host.run(cmd))
            except Exception as e:
                send({"error": f"{type(e).__name__}: {e}"})
    finally:
        host.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
