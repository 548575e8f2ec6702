"""OpenAI-compatible HTTP API on the gateway: ``POST /v1/chat/completions`` (text and audio out,
streamed as server-sent events or whole) and ``GET /v1/models``. Requests run on the same
workers and queue as the demo API (turns.run_turn). Shapes: docs/serving.md.

A streamed reply's headers go out only once a worker has started it (its first event): every
refusal (queue full, no worker, model loading) and every failure before that is an HTTP error
with its status and, for refusals, ``Retry-After``, so that clients' retry logic applies."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import heapq
import json
import math
import time
import uuid

import numpy as np
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse

from ... import constants
from .. import jsonio
from ..pcm import pcm_from_b64
from . import audio_codec
from .bodies import BodyGone, BodyTooLarge, read_body
from .client_channel import SlowReader
from .openai_request import ChatCompletion, OpenAIError, parse
from .openai_stop import StopScanner
from .turns import EndTurn, TurnFailed, run_turn

OWNER = "llama-omni-py"
LOADING_RETRY_S = 5  # Retry-After while the model loads (or a worker says its engine is loading)
UNAVAILABLE_RETRY_S = 10  # ... while no worker is usable (health checks may bring one back)
SAMPLES_PER_CODE = constants.OUTPUT_SAMPLE_RATE // constants.CODES_PER_SECOND


def _request_id() -> str:
    return uuid.uuid4().hex


def error_response(e: OpenAIError, rid: str) -> JSONResponse:
    headers = {"x-request-id": f"req_{rid}"}
    if e.retry_after is not None:
        headers["retry-after"] = str(e.retry_after)
    return JSONResponse(e.body(), e.status, headers=headers)


def _not_ready(gw) -> OpenAIError | None:
    """The gateway's readiness (``state()``, as /health): ready, or the 503 to answer."""
    state = gw.state()
    if state == "ready":
        return None
    if state == "loading":
        return OpenAIError(
            503, "the model is still loading; retry shortly", None, "model_loading", retry_after=LOADING_RETRY_S
        )
    causes = gw.pool.why_down()
    message = "no worker is available" + (f" ({causes})" if causes else "")
    return OpenAIError(503, message, None, "unavailable", retry_after=UNAVAILABLE_RETRY_S)


def queue_wait_estimate(pool) -> float:
    """The wait a new ticket would be told if the queue took it: as the pool estimates queued
    tickets, each slot frees after its session's expected length, taken in queue order."""
    free = pool.slot_free_times()
    if not free:
        return float(LOADING_RETRY_S)
    for ticket in pool.queue.values():
        heapq.heappush(free, heapq.heappop(free) + pool.eta(ticket.type.name))
    return free[0]


def _turn_error(e: TurnFailed, gw) -> OpenAIError:
    if e.reason == "queue_full":
        wait = max(1, math.ceil(queue_wait_estimate(gw.pool)))
        return OpenAIError(
            429, f"The server is busy: {e.message}; retry in {wait} s", None, "queue_full", retry_after=wait
        )
    if e.status == 400:
        if "exceeds the context" in e.message:  # the worker's InvalidArgumentError (llm.check_fits)
            return OpenAIError(400, e.message, "messages", "context_length_exceeded")
        return OpenAIError(400, f"{e.reason}: {e.message}", "messages", e.reason)
    if e.reason == "engine_loading":
        return OpenAIError(503, f"{e.reason}: {e.message}", None, "model_loading", retry_after=LOADING_RETRY_S)
    if e.status == 503:
        return OpenAIError(503, f"{e.reason}: {e.message}", None, e.reason, retry_after=UNAVAILABLE_RETRY_S)
    return OpenAIError(e.status, f"{e.reason}: {e.message}", None, e.reason)


async def models(request: Request) -> JSONResponse:
    gw, rid = request.app.state.gateway, _request_id()
    refusal = _not_ready(gw)
    if refusal is not None:
        return error_response(refusal, rid)
    return JSONResponse({"object": "list", "data": [_model(gw)]}, headers={"x-request-id": f"req_{rid}"})


async def model(request: Request) -> JSONResponse:
    gw, rid = request.app.state.gateway, _request_id()
    name = request.path_params["model"]
    if name != gw.config.model_name:
        return error_response(OpenAIError(404, f"The model '{name}' does not exist", "model", "model_not_found"), rid)
    refusal = _not_ready(gw)
    if refusal is not None:
        return error_response(refusal, rid)
    return JSONResponse(_model(gw), headers={"x-request-id": f"req_{rid}"})


def _model(gw) -> dict:
    return {"id": gw.config.model_name, "object": "model", "created": int(gw.started), "owned_by": OWNER}


async def chat_completions(request: Request):
    gw, rid = request.app.state.gateway, _request_id()
    try:
        try:
            body = jsonio.loads(await read_body(request, gw.config.max_body_bytes), "the request body")
        except BodyTooLarge as e:
            raise OpenAIError(413, str(e), None, "request_too_large") from None
        except BodyGone as e:  # nobody reads the answer
            raise OpenAIError(400, str(e), None, "client_disconnected") from None
        except jsonio.BadJson as e:
            raise OpenAIError(400, str(e), None, "invalid_json") from None
        req = await asyncio.to_thread(
            parse, body, gw.config.model_name, gw.audio.transcript, audio_codec.output_formats(), gw.config
        )
        refusal = _not_ready(gw)
        if refusal is not None:
            gw.metrics.refusals.labels(reason="loading" if refusal.code == "model_loading" else "no_worker").inc()
            raise refusal
        reply = _Reply(gw, req, f"chatcmpl-{rid}")
        await reply.wait(request, until_started=req.stream)
    except OpenAIError as e:
        return error_response(e, rid)
    headers = {"x-request-id": f"req_{rid}"}
    if req.stream:
        headers["Cache-Control"] = "no-cache"
        return StreamingResponse(reply.stream(), media_type="text/event-stream", headers=headers)
    return JSONResponse(await reply.whole(), headers=headers)


def _usage(done: dict, req: ChatCompletion) -> dict:
    """Tokens as OpenAI counts them: the reply's text tokens and speech codes are its
    completion tokens; the LLM rows of all the input audio the model heard (10 a second: clips
    and a video's own track, as the worker counted them; else the gateway's estimate) its prompt
    audio tokens; the rows of its images and video frames (64 each) its prompt image tokens."""
    m = done.get("metrics") or {}
    heard = m.get("audio_tokens")
    prompt = m.get("prompt_tokens") or 0
    text, audio = m.get("n_tokens") or 0, m.get("n_tts_tokens") or 0
    return {
        "prompt_tokens": prompt,
        "completion_tokens": text + audio,
        "total_tokens": prompt + text + audio,
        "prompt_tokens_details": {
            "cached_tokens": 0,
            "audio_tokens": heard if heard is not None else req.audio_tokens,
            "image_tokens": m.get("vision_tokens") or 0,
        },
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "text_tokens": text,
            "audio_tokens": audio,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


def _finish(done: dict) -> str:
    return "length" if done.get("reason") == "max_new_tokens" else "stop"


def _sse_line(obj: dict) -> bytes:
    return f"data: {json.dumps(obj)}\n\n".encode()


class _Reply:
    """One request's turn, started at once on a worker (via the queue). Its text passes the stop
    scanner; at a stop sequence the turn is ended (EndTurn: the worker's session is closed and
    stops generating). ``stream()`` turns the events into chunks, ``whole()`` into one answer."""

    def __init__(self, gw, req: ChatCompletion, cid: str):
        self.gw, self.req, self.cid = gw, req, cid
        self.created = int(time.time())
        self.scanner = StopScanner(req.stops)
        self.started = asyncio.Event()  # the worker's first event came
        self.text_pieces = self.audio_samples = 0
        self.prompt_tokens = 0
        self.audio: list[np.ndarray] = []  # whole replies' audio
        self.queue: asyncio.Queue | None = asyncio.Queue() if req.stream else None  # stream chunks
        self.pending = 0  # unsent stream bytes: past the limit the client is a slow reader
        self.audio_id = self.expires = None  # a streamed audio reply's id, taken when it starts
        self.turn = asyncio.create_task(run_turn(gw, req.inp, api="openai", on_event=self._on_event))

    # -- the turn ------------------------------------------------------------------------------
    async def wait(self, request: Request, until_started: bool) -> None:
        """Until the turn has started (``until_started``) or ended; a turn that fails before it
        started is an OpenAIError, a client that leaves gives its queue place and worker back."""

        def ready() -> bool:
            return self.turn.done() or (until_started and self.started.is_set())

        started = asyncio.create_task(self.started.wait())
        try:
            while not ready():
                await asyncio.wait({self.turn, started} if until_started else {self.turn}, timeout=1.0)
                if not ready() and await request.is_disconnected():
                    await self.cancel()
                    raise OpenAIError(499, "client disconnected", None, "client_disconnected")
        finally:
            started.cancel()
        if self.turn.done() and not (until_started and self.started.is_set()):
            try:
                self.turn.result()
            except TurnFailed as e:
                raise _turn_error(e, self.gw) from None

    async def cancel(self) -> None:
        if not self.turn.done():
            self.turn.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self.turn

    async def _on_event(self, ev: dict) -> None:
        if not self.started.is_set():
            self.started.set()
            if self.queue is not None and self.req.audio_out and not self.req.omni_audio:
                self.audio_id, self.expires = self.gw.audio.add("")
        if ev["type"] != "response.output.delta":
            return
        prompt = (ev.get("metrics") or {}).get("prompt_tokens")
        self.prompt_tokens = prompt if prompt is not None else self.prompt_tokens
        if ev["kind"] == "text":
            self.text_pieces += 1
            piece = self.scanner.feed(ev["text"])
            if piece:
                await self._text(piece)
            if self.scanner.hit:
                raise EndTurn(self._stopped(), "stop_sequence")
        elif ev["kind"] == "audio" and self.req.audio_out:
            samples = pcm_from_b64(ev["audio"])
            self.audio_samples += samples.size
            if self.queue is None:
                self.audio.append(samples)
            else:
                await self._audio(samples)

    def _stopped(self) -> dict:
        """The response.done of a turn ended at a stop sequence (the worker sends none): its
        counts are estimates from what arrived, 10 LLM tokens per text piece (the engine writes
        text 10 tokens at a time) and 25 speech codes per second of audio."""
        metrics = {
            "prompt_tokens": self.prompt_tokens,
            "n_tokens": constants.TEXT_CHUNK * self.text_pieces,
            "n_tts_tokens": round(self.audio_samples / SAMPLES_PER_CODE),
        }
        return {"type": "response.done", "reason": "stop_sequence", "text": self.scanner.text, "metrics": metrics}

    async def _text(self, piece: str) -> None:
        if self.queue is None:
            return
        if self.req.audio_out and not self.req.omni_audio:  # OpenAI's shape: the text is the audio's transcript
            delta = {"audio": {"id": self.audio_id, "transcript": piece}}
        else:
            delta = {"content": piece}
        await self._put(self._chunk(delta, modality="text"), len(piece))

    async def _audio(self, samples: np.ndarray) -> None:
        """One streamed audio chunk: OpenAI's pcm16 in delta.audio, or (vLLM-Omni's layout) a WAV
        file of its own in delta.content."""
        if self.req.omni_audio:
            data = base64.b64encode(audio_codec.encode(samples, "wav")).decode("ascii")
            delta = {"role": "assistant", "content": data}
        else:
            data = base64.b64encode(audio_codec.pcm16(samples)).decode("ascii")
            delta = {"audio": {"id": self.audio_id, "data": data}}
        await self._put(self._chunk(delta, modality="audio"), len(data))

    # -- a whole reply -------------------------------------------------------------------------
    async def whole(self) -> dict:
        done = self.turn.result().done  # wait() saw it end
        self.scanner.flush()
        text = self.scanner.text
        message: dict = {"role": "assistant", "content": None if self.req.audio_out else text, "refusal": None}
        if self.req.audio_out:  # OpenAI's shape: the text is the audio's transcript, content is null
            samples = np.concatenate(self.audio) if self.audio else np.zeros(0, np.float32)
            data = await asyncio.to_thread(audio_codec.encode, samples, self.req.audio_format)
            audio_id, expires = self.gw.audio.add(text)
            message["audio"] = {
                "id": audio_id,
                "data": base64.b64encode(data).decode("ascii"),
                "expires_at": expires,
                "transcript": text,
            }
        return {
            "id": self.cid,
            "object": "chat.completion",
            "created": self.created,
            "model": self.req.model,
            "choices": [{"index": 0, "message": message, "finish_reason": _finish(done), "logprobs": None}],
            "usage": _usage(done, self.req),
            "system_fingerprint": OWNER,
        }

    # -- a streamed reply ----------------------------------------------------------------------
    def _chunk(self, delta: dict, finish=None, usage=None, modality: str | None = None) -> dict:
        """A chunk; ``modality`` ("text" or "audio") is what the chunk carries, as vLLM-Omni's
        server marks its chunks (the finish and usage chunks carry none, as there)."""
        out = {
            "id": self.cid,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.req.model,
            "system_fingerprint": OWNER,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
        }
        if modality is not None:
            out["modality"] = modality
        if self.req.include_usage:
            out["usage"] = usage
        return out

    async def _put(self, item: dict, size: int) -> None:
        self.pending += size
        if self.pending > self.gw.config.send_buffer_bytes:
            raise SlowReader(f"slow reader: more than {self.gw.config.send_buffer_bytes} bytes waiting to be read")
        await self.queue.put((item, size))

    async def _finish_stream(self) -> None:
        """After the turn: the held-back text, the finish reason, the usage; or the error."""
        try:
            done = (await self.turn).done
            rest = self.scanner.flush()
            if rest:
                await self._text(rest)
            last = {}
            if self.req.audio_out and not self.req.omni_audio:
                self.gw.audio.add_as(self.audio_id, self.scanner.text)
                last = {"audio": {"id": self.audio_id, "expires_at": self.expires}}
            await self.queue.put((self._chunk(last, _finish(done)), 0))
            if self.req.include_usage:
                tail = self._chunk({}, None, _usage(done, self.req))
                tail["choices"] = []
                await self.queue.put((tail, 0))
        except TurnFailed as e:
            await self.queue.put(({"error": _turn_error(e, self.gw).body()["error"]}, 0))
        except SlowReader:
            pass  # nobody is reading: the stream just ends
        finally:
            await self.queue.put(None)

    async def stream(self):
        """Chunks: the role first, then text (``delta.content``; with audio out only
        ``delta.audio.transcript``, as OpenAI sends it) and audio (``delta.audio.data``, pcm16)
        as the worker makes them, the finish reason, the usage chunk when asked, then
        ``[DONE]``. Errors after the stream started are an error event. The role, text and audio
        chunks name their ``modality`` ("text", "audio"); audio asked without an ``audio`` object
        (vLLM-Omni's clients) streams vLLM-Omni's layout: text in ``delta.content``, each audio
        chunk a WAV file in ``delta.content``."""
        finisher = asyncio.create_task(self._finish_stream())
        try:
            openai_audio = self.req.audio_out and not self.req.omni_audio
            role = {"role": "assistant", "content": None if openai_audio else ""}
            yield _sse_line(self._chunk(role, modality="text"))
            while True:
                item = await self.queue.get()
                if item is None:
                    break
                self.pending -= item[1]
                yield _sse_line(item[0])
            yield b"data: [DONE]\n\n"
        finally:  # the client went away: the turn ends and its worker is given back
            await self.cancel()
            if not finisher.done():
                finisher.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await finisher
