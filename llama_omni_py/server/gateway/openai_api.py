"""OpenAI-compatible HTTP API on the gateway: ``POST /v1/chat/completions`` (text and audio out,
streamed as server-sent events or whole) and ``GET /v1/models``. Requests run on the same
workers and queue as the demo API (turns.run_turn). Shapes: docs/serving.md."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import time
import uuid

import numpy as np
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse

from .. import jsonio
from .. import protocol as P
from . import audio_codec
from .bodies import BodyTooLarge, read_body
from .client_channel import SlowReader
from .openai_request import ChatCompletion, OpenAIError, parse
from .turns import TurnFailed, run_turn

OWNER = "llama-omni-py"


def error_response(e: OpenAIError) -> JSONResponse:
    return JSONResponse(e.body(), e.status)


def _turn_error(e: TurnFailed) -> OpenAIError:
    if e.reason == "queue_full":
        return OpenAIError(429, f"The server is busy: {e.message}; retry later", None, "queue_full")
    if e.status == 400:
        return OpenAIError(400, f"{e.reason}: {e.message}", "messages", e.reason)
    return OpenAIError(e.status, f"{e.reason}: {e.message}", None, e.reason)


async def models(request: Request) -> JSONResponse:
    gw = request.app.state.gateway
    return JSONResponse({"object": "list", "data": [_model(gw)]})


async def model(request: Request) -> JSONResponse:
    gw = request.app.state.gateway
    name = request.path_params["model"]
    if name != gw.config.model_name:
        return error_response(OpenAIError(404, f"The model '{name}' does not exist", "model", "model_not_found"))
    return JSONResponse(_model(gw))


def _model(gw) -> dict:
    return {"id": gw.config.model_name, "object": "model", "created": int(gw.started), "owned_by": OWNER}


async def chat_completions(request: Request):
    gw = request.app.state.gateway
    try:
        try:
            body = jsonio.loads(await read_body(request, gw.config.max_body_bytes), "the request body")
        except BodyTooLarge as e:
            raise OpenAIError(413, str(e), None, "request_too_large") from None
        except jsonio.BadJson as e:
            raise OpenAIError(400, str(e), None, "invalid_json") from None
        req = await asyncio.to_thread(
            parse, body, gw.config.model_name, gw.audio.transcript, audio_codec.output_formats()
        )
        state = gw.state()
        if state != "ready":
            gw.metrics.refusals.labels(reason="loading").inc()
            msg = "the model is still loading; retry shortly" if state == "loading" else "no worker is available"
            raise OpenAIError(503, msg, None, "model_loading" if state == "loading" else "unavailable")
    except OpenAIError as e:
        return error_response(e)
    cid = f"chatcmpl-{uuid.uuid4().hex}"
    if req.stream:
        return StreamingResponse(
            _sse(gw, req, cid), media_type="text/event-stream", headers={"Cache-Control": "no-cache"}
        )
    try:
        return await _whole(gw, req, cid, request)
    except OpenAIError as e:
        return error_response(e)


def _usage(done: dict) -> dict:
    m = done.get("metrics") or {}
    prompt, completion = m.get("prompt_tokens", 0), m.get("n_tokens", 0)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": m.get("n_tts_tokens", 0)},
    }


def _finish(done: dict) -> str:
    return "length" if done.get("reason") == "max_new_tokens" else "stop"


async def _whole(gw, req: ChatCompletion, cid: str, request: Request) -> JSONResponse:
    audio: list[np.ndarray] = []

    async def on_event(ev):
        if ev["type"] == "response.output.delta" and ev["kind"] == "audio":
            audio.append(P.pcm_from_b64(ev["audio"]))

    turn = asyncio.create_task(run_turn(gw, req.inp, api="openai", on_event=on_event))
    while not turn.done():  # a client that leaves gives its queue place and worker back
        await asyncio.wait({turn}, timeout=1.0)
        if not turn.done() and await request.is_disconnected():
            turn.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await turn
            raise OpenAIError(499, "client disconnected", None, "client_disconnected")
    try:
        done = turn.result().done
    except TurnFailed as e:
        raise _turn_error(e) from None
    text = done.get("text", "")
    message: dict = {"role": "assistant", "content": text, "refusal": None}
    if req.audio_out:
        samples = np.concatenate(audio) if audio else np.zeros(0, np.float32)
        data = await asyncio.to_thread(audio_codec.encode, samples, req.audio_format)
        audio_id, expires = gw.audio.add(text)
        message["audio"] = {
            "id": audio_id,
            "data": base64.b64encode(data).decode("ascii"),
            "expires_at": expires,
            "transcript": text,
        }
    return JSONResponse(
        {
            "id": cid,
            "object": "chat.completion",
            "created": int(time.time()),
            "model": req.model,
            "choices": [{"index": 0, "message": message, "finish_reason": _finish(done), "logprobs": None}],
            "usage": _usage(done),
            "system_fingerprint": OWNER,
        }
    )


def _sse_line(obj: dict) -> bytes:
    return f"data: {json.dumps(obj)}\n\n".encode()


async def _sse(gw, req: ChatCompletion, cid: str):
    """Chunks: the role first, then text (``delta.content``, and ``delta.audio.transcript`` with
    audio out) and audio (``delta.audio.data``, pcm16) as the worker makes them, the finish
    reason, the usage chunk when asked, then ``[DONE]``. Errors mid-stream are an error event."""
    created, queue = int(time.time()), asyncio.Queue()
    pending = {"bytes": 0}  # unsent bytes: past the limit the client is a slow reader
    audio_id, expires = gw.audio.add("") if req.audio_out else (None, None)

    def chunk(delta: dict, finish=None, usage=None) -> dict:
        out = {
            "id": cid,
            "object": "chat.completion.chunk",
            "created": created,
            "model": req.model,
            "system_fingerprint": OWNER,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
        }
        if req.include_usage:
            out["usage"] = usage
        return out

    async def put(item: dict, size: int) -> None:
        pending["bytes"] += size
        if pending["bytes"] > gw.config.send_buffer_bytes:
            raise SlowReader(f"slow reader: more than {gw.config.send_buffer_bytes} bytes waiting to be read")
        await queue.put((item, size))

    async def on_event(ev):
        if ev["type"] != "response.output.delta":
            return
        if ev["kind"] == "text":
            delta = {"content": ev["text"]}
            if req.audio_out:
                delta["audio"] = {"id": audio_id, "transcript": ev["text"]}
            await put(chunk(delta), len(ev["text"]))
        elif ev["kind"] == "audio" and req.audio_out:
            pcm = audio_codec.pcm16(P.pcm_from_b64(ev["audio"]))
            data = base64.b64encode(pcm).decode("ascii")
            await put(chunk({"audio": {"id": audio_id, "data": data}}), len(data))

    async def produce():
        try:
            out = await run_turn(gw, req.inp, api="openai", on_event=on_event)
            done = out.done
            if req.audio_out:
                gw.audio.add_as(audio_id, done.get("text", ""))
            last = {"audio": {"id": audio_id, "expires_at": expires}} if req.audio_out else {}
            await queue.put((chunk(last, _finish(done)), 0))
            if req.include_usage:
                tail = chunk({}, None, _usage(done))
                tail["choices"] = []
                await queue.put((tail, 0))
        except TurnFailed as e:
            await queue.put(({"error": _turn_error(e).body()["error"]}, 0))
        except SlowReader:
            pass  # nobody is reading: the stream just ends
        finally:
            await queue.put(None)

    task = asyncio.create_task(produce())
    try:
        yield _sse_line(chunk({"role": "assistant", "content": ""}))
        while True:
            item = await queue.get()
            if item is None:
                break
            pending["bytes"] -= item[1]
            yield _sse_line(item[0])
        yield b"data: [DONE]\n\n"
    finally:  # the client went away: the turn ends and its worker is given back
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
