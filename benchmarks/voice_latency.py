"""Hands-free voice latency: spoken questions (espeak-ng) sent at real time, as a microphone
sends them, through each voice interface -- the half-duplex WebSocket (0.5 s float32 chunks, the
demo page's), the OpenAI Realtime API (100 ms PCM16 chunks, the official client) and the Python
API (HandsFreeSession.push, 100 ms pieces) -- and, per turn:

* end of speech -> first audio byte: from the instant the question's last audible sample was
  spoken (the microphone's clock: chunk i is sent once it has been recorded) to the arrival of
  the first message carrying reply audio; and -> the moment a whole second of reply audio has
  arrived (a short first window makes the first packet small: this says when playback can run);
* VAD decision delay: end of speech -> the end-of-speech event (half-duplex ``generating``,
  Realtime ``speech_stopped``, Python ``SpeechStopped``): the silence wait plus the chunking;
* after the VAD decision, as the client sees it: the first text, the first audio, 1 s of audio
  (Realtime: also the user item once encoded); and per stage, as the reply's own timings report
  them (half-duplex ``turn_done.metrics``, Python ``HandsFreeSession.turns``): encoding the
  utterance, prefill, first 10 text tokens, first speech codes, first audio.

After each question the microphone sends silence until the reply is done, then asks the next.

    python benchmarks/voice_latency.py [--model-dir DIR] [--questions 10] [--silence-ms 500]
                                       [--interfaces half_duplex,realtime,python] [--out FILE]
                                       [--first-window-codes 25] [--max-new-tokens 20]

Without --model-dir the demo set (tiny, random weights) is used; ``--model-dir`` a real-dimension
set (``llama_omni_py.modelset.random_set.random_set_dir("real")``) gives real stage costs. The servers run in
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
sys.path.insert(0, str(HERE.parent / "tests" / "support"))

from common import write_result  # noqa: E402
from speech import SR, say  # noqa: E402  (tests/support/speech.py: espeak-ng material)

from llama_omni_py.modelset.random_set import RANDOM_SET_AUDIO_PER_CHUNK  # noqa: E402

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
OUTPUT_RATE = 24000


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


class TurnClock:
    """One turn's instants from the client's side: the VAD decision, then the first event of each
    mark (name -> predicate), the first reply audio and the moment a second of it has come."""

    def __init__(self, marks: dict):
        self.marks, self.vad, self.seen, self.samples = marks, None, {}, 0

    def see(self, t: float, ev, is_stop, audio_samples) -> None:
        if self.vad is None:
            if is_stop(ev):
                self.vad = t
            return
        for name, match in self.marks.items():
            if name not in self.seen and match(ev):
                self.seen[name] = t
        n = audio_samples(ev)
        if n and "first_audio" not in self.seen:
            self.seen["first_audio"] = t
        self.samples += n
        if self.samples >= OUTPUT_RATE and "audio_1s" not in self.seen:
            self.seen["audio_1s"] = t

    def record(self, speech_end: float) -> dict:
        since = lambda t0, k: (self.seen[k] - t0) * 1000 if k in self.seen else None  # noqa: E731
        return {
            "vad_delay_ms": (self.vad - speech_end) * 1000,
            "first_audio_ms": since(speech_end, "first_audio"),
            "audio_1s_ms": since(speech_end, "audio_1s"),
            "after_vad_ms": {k: since(self.vad, k) for k in (*self.marks, "first_audio", "audio_1s")},
        }


async def _converse(send_chunk, events, mic: Microphone, questions, is_stop, marks: dict, is_done, audio_samples):
    """Asks each question, keeps the microphone running until the reply is done, and times each
    turn from the events (``audio_samples(event)``: the reply audio an event carries)."""
    turns = []
    for audio in questions:
        _, last = mic.ask(audio)
        clock, read, done = TurnClock(marks), len(events), False
        while not (done and not mic.queue):
            chunk = mic.next_chunk()
            await asyncio.sleep(mic.wait_s())  # sent once it has been recorded
            await send_chunk(chunk)
            for t, ev in events[read:]:
                clock.see(t, ev, is_stop, audio_samples)
                done = done or (clock.vad is not None and is_done(ev))
                read += 1
        turns.append(clock.record(mic.spoken_at(last)))
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
            {"first_text": lambda e: e["type"] == "chunk" and e.get("text_delta")},
            lambda e: e["type"] == "turn_done",
            lambda e: (
                len(base64.b64decode(e["audio_data"])) // 4 if e["type"] == "chunk" and e.get("audio_data") else 0
            ),
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
            },
            lambda e: e.type == "response.done",
            lambda e: len(base64.b64decode(e.delta)) // 2 if e.type == "response.output_audio.delta" else 0,
        )
        reader.cancel()
    return turns


def python_api(session, questions, silence_ms: int, threshold: float) -> list[dict]:
    from llama_omni_py.server.worker.half_duplex.connection import turn_metrics
    from llama_omni_py.voice import SpeechStopped, VadOptions

    voice = session.hands_free(vad=VadOptions(threshold=threshold, min_silence_duration_ms=silence_ms))
    mic = Microphone(0.1)
    turns = []
    for audio in questions:
        _, last = mic.ask(audio)
        clock, replying = TurnClock({"first_text": lambda c: c.text_delta}), None
        while replying is None or replying.is_alive() or mic.queue:
            chunk = mic.next_chunk()
            time.sleep(mic.wait_s())
            for ev in voice.push(chunk):
                if isinstance(ev, SpeechStopped) and replying is None:
                    clock.vad = time.monotonic()

                    def reply(ev=ev, clock=clock):
                        for c in voice.respond(ev):
                            clock.see(time.monotonic(), c, None, lambda c: c.audio.size)

                    replying = threading.Thread(target=reply)
                    replying.start()
        turns.append({**clock.record(mic.spoken_at(last)), "stages_ms": turn_metrics(voice.turns[-1])})
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
    out = {"turns": len(turns)}
    for key in ("first_audio", "audio_1s", "vad_delay"):
        values = [t[f"{key}_ms"] for t in turns]
        out[f"{key}_p50_ms"], out[f"{key}_p95_ms"] = pct(values, 50), pct(values, 95)
    out |= {
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
        default=RANDOM_SET_AUDIO_PER_CHUNK,
        help="speech codes per 10 text tokens before the TTS is cut (random weights never end speech)",
    )
    ap.add_argument("--first-window-codes", type=int, default=25)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--interfaces", default="half_duplex,realtime,python")
    ap.add_argument("--out")
    a = ap.parse_args()

    from llama_omni_py import OmniSession
    from llama_omni_py.config import EngineConfig, Token2WavConfig
    from llama_omni_py.modelset.random_set import random_set_config, random_set_dir
    from llama_omni_py.server import BackgroundServer, WorkerConfig
    from llama_omni_py.server.gateway import BackgroundGateway, GatewayConfig
    from llama_omni_py.server.gateway.workers import StaticWorkers

    model_dir = Path(a.model_dir) if a.model_dir else random_set_dir()
    engine, reply = random_set_config(
        EngineConfig(token2wav=Token2WavConfig(first_window_codes=a.first_window_codes)),
        max_new_tokens=a.max_new_tokens,
        max_audio_per_chunk=a.max_audio_per_chunk,
    )
    questions = [say(q) for q in (QUESTIONS * 2)[: a.questions]]
    results = {}
    wanted = a.interfaces.split(",")
    if {"half_duplex", "realtime"} & set(wanted):
        server_cfg = WorkerConfig(port=0, model_dir=str(model_dir), device=a.device, engine=engine, reply=reply)
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
        with OmniSession(model_dir, a.device, engine, reply=reply) as session:
            session.speak("Hello.", max_new_tokens=5)  # warm, as a worker is
            results["python"] = python_api(session, questions, a.silence_ms, a.threshold)
    table = {name: summary(turns) for name, turns in results.items()}
    print(
        f"\nVAD threshold {a.threshold}, silence {a.silence_ms} ms, max_new_tokens {a.max_new_tokens}, "
        f"first_window_codes {a.first_window_codes}, set {model_dir}"
    )
    print("| interface | turns | end of speech -> first audio | -> 1 s of audio | VAD decision |")
    print("|---|---|---|---|---|")
    for name, s in table.items():
        cells = [f"{ms(s[f'{k}_p50_ms'])} / {ms(s[f'{k}_p95_ms'])}" for k in ("first_audio", "audio_1s", "vad_delay")]
        print(f"| {name} | {s['turns']} | " + " | ".join(cells) + " |")
    print("(p50 / p95, ms)")
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
