"""The demo's turn-based chat API on the gateway: ``WS /ws/chat`` (one request per connection,
streamed) and ``POST /api/chat`` (one JSON answer). The request body is the backend protocol's
turn_based ``input`` (messages, streaming, generation, tts, image, ...), so it goes to a worker
unchanged; the worker's events come back in the demo's shapes (docs/serving.md)."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.websockets import WebSocket, WebSocketDisconnect

from .. import jsonio
from .bodies import body_error, read_json
from .client_channel import ClientChannel, SlowReader
from .duplex_api import Face
from .turns import TurnFailed, run_turn

log = logging.getLogger(__name__)
SAMPLE_RATE = 24000


def _request_error(body) -> str | None:
    """A first check before the request takes a queue place; the worker checks the rest."""
    if not isinstance(body, dict):
        return "the request must be a JSON object"
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "messages must be a non-empty list"
    return None


DEMO_MAX_SLICE_NUMS = 9  # the demo passes image.max_slice_nums, else its processor's 9


def demo_input(body: dict) -> dict:
    """The worker's turn input for a demo chat request. Speech is off unless the request turns it
    on (``tts.enabled``), as the demo's code has it (its TTSConfig.enabled defaults to False, and
    its page leaves ``tts`` out when speech is off); the backend protocol itself speaks by default.
    Images are sliced up to ``image.max_slice_nums``, else 9, as the demo's chat does (whatever
    the worker's own default)."""
    inp = dict(body)
    tts = inp.get("tts")
    tts = dict(tts) if isinstance(tts, dict) else {}
    tts.setdefault("enabled", False)
    inp["tts"] = tts
    image = inp.get("image")
    if image is None or isinstance(image, dict):  # anything else is the worker's to refuse
        image = dict(image or {})
        if image.get("max_slice_nums") is None:
            image["max_slice_nums"] = DEMO_MAX_SLICE_NUMS
        inp["image"] = image
    return inp


def _done_message(done: dict, streaming: bool) -> dict:
    m = done.get("metrics") or {}
    out = {
        "type": "done",
        "text": done.get("text", ""),
        "generated_tokens": m.get("n_tokens", 0),
        "input_tokens": m.get("prompt_tokens", 0),
    }
    if not streaming and done.get("audio"):
        out["audio_data"] = done["audio"]
    return out


async def ws_chat(websocket: WebSocket) -> None:
    gw = websocket.app.state.gateway
    cfg = gw.config
    await websocket.accept()
    channel = ClientChannel(websocket, cfg.send_buffer_bytes, cfg.send_timeout_s)
    gw.clients[channel] = Face()  # told when the gateway shuts down
    try:
        try:  # the request comes first: no worker is taken for a connection that says nothing
            msg = await asyncio.wait_for(websocket.receive(), cfg.first_message_timeout_s)
        except asyncio.TimeoutError:
            channel.put({"type": "error", "error": f"no request within {cfg.first_message_timeout_s:g} s"})
            channel.close(1000, "no request")
            return
        if msg["type"] == "websocket.disconnect":
            return
        try:
            body = jsonio.loads(msg.get("text") or msg.get("bytes") or b"")
        except jsonio.BadJson as e:
            body, error = None, str(e)
        else:
            error = _request_error(body)
        if error:
            channel.put({"type": "error", "error": error})
            channel.close(1008, "bad request")
            return
        streaming = body.get("streaming", True) is not False
        turn = asyncio.create_task(_chat_turn(gw, demo_input(body), channel, streaming))
        watch = asyncio.create_task(_watch(websocket, channel))
        gone = asyncio.create_task(channel.gone.wait())
        await asyncio.wait({turn, watch, gone}, return_when="FIRST_COMPLETED")
        if not turn.done():  # the client left, read too slowly or broke the one-request rule
            turn.cancel()
        failed = False
        with contextlib.suppress(asyncio.CancelledError, Exception):
            failed = await turn
        watch.cancel()
        gone.cancel()
        if failed:
            channel.close(1008, "request failed")
    finally:
        gw.clients.pop(channel, None)
        channel.close(1000, "done")
        await channel.closed(cfg.send_timeout_s + 1)


async def _watch(websocket: WebSocket, channel: ClientChannel) -> None:
    """Reads while the turn runs: a disconnect ends the turn; a second message is refused."""
    while True:
        try:
            msg = await websocket.receive()
        except (WebSocketDisconnect, RuntimeError):
            return
        if msg["type"] == "websocket.disconnect":
            return
        with contextlib.suppress(SlowReader):
            channel.put({"type": "error", "error": "one request per connection: open a new one for the next turn"})
        channel.close(1008, "one request per connection")
        return


async def _chat_turn(gw, body: dict, channel: ClientChannel, streaming: bool) -> bool:
    """Runs the turn, telling the client; True when it ended with an error."""
    state = {"prefill": False}

    async def on_event(ev):
        if ev["type"] == "response.output.delta" or (ev["type"] == "response.done" and not state["prefill"]):
            if not state["prefill"]:
                state["prefill"] = True
                prompt = (ev.get("metrics") or {}).get("prompt_tokens")
                channel.put({"type": "prefill_done", "input_tokens": prompt})
        if ev["type"] == "response.output.delta":
            if ev["kind"] == "text":
                channel.put({"type": "chunk", "text_delta": ev["text"]})
            elif ev["kind"] == "audio":
                channel.put({"type": "chunk", "audio_data": ev["audio"]})
        elif ev["type"] == "response.done":
            channel.put(_done_message(ev, streaming))

    try:
        await run_turn(gw, body, api="ws_chat", notify=channel.send, on_event=on_event)
    except TurnFailed as e:
        with contextlib.suppress(SlowReader):
            channel.put({"type": "error", "error": f"{e.reason}: {e.message}", "code": e.reason})
        return True
    except SlowReader:
        log.info("ws/chat client dropped: %s", channel.failed)
    return False


async def api_chat(request: Request) -> JSONResponse:
    gw = request.app.state.gateway
    try:
        body = await read_json(request, gw.config.max_body_bytes, "the request")
    except ValueError as e:
        status, message = body_error(e)
        return JSONResponse({"detail": message, "success": False}, status)
    error = _request_error(body)
    if error:
        return JSONResponse({"detail": error, "success": False}, 400)
    inp = dict(demo_input(body), streaming=False)
    turn = asyncio.create_task(run_turn(gw, inp, api="api_chat"))
    while not turn.done():  # a client that leaves while queued gives its place up
        await asyncio.wait({turn}, timeout=1.0)
        if not turn.done() and await request.is_disconnected():
            turn.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await turn
            return JSONResponse({"detail": "client disconnected"}, 400)
    try:
        out = turn.result()
    except TurnFailed as e:
        status = 503 if e.reason == "queue_full" else e.status  # the demo answers a full queue with 503
        return JSONResponse({"detail": f"{e.reason}: {e.message}", "error": e.reason, "success": False}, status)
    done, m = out.done, out.done.get("metrics") or {}
    audio = done.get("audio")
    prompt, generated = m.get("prompt_tokens", 0), m.get("n_tokens", 0)
    return JSONResponse(
        {
            "text": done.get("text", ""),
            "audio_path": None,
            "audio_data": audio,
            "audio_sample_rate": SAMPLE_RATE,
            "tokens_generated": generated,
            "duration_ms": m.get("wall_clock_ms", 0.0),
            "prompt": None,
            "token_stats": {
                "cached_tokens": 0,
                "input_tokens": prompt,
                "generated_tokens": generated,
                "total_tokens": prompt + generated,
            },
            "recording_session_id": None,
            "error": None,
            "success": True,
            "queue_wait_ms": int(out.queue_wait_s * 1000),
            "estimated_queue_wait_s": round(out.first_estimate_s, 1),
        }
    )
