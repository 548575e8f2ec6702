"""Hands-free voice latency: spoken questions (espeak-ng) sent at real time, as a microphone
sends them, through each voice interface -- the half-duplex WebSocket (0.5 s float32 chunks, the
demo page's), the OpenAI Realtime API (100 ms PCM16 chunks, the official client) and the Python
API (VoiceSession.push, 100 ms pieces) -- and, per turn:

* end of speech -> first audio byte: from the instant the question's last audible sample was
  spoken (the microphone's clock: chunk i is sent once it has been recorded) to the arrival of
  the first message carrying reply audio;
* VAD decision delay: end of speech -> the end-of-speech event (vad_state false / speech_stopped
  / SpeechStopped), i.e. the silence wait plus the chunking;
* the rest, per stage (Python API, the reply's own timings): encoding the utterance, prefill,
  first 10 text tokens, first speech codes, first audio.

After each question the microphone sends silence until the reply is done, then asks the next.

    python benchmarks/voice_latency.py [--model-dir DIR] [--questions 10] [--silence-ms 500]
                                       [--interfaces half_duplex,realtime,python] [--out FILE]

Without --model-dir the demo set (tiny, random weights) is used; ``--model-dir`` a real-dimension
set (``llama_omni_py.demo.demo_model_dir("real")``) gives real stage costs. The servers run in
this process (a worker and a gateway on free ports). Results: docs/performance.md.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import statistics
import sys
import threading
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))

from common import write_result  # noqa: E402
from speech import SR, say  # noqa: E402  (tests/speech.py: espeak-ng material)

from llama_omni_py.demo import DEMO_AUDIO_PER_CHUNK  # noqa: E402

QUESTIONS = [
    "What is the capital of France?",
    "How far away is the moon?",
    "Tell me a joke about cats.",
    "What time is it in Tokyo?",
    "How do I boil an egg?",
    "Who wrote Romeo and Juliet?",
    "What is the weather like today?",
    "Can you recommend a good book?",
    "How many legs does a spider have?",
    "Why is the sky blue?",
    "What is two plus two?",
    "Where do penguins live?",
]
AUDIBLE = 0.02
MARKS = ("first_text", "first_audio")  # what the Python API times after the VAD decision


class Microphone:
    """A real-time audio source: the queued question, then silence, chunk by chunk at the pace
    of recording. ``spoken_at(sample)`` is the wall time a sample of the stream was spoken."""

    def __init__(self, chunk_s: float):
        self.chunk = int(chunk_s * SR)
        self.queue: list[np.ndarray] = []
        self.sent = 0  # samples sent
        self.t0: float | None = None

    def ask(self, audio: np.ndarray) -> tuple[int, int]:
        """Queues a question; its (first, last) audible sample in the stream."""
        at = self.sent + sum(q.size for q in self.queue)
        loud = np.flatnonzero(np.abs(audio) > AUDIBLE)
        self.queue.append(audio)
        return at + int(loud[0]), at + int(loud[-1])

    def next_chunk(self) -> np.ndarray:
        if self.t0 is None:
            self.t0 = time.monotonic()
        out = np.zeros(self.chunk, np.float32)
        n = 0
        while self.queue and n < self.chunk:
            q = self.queue[0]
            take = min(self.chunk - n, q.size)
            out[n : n + take] = q[:take]
            n += take
            self.queue[0] = q[take:]
            if not self.queue[0].size:
                self.queue.pop(0)
        self.sent += self.chunk
        return out

    def wait_s(self) -> float:
        """Until this chunk has been recorded."""
        return max(0.0, self.t0 + self.sent / SR - time.monotonic()) if self.t0 is not None else 0.0

    def spoken_at(self, sample: int) -> float:
        return self.t0 + sample / SR


async def _converse(send_chunk, events, mic: Microphone, questions, is_stop, marks: dict, is_done):
    """Asks each question, keeps the microphone running, and times each turn from the events:
    the VAD decision (``is_stop``), then the first event matching each of ``marks`` (name ->
    predicate; "first_audio" is the reply's first audio) after it."""
    turns = []
    for audio in questions:
        _, last = mic.ask(audio)
        vad, seen, start = None, {}, len(events)
        while True:
            chunk = mic.next_chunk()
            await asyncio.sleep(mic.wait_s())  # sent once it has been recorded
            await send_chunk(chunk)
            for t, ev in events[start:]:
                if vad is None and is_stop(ev):
                    vad = t
                elif vad is not None:
                    for name, match in marks.items():
                        if name not in seen and match(ev):
                            seen[name] = t
            if vad is not None and any(is_done(ev) for _, ev in events[start:]) and not mic.queue:
                break
        end = mic.spoken_at(last)
        turns.append(
            {
                "vad_delay_ms": (vad - end) * 1000,
                "first_audio_ms": (seen["first_audio"] - end) * 1000 if "first_audio" in seen else None,
                "after_vad_ms": {name: (seen[name] - vad) * 1000 if name in seen else None for name in marks},
            }
        )
    return turns


async def half_duplex(url: str, questions, silence_ms: int, threshold: float) -> list[dict]:
    from websockets.asyncio.client import connect

    events: list = []
    async with connect(url.replace("http://", "ws://") + "/ws/half_duplex/bench", max_size=None) as ws:
        assert json.loads(await ws.recv())["type"] == "queue_done"
        vad = {"threshold": threshold, "min_silence_duration_ms": silence_ms}
        await ws.send(json.dumps({"type": "prepare", "config": {"vad": vad, "session": {"timeout_s": 600}}}))
        assert json.loads(await ws.recv())["type"] == "prepared"
        await asyncio.sleep(0.6)  # the cold-start guard

        async def read():
            async for raw in ws:
                events.append((time.monotonic(), json.loads(raw)))

        reader = asyncio.create_task(read())

        async def send(chunk):
            b64 = base64.b64encode(chunk.astype("<f4").tobytes()).decode()
            await ws.send(json.dumps({"type": "audio_chunk", "audio_base64": b64}))

        turns = await _converse(
            send,
            events,
            Microphone(0.5),
            questions,
            lambda e: e["type"] == "generating",
            {
                "first_text": lambda e: e["type"] == "chunk" and e.get("text_delta"),
                "first_audio": lambda e: e["type"] == "chunk" and e.get("audio_data"),
            },
            lambda e: e["type"] == "turn_done",
        )
        for turn, done in zip(turns, [e for _, e in events if e["type"] == "turn_done"]):
            turn["stages_ms"] = done.get("metrics")  # the server's own: encode, prefill, first text/codes/audio
        await ws.send(json.dumps({"type": "stop"}))
        reader.cancel()
    return turns


async def realtime(url: str, questions, silence_ms: int, threshold: float) -> list[dict]:
    from openai import AsyncOpenAI

    from llama_omni_py.media import resample

    events: list = []
    client = AsyncOpenAI(base_url=url + "/v1", api_key="bench")
    async with client.realtime.connect(model="MiniCPM-o-4.5") as conn:
        td = {"type": "server_vad", "threshold": threshold, "silence_duration_ms": silence_ms, "prefix_padding_ms": 300}
        await conn.session.update(session={"type": "realtime", "audio": {"input": {"turn_detection": td}}})

        async def read():
            while True:
                ev = await conn.recv()
                events.append((time.monotonic(), ev))

        reader = asyncio.create_task(read())

        async def send(chunk):
            pcm = (np.clip(resample(chunk, SR, 24000), -1, 1) * 32767).astype("<i2").tobytes()
            await conn.input_audio_buffer.append(audio=base64.b64encode(pcm).decode())

        turns = await _converse(
            send,
            events,
            Microphone(0.1),
            questions,
            lambda e: e.type == "input_audio_buffer.speech_stopped",
            {
                "encoded": lambda e: e.type == "conversation.item.added" and e.item.role == "user",
                "response_created": lambda e: e.type == "response.created",
                "first_text": lambda e: e.type == "response.output_audio_transcript.delta",
                "first_audio": lambda e: e.type == "response.output_audio.delta",
            },
            lambda e: e.type == "response.done",
        )
        reader.cancel()
    return turns


def python_api(session, questions, silence_ms: int, threshold: float) -> list[dict]:
    from llama_omni_py.server.half_duplex import turn_metrics
    from llama_omni_py.voice import SpeechStopped, VadOptions

    voice = session.voice(vad=VadOptions(threshold=threshold, min_silence_duration_ms=silence_ms))
    mic = Microphone(0.1)
    turns = []
    for audio in questions:
        _, last = mic.ask(audio)
        seen, replying = {}, None
        while True:
            chunk = mic.next_chunk()
            time.sleep(mic.wait_s())
            for ev in voice.push(chunk):
                if isinstance(ev, SpeechStopped) and replying is None:
                    seen["vad"] = time.monotonic()

                    def reply(ev=ev):
                        for c in voice.respond(ev):
                            for name, there in (("first_text", c.text_delta), ("first_audio", c.audio.size)):
                                if there and name not in seen:
                                    seen[name] = time.monotonic()

                    replying = threading.Thread(target=reply)
                    replying.start()
            if replying is not None and not replying.is_alive() and not mic.queue:
                break
        end, vad = mic.spoken_at(last), seen["vad"]
        turns.append(
            {
                "vad_delay_ms": (vad - end) * 1000,
                "first_audio_ms": (seen["first_audio"] - end) * 1000 if "first_audio" in seen else None,
                "after_vad_ms": {
                    k: (seen[k] - vad) * 1000 if k in seen else None for k in ("first_text", "first_audio")
                },
                "stages_ms": turn_metrics(voice.turns[-1]),
            }
        )
    voice.close()
    return turns


def pct(values, q):
    v = sorted(x for x in values if x is not None)
    if not v:
        return None
    return v[min(len(v) - 1, max(0, round(q / 100 * (len(v) - 1))))]


def ms(v) -> str:
    return "-" if v is None else f"{v:.0f}"


def medians(rows: list[dict]) -> dict:
    """Per key, the median of the values that are there (None: a stage that did not run)."""
    keys = dict.fromkeys(k for r in rows for k, v in r.items() if isinstance(v, (int, float)))
    return {k: statistics.median(r[k] for r in rows if isinstance(r.get(k), (int, float))) for k in keys}


def summary(turns) -> dict:
    first = [t["first_audio_ms"] for t in turns]
    vad = [t["vad_delay_ms"] for t in turns]
    out = {
        "turns": len(turns),
        "first_audio_p50_ms": pct(first, 50),
        "first_audio_p95_ms": pct(first, 95),
        "vad_delay_p50_ms": pct(vad, 50),
        "vad_delay_p95_ms": pct(vad, 95),
        "after_vad_p50_ms": medians([t["after_vad_ms"] for t in turns]),
    }
    stages = [t["stages_ms"] for t in turns if t.get("stages_ms")]
    if stages:
        out["stages_p50_ms"] = medians(stages)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model-dir", help="a module set (default: the demo set)")
    ap.add_argument("--questions", type=int, default=10)
    ap.add_argument("--silence-ms", type=int, default=500, help="min_silence_duration_ms / silence_duration_ms")
    ap.add_argument("--threshold", type=float, default=0.5)
    ap.add_argument("--max-new-tokens", type=int, default=20)
    ap.add_argument(
        "--max-audio-per-chunk",
        type=int,
        default=DEMO_AUDIO_PER_CHUNK,
        help="speech codes per 10 text tokens before the TTS is cut (random weights never end speech)",
    )
    ap.add_argument("--first-window-codes", type=int, default=25)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--interfaces", default="half_duplex,realtime,python")
    ap.add_argument("--out")
    a = ap.parse_args()

    from llama_omni_py import OmniSession
    from llama_omni_py.config import Token2WavConfig
    from llama_omni_py.demo import demo_config, demo_model_dir
    from llama_omni_py.server import BackgroundServer, ServerConfig
    from llama_omni_py.server.gateway import BackgroundGateway, GatewayConfig
    from llama_omni_py.server.gateway.workers import StaticWorkers

    model_dir = Path(a.model_dir) if a.model_dir else demo_model_dir()
    cfg = demo_config(
        max_new_tokens=a.max_new_tokens,
        max_audio_per_chunk=a.max_audio_per_chunk,
        token2wav=Token2WavConfig(first_window_codes=a.first_window_codes),
    )
    questions = [say(q) for q in (QUESTIONS * 2)[: a.questions]]
    results = {}
    wanted = a.interfaces.split(",")
    if {"half_duplex", "realtime"} & set(wanted):
        server_cfg = ServerConfig(port=0, model_dir=str(model_dir), device=a.device, session=cfg)
        with BackgroundServer(server_cfg) as worker:
            assert worker.wait_ready(600) == "ready", worker.server.engine.error
            with BackgroundGateway(GatewayConfig(port=0), [StaticWorkers([worker.url])]) as gw:
                gw.wait_ready(60)
                for name, fn in (("half_duplex", half_duplex), ("realtime", realtime)):
                    if name in wanted:
                        print(f"{name}: {a.questions} questions ...", flush=True)
                        results[name] = asyncio.run(fn(gw.url, questions, a.silence_ms, a.threshold))
    if "python" in wanted:
        print(f"python: {a.questions} questions ...", flush=True)
        with OmniSession(model_dir, a.device, cfg) as session:
            session.speak("Hello.", max_new_tokens=5)  # warm, as a worker is
            results["python"] = python_api(session, questions, a.silence_ms, a.threshold)
    table = {name: summary(turns) for name, turns in results.items()}
    print(
        f"\nVAD threshold {a.threshold}, silence {a.silence_ms} ms, max_new_tokens {a.max_new_tokens}, "
        f"first_window_codes {a.first_window_codes}, set {model_dir}"
    )
    print("| interface | turns | end of speech -> first audio p50 / p95 (ms) | VAD decision p50 / p95 (ms) |")
    print("|---|---|---|---|")
    for name, s in table.items():
        print(
            f"| {name} | {s['turns']} | {ms(s['first_audio_p50_ms'])} / {ms(s['first_audio_p95_ms'])} | "
            f"{ms(s['vad_delay_p50_ms'])} / {ms(s['vad_delay_p95_ms'])} |"
        )
    for name, s in table.items():
        print(
            f"{name} after the VAD decision (p50, ms): "
            + ", ".join(f"{k} {ms(v)}" for k, v in s["after_vad_p50_ms"].items())
        )
        if "stages_p50_ms" in s:
            print(f"{name} stages (p50, ms): " + ", ".join(f"{k} {ms(v)}" for k, v in s["stages_p50_ms"].items()))
    write_result(
        "voice_latency",
        {"args": vars(a), "summary": table, "turns": results},
        sorted(Path(model_dir).rglob("*.gguf")),
        a.out,
    )


if __name__ == "__main__":
    main()
