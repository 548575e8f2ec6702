"""One OpenAI Realtime API connection on a worker's ``/v1/realtime`` (the gateway relays its
public ``/v1/realtime`` here after the queue): a hands-free conversation on the engine's
HandsFreeSession with the Realtime API's events (realtime_events.py; docs/serving.md, "OpenAI
Realtime API").

With ``server_vad`` turn detection appended audio goes through the voice activity detector:
speech_started, speech_stopped, the committed user item, then (create_response) a response;
speech that starts during a response cancels it (interrupt_response). With turn detection null
the client commits the buffer and asks for a response itself. Errors are ``error`` events and
the session goes on."""

from __future__ import annotations

import asyncio
import contextlib
import logging

import numpy as np
from websockets.exceptions import ConnectionClosed

from ....errors import OmniError, ProtocolError
from ....orchestration.channels import iterate_in_thread
from ....voice import SpeechDiscarded, SpeechStarted, SpeechStopped, StreamingVad
from ... import realtime_events as R
from ...realtime_fields import check_response
from .base import RealtimeSocket
from .response import ResponseEvents

log = logging.getLogger(__name__)
MIN_COMMIT_MS = 100  # a manual commit of less audio is refused (as the API does)
# User input no response has answered yet (create_response false, items without response.create):
# beyond these the next input is refused with conversation_full. Answered turns are bounded by
# the HandsFreeSession (the newest 64 entries, no more audio than the LLM context holds).
MAX_PENDING_PARTS = 32
MAX_PENDING_AUDIO_S = 120.0
MAX_PENDING_TEXT_BYTES = 1 << 20
# A response with no unanswered input (the assistant speaks first, or again) answers this cue:
# the model's prompt needs a user turn.
START_CUE, GO_ON_CUE = "Please start the conversation.", "Please go on."


class RealtimeConnection(RealtimeSocket):
    def __init__(self, ws, server):
        super().__init__(ws, server)
        self.hands_free = None
        self.buffer: list[np.ndarray] = []  # manual mode: appended, not yet committed
        self.pending: list = []  # committed user contents a response has not answered yet
        self.pending_audio_s = 0.0
        self.pending_text = 0  # bytes
        self.last_item: str | None = None
        self.speech_item: str | None = None  # the item id speech_started announced
        self.response: asyncio.Task | None = None
        self.cancel_reason = "turn_detected"
        self.last_reply: tuple[str, tuple] | None = None  # (assistant item id, its history entry)
        self.appended_ms = 0.0
        self.vad_origin_ms = 0.0  # appended audio before the detector's stream began

    async def _open(self) -> None:
        self.hands_free = self.session.hands_free(None, vad=self.cfg.vad_options(), barge_in=True)
        await self.send(R.event("session.created", session=self.cfg.session()))

    async def _end(self) -> None:
        """Frees the slot (idempotent) and what the conversation held."""
        await self._end_response()
        self._take_pending()
        self.buffer.clear()
        hands_free, self.hands_free = self.hands_free, None
        if hands_free is not None:
            hands_free.close()
        del hands_free  # its detector's audio is freed before the release gives memory back
        await self.host.release(self.id)

    def _recv_timeout(self) -> float | None:
        busy = self.response is not None and not self.response.done()
        return None if busy else self.server.config.idle_timeout_s

    async def _dispatch(self, msg: dict) -> str | None:
        kind = msg["type"]
        if kind == "session.update":
            before = self.cfg.vad_options() if self.cfg.turn_detection else None
            self.cfg.update(msg.get("session"))
            self.hands_free.system_prompt = self.cfg.instructions or None
            td = self.cfg.turn_detection
            if td is not None and self.cfg.vad_options() != before:
                self.hands_free.vad = StreamingVad(self.cfg.vad_options(), self.hands_free.vad.model)
                self.vad_origin_ms = self.appended_ms
            self.hands_free.barge_in = bool(td and td["interrupt_response"])
            await self.send(R.event("session.updated", session=self.cfg.session()))
        elif kind == "input_audio_buffer.append":
            x = R.pcm16_in(msg.get("audio"), "audio")
            self.appended_ms += x.size / 16.0
            if self.cfg.turn_detection is None:
                if sum(b.size for b in self.buffer) + x.size > R.MAX_BUFFER_SECONDS * 16000:
                    raise ProtocolError("the input audio buffer is full (29 s): commit or clear it", "buffer_full")
                self.buffer.append(x)
            else:
                for ev in await asyncio.to_thread(self.hands_free.push, x):  # a long append: seconds of VAD
                    await self._on_vad(ev)
        elif kind == "input_audio_buffer.commit":
            await self._commit()
        elif kind == "input_audio_buffer.clear":
            self.buffer.clear()
            self.hands_free.vad.reset()
            self.vad_origin_ms = self.appended_ms
            await self.send(R.event("input_audio_buffer.cleared"))
        elif kind == "conversation.item.create":
            await self._create_item(msg.get("item"))
        elif kind == "conversation.item.truncate":
            await self._truncate(msg)
        elif kind == "response.create":
            if self.response is not None and not self.response.done():
                raise ProtocolError("a response is already in progress", "conversation_already_has_active_response")
            opts = msg.get("response") or {}
            if not isinstance(opts, dict):
                raise ProtocolError("response must be an object", "invalid_value")
            check_response(opts)
            self._start_response(opts)
        elif kind == "response.cancel":
            if self.response is None or self.response.done():
                raise ProtocolError("there is no response in progress to cancel", "response_cancel_not_active")
            self.cancel_reason = "client_cancelled"
            self.hands_free.interrupt()
        else:
            raise ProtocolError(f"unsupported event type: {kind}", "invalid_event")
        return None

    async def _on_vad(self, ev) -> None:
        if isinstance(ev, SpeechStarted):
            self.speech_item = R.new_id("item")
            pad = self.hands_free.vad.options.speech_pad_ms
            start_ms = max(0, round(self.vad_origin_ms + ev.at_s * 1000) - pad)
            started = R.event("input_audio_buffer.speech_started", audio_start_ms=start_ms, item_id=self.speech_item)
            await self.send(started)
        elif isinstance(ev, (SpeechStopped, SpeechDiscarded)):
            item = self.speech_item or R.new_id("item")
            self.speech_item = None
            end_ms = round(self.vad_origin_ms + ev.end_s * 1000) + self.hands_free.vad.options.speech_pad_ms
            await self.send(R.event("input_audio_buffer.speech_stopped", audio_end_ms=end_ms, item_id=item))
            if isinstance(ev, SpeechStopped):
                try:
                    await self._add_user_audio(item, ev)
                except ProtocolError as e:  # conversation_full: this utterance is dropped
                    await self.send(R.error(str(e), e.code))
                    return
                if self.cfg.turn_detection["create_response"]:
                    await self._end_response()
                    self._start_response({})

    async def _commit(self) -> None:
        if self.cfg.turn_detection is not None:
            stopped = [e for e in self.hands_free.flush() if isinstance(e, SpeechStopped)]
            if not stopped:
                raise ProtocolError("nothing to commit: no speech in the buffer", "input_audio_buffer_commit_empty")
            await self._on_vad(stopped[0])
            return
        audio = np.concatenate(self.buffer) if self.buffer else np.zeros(0, np.float32)
        if audio.size < MIN_COMMIT_MS * 16:
            raise ProtocolError(
                f"buffer too small: {audio.size / 16:.0f} ms of audio, at least {MIN_COMMIT_MS} ms",
                "input_audio_buffer_commit_empty",
            )
        self.buffer.clear()
        await self._add_user_audio(R.new_id("item"), SpeechStopped(0.0, audio.size / 16000, 0.0, audio))

    def _admit(self, parts: int = 1, audio_s: float = 0.0, text_bytes: int = 0) -> None:
        """ProtocolError conversation_full when this input would pass the unanswered limits."""
        over = None
        if len(self.pending) + parts > MAX_PENDING_PARTS:
            over = f"{MAX_PENDING_PARTS} inputs"
        elif self.pending_audio_s + audio_s > MAX_PENDING_AUDIO_S:
            over = f"{MAX_PENDING_AUDIO_S:g} s of audio"
        elif self.pending_text + text_bytes > MAX_PENDING_TEXT_BYTES:
            over = f"{MAX_PENDING_TEXT_BYTES >> 20} MiB of text"
        if over:
            raise ProtocolError(
                f"the conversation holds more unanswered input than this server keeps ({over}): "
                "ask for a response (response.create) before adding more",
                "conversation_full",
            )
        self.pending_audio_s += audio_s
        self.pending_text += text_bytes

    def _take_pending(self) -> list:
        turn, self.pending = self.pending, []
        self.pending_audio_s, self.pending_text = 0.0, 0
        return turn

    async def _add_user_audio(self, item_id: str, utterance: SpeechStopped) -> None:
        self._admit(audio_s=utterance.audio.size / 16000)
        await self._end_response()  # the encoder and the engine: one thing at a time
        await self.send(R.event("input_audio_buffer.committed", item_id=item_id, previous_item_id=self.last_item))
        enc = await asyncio.to_thread(self.hands_free.encode, utterance)
        self.pending.append(enc)
        await self._item_added(R.user_item(item_id, [{"type": "input_audio", "transcript": None}]))

    async def _item_added(self, item: dict) -> None:
        await self.send(R.event("conversation.item.added", item=item, previous_item_id=self.last_item))
        await self.send(R.event("conversation.item.done", item=item, previous_item_id=self.last_item))
        self.last_item = item["id"]

    async def _create_item(self, item) -> None:
        if not isinstance(item, dict) or item.get("type") != "message":
            raise ProtocolError("item must be a message (function calls are not served)", "invalid_value")
        role, content = item.get("role"), item.get("content")
        if role not in ("user", "assistant") or not isinstance(content, list) or not content:
            raise ProtocolError("item.role must be user or assistant, with a non-empty content list", "invalid_value")
        item_id = item.get("id") if isinstance(item.get("id"), str) else R.new_id("item")
        parts, shown = [], []
        for i, c in enumerate(content):
            kind = c.get("type") if isinstance(c, dict) else None
            if role == "user" and kind == "input_text":
                parts.append(R.text_field(c.get("text"), f"item.content[{i}].text"))
                shown.append({"type": "input_text", "text": c["text"]})
            elif role == "user" and kind == "input_audio":
                x = R.pcm16_in(c.get("audio"), f"item.content[{i}].audio", R.MAX_BUFFER_SECONDS)
                parts.append(SpeechStopped(0.0, x.size / 16000, 0.0, x))
                shown.append({"type": "input_audio", "transcript": c.get("transcript")})
            elif role == "assistant" and kind in ("output_text", "text", "output_audio"):
                name = "transcript" if kind == "output_audio" else "text"
                text = R.text_field(c.get(name), f"item.content[{i}].{name}")
                parts.append(text)
                shown.append({"type": kind, ("transcript" if kind == "output_audio" else "text"): text})
            else:
                raise ProtocolError(f"item.content[{i}]: type {kind!r} is not served for role {role}", "invalid_value")
        if role == "user":
            audio_s = sum(p.audio.size / 16000 for p in parts if isinstance(p, SpeechStopped))
            text_bytes = sum(len(p.encode("utf-8", "surrogatepass")) for p in parts if isinstance(p, str))
            self._admit(len(parts), audio_s, text_bytes)
        await self._end_response()
        if role == "user":
            for p in parts:
                encoded = await asyncio.to_thread(self.hands_free.encode, p) if isinstance(p, SpeechStopped) else p
                self.pending.append(encoded)
        else:
            self._flush_pending()
            self.hands_free.add("assistant", " ".join(parts))
        await self._item_added(
            {
                "id": item_id,
                "object": "realtime.item",
                "type": "message",
                "role": role,
                "status": "completed",
                "content": shown,
            }
        )

    def _flush_pending(self) -> None:
        """User input no response answered joins the conversation as it is."""
        for c in self._take_pending():
            self.hands_free.add("user", c)

    async def _truncate(self, msg: dict) -> None:
        item_id, ms = msg.get("item_id"), msg.get("audio_end_ms")
        if self.last_reply is None or item_id != self.last_reply[0]:
            raise ProtocolError("only the last assistant item can be truncated", "invalid_value")
        if isinstance(ms, bool) or not isinstance(ms, int) or ms < 0:
            raise ProtocolError("audio_end_ms must be a non-negative integer", "invalid_value")
        history = self.hands_free.history
        index = next((i for i in range(len(history) - 1, -1, -1) if history[i] is self.last_reply[1]), None)
        if index is None:
            raise ProtocolError("the item has left the conversation (it was too long ago)", "invalid_value")
        record = self.hands_free.turns[-1]
        total_ms = record.audio_samples / 24.0
        if ms > total_ms + 1:
            raise ProtocolError(f"audio_end_ms {ms} is past the item's audio ({total_ms:.0f} ms)", "invalid_value")
        text = record.text
        if total_ms > 0:  # the transcript kept in proportion to the audio heard
            text = text[: round(len(text) * min(1.0, ms / total_ms))]
        history[index] = ("assistant", text)
        self.last_reply = (item_id, history[index])
        await self.send(R.event("conversation.item.truncated", item_id=item_id, content_index=0, audio_end_ms=ms))

    # -- responses -----------------------------------------------------------------------------
    def _start_response(self, opts: dict) -> None:
        """A response to the unanswered input; with none (the assistant speaks first, or again)
        it answers from the instructions and the conversation so far."""
        modalities = opts.get("output_modalities", self.cfg.output_modalities)
        if modalities not in (["audio"], ["text"]):
            raise ProtocolError("response.output_modalities must be ['audio'] or ['text']", "invalid_value")
        limit = R.max_tokens(opts.get("max_output_tokens", self.cfg.max_output_tokens), "max_output_tokens")
        cap = self.server.config.max_new_tokens or self.session.reply.max_new_tokens  # every route's cap
        limit = cap if limit == "inf" else min(limit, cap)
        instructions = opts.get("instructions")
        if instructions is not None:
            R.text_field(instructions, "response.instructions")
        R.audio_format(((opts.get("audio") or {}).get("output") or {}).get("format"), "response.audio.output.format")
        turn = self._take_pending() or [GO_ON_CUE if self.hands_free.history else START_CUE]
        self.cancel_reason = "turn_detected"
        self.response = asyncio.create_task(self._respond(turn, modalities[0], limit, instructions))

    async def _end_response(self) -> None:
        task = self.response
        if task is not None and not task.done():
            with contextlib.suppress(asyncio.CancelledError, ConnectionClosed):
                await task

    async def _respond(self, turn: list, modality: str, limit: int, instructions: str | None = None) -> None:
        hands_free, loop = self.hands_free, asyncio.get_running_loop()
        out = ResponseEvents(self.send, self._item_added, self.cfg, modality)
        await out.start()
        failed = None
        options = {"speech": modality == "audio", "max_new_tokens": limit, "system_prompt": instructions}
        try:
            with self.host.turn_running():
                chunks = iterate_in_thread(lambda: hands_free.respond(turn, **options), hands_free.interrupt, loop)
                async for chunk in chunks:
                    await out.text(chunk.text_delta)
                    await out.audio(chunk.audio)
                self.host.turns += 1
        except (OmniError, ValueError) as e:
            failed = {"type": "server_error", "code": "generation_failed", "message": str(e)}
        record = hands_free.turns[-1] if hands_free.turns else None
        self.last_reply = (out.item_id, hands_free.history[-1]) if hands_free.history else None
        if failed:
            status, details = "failed", {"type": "failed", "error": failed}
        elif record is not None and record.interrupted:
            status, details = "cancelled", {"type": "cancelled", "reason": self.cancel_reason}
        else:
            status, details = "completed", None
        await out.finish(status, details, usage(record), record.text if record is not None else "")


def usage(record) -> dict | None:
    t = record.timings if record is not None else None
    if t is None:
        return None
    return {
        "total_tokens": t.prompt_tokens + t.n_tokens,
        "input_tokens": t.prompt_tokens,
        "output_tokens": t.n_tokens,
        "input_token_details": {"cached_tokens": t.prompt_cached, "text_tokens": None, "audio_tokens": None},
        "output_token_details": {"text_tokens": t.n_tokens, "audio_tokens": t.n_tts_tokens},
    }
