"""One WebSocket on a worker's ``/ws/half_duplex``: the MiniCPM-o demo's hands-free mode
(docs/server-protocol.md, "Half duplex"). The gateway relays its public
``/ws/half_duplex/{id}`` here after the queue.

The client streams microphone audio (``audio_chunk``); the voice activity detector cuts it into
utterances; each utterance becomes a reply streamed as ``chunk`` messages and closed by
``turn_done``. Unlike the demo, messages are read while a reply runs, so speech that starts
during a reply cuts it (barge-in: ``turn_done`` with ``interrupted``), and ``stop`` is obeyed at
once. The conversation stays in the LLM's KV cache until the next ``prepare``
(llama_omni_py/voice). Errors in a message are an ``error`` event and the session goes on."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid

from websockets.exceptions import ConnectionClosed

from ....errors import OmniError, ProtocolError
from ....orchestration.channels import iterate_in_thread
from ....voice import ReplyInterrupted, SpeechDiscarded, SpeechStarted, SpeechStopped
from ..slot_socket import EngineSocket, query
from . import protocol as H

log = logging.getLogger(__name__)


class HalfDuplexConnection(EngineSocket):
    def __init__(self, ws, server):
        super().__init__(ws, server, query(ws, "session_id") or uuid.uuid4().hex)
        self.hands_free = None
        self.timeout_s = H.DEFAULT_TIMEOUT_S
        self.prepared_at = 0.0
        self.turn: asyncio.Task | None = None
        self.turn_index = 0

    async def _open(self) -> None:
        self.server.half_duplex[self.id] = self  # POST /api/half_duplex/stop finds it here

    async def _end(self) -> None:
        """Frees the slot (idempotent)."""
        self.server.half_duplex.pop(self.id, None)
        await self._end_turn()
        hands_free, self.hands_free = self.hands_free, None
        if hands_free is not None:
            hands_free.close()
        await self.host.release(self.id)

    def interrupt(self) -> bool:
        """Cuts the running reply (HTTP stop); False when none runs."""
        if self.hands_free is None or not self.hands_free.replying:
            return False
        self.hands_free.interrupt()
        return True

    async def _end_turn(self) -> None:
        turn, self.turn = self.turn, None
        if turn is not None and not turn.done():
            if self.hands_free is not None:
                self.hands_free.interrupt()
            with contextlib.suppress(asyncio.CancelledError, ConnectionClosed):
                await turn

    async def _serve(self) -> None:
        last = time.monotonic()
        while True:
            busy = self.turn is not None and not self.turn.done()
            wait = None if busy else max(0.0, self.timeout_s - (time.monotonic() - last))
            try:
                raw = await asyncio.wait_for(self.ws.recv(), min(wait, 1.0) if wait is not None else 1.0)
            except asyncio.TimeoutError:
                if busy:
                    last = time.monotonic()  # a running reply is not the client's silence
                elif time.monotonic() - last >= self.timeout_s:
                    await self.send({"type": "timeout", "elapsed_s": round(time.monotonic() - last, 1)})
                    await self.ws.close(1000, "timeout")
                    return
                continue
            last = time.monotonic()
            if await self._handle(raw):
                return

    async def _dispatch(self, msg: dict) -> str | None:
        kind = msg["type"]
        if kind == "prepare":
            start = H.parse_prepare(msg, self.server.config.max_new_tokens)
            await self._end_turn()
            if self.hands_free is not None:
                self.hands_free.close()
            self.hands_free = self.session.hands_free(
                start.system_prompt,
                start.ref_audio,
                start.vad,
                speech=start.speech,
                max_new_tokens=start.max_new_tokens,
                llm=start.llm,
            )
            self.timeout_s, self.turn_index = start.timeout_s, 0
            self.prepared_at = time.monotonic()
            await self.send({"type": "prepared", "session_id": self.id, "timeout_s": start.timeout_s})
        elif kind == "audio_chunk":
            if self.hands_free is None:
                raise ProtocolError("Not prepared yet", "not_prepared")
            audio = H.parse_audio_chunk(msg)
            if time.monotonic() - self.prepared_at < H.COLD_START_S or not audio.size:
                return None  # the microphone's first half second: dropped, as the demo does
            for event in self.hands_free.push(audio):
                await self._on_vad(event)
        elif kind == "stop":
            await self._end()  # a client that hears "stopped" may start the next session at once
            await self.send({"type": "stopped"})
            await self.ws.close(1000, "stopped")
            return "stop"
        else:
            raise ProtocolError(f"Unknown type: {kind}", "unexpected_message_type")
        return None

    async def _on_vad(self, event) -> None:
        if isinstance(event, SpeechStarted):
            await self.send({"type": "vad_state", "speaking": True})
        elif isinstance(event, SpeechDiscarded):
            await self.send({"type": "vad_state", "speaking": False})
        elif isinstance(event, SpeechStopped):
            await self.send({"type": "vad_state", "speaking": False})
            await self._end_turn()  # a reply cut by this utterance's start ends first
            await self.send({"type": "generating", "speech_duration_ms": event.speech_duration_ms})
            self.turn = asyncio.create_task(self._reply(event))
        elif isinstance(event, ReplyInterrupted):
            log.debug("half-duplex %s: reply cut by speech at %.2f s", self.id, event.at_s)

    async def _reply(self, utterance: SpeechStopped) -> None:
        hands_free, loop = self.hands_free, asyncio.get_running_loop()
        index = 0
        try:
            with self.host.turn_running():
                async for chunk in iterate_in_thread(lambda: hands_free.respond(utterance), hands_free.interrupt, loop):
                    await self.send(H.chunk_event(chunk, index))
                    index += 1
                self.host.turns += 1
        except (OmniError, ValueError) as e:
            await self.send({"type": "error", "error": str(e)})
            return
        record = hands_free.turns[-1]
        self.turn_index += 1
        done = {"type": "turn_done", "turn_index": self.turn_index, "text": record.text}
        done["interrupted"] = record.interrupted
        done["prompt_cached"] = record.prompt_cached
        done["metrics"] = turn_metrics(record)
        await self.send(done)


def turn_metrics(record) -> dict:
    """Where a turn's time went (ms; None where a stage did not run): encoding the utterance,
    then the reply's prefill, first text, first speech codes and first audio after its start."""
    t = record.timings
    ms = lambda s: round(s * 1000, 1) if s is not None else None  # noqa: E731
    return {
        "encode_ms": round(record.encode_ms, 1),
        "prefill_ms": round(t.prefill_ms, 1) if t else None,
        "first_text_ms": ms(t.first_text_s) if t else None,
        "first_codes_ms": ms(t.first_codes_s) if t else None,
        "first_audio_ms": ms(t.time_to_first_audio_s) if t else None,
    }
