"""Hands-free turns on an :class:`~llama_omni_py.OmniSession` (``session.hands_free()``): the voice
activity detector cuts the microphone stream into utterances, each becomes a spoken reply, and
the conversation (every utterance once encoded, every reply's text) is the next turn's history,
so the LLM's prompt cache keeps the earlier turns. docs/voice.md.

    with session.hands_free() as turns:
        for piece in microphone():                     # 16 kHz float32, any size
            for event in turns.push(piece):
                if isinstance(event, SpeechStopped):
                    for chunk in turns.respond(event):  # SpeechChunks, 24 kHz audio
                        play(chunk.audio)

``push`` may run on another thread while ``respond`` streams: speech that starts during a reply
cancels it (barge-in), and the reply's history keeps only the text that was delivered."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

from ..config import LlmSampling
from ..constants import INPUT_SAMPLE_RATE
from ..content import EncodedAudio
from ..errors import InvalidArgumentError
from ..results import SpeechChunk
from .vad import SpeechStarted, SpeechStopped, StreamingVad, VadEvent, VadOptions

MAX_TURNS_KEPT = 64  # history entries beyond these are dropped oldest first (the prompt trims further)
MAX_RECORDS_KEPT = 8  # TurnRecords (each holds its utterance's audio) kept, newest last


@dataclass(frozen=True)
class ReplyInterrupted:
    """Speech started while a reply was running; the reply was cancelled."""

    at_s: float
    text_delivered: str  # what the reply had said when it was cut (its history entry)


@dataclass
class TurnRecord:
    """One finished turn: the reply's text, whether it was cut, its timings and the VAD's."""

    index: int
    text: str
    interrupted: bool
    speech: SpeechStopped | None  # None: the turn was text or audio given as such
    encode_ms: float
    first_audio_s: float | None = None  # after respond() started
    prompt_cached: int = 0
    timings: object = None
    chunks: int = 0
    audio_samples: int = 0


class HandsFreeSession:
    """One hands-free conversation on an OmniSession (see the module doc). ``ref_audio``: reference
    audio for the system prompt's voice slot (None: the session's)."""

    def __init__(
        self,
        session,
        system_prompt: str | None = None,
        ref_audio=None,
        vad: VadOptions | None = None,
        *,
        speech: bool = True,
        max_new_tokens: int | None = None,
        llm: LlmSampling | None = None,
        barge_in: bool = True,
    ):
        if vad is not None and not isinstance(vad, VadOptions):
            raise InvalidArgumentError(f"vad must be a VadOptions, got {type(vad).__name__}")
        self.session = session
        self.system_prompt, self.ref_audio, self.speech = system_prompt, ref_audio, speech
        self.max_new_tokens, self.llm, self.barge_in = max_new_tokens, llm, barge_in
        self.vad = StreamingVad(vad)
        self.history: list[tuple[str, object]] = []
        self.turns: list[TurnRecord] = []  # the newest MAX_RECORDS_KEPT
        self.turn_count = 0
        self._lock = threading.Lock()
        self._replying = False
        self._interrupt: ReplyInterrupted | None = None
        self._closed = False

    @property
    def replying(self) -> bool:
        return self._replying

    def push(self, audio) -> list:
        """Feeds microphone audio (16 kHz float32); returns the VAD's events (SpeechStarted,
        SpeechStopped, SpeechDiscarded) and, when speech cut a running reply, ReplyInterrupted
        right after its SpeechStarted."""
        if self._closed:
            raise InvalidArgumentError("the hands-free session is closed")
        out: list = []
        for event in self.vad.feed(audio):
            out.append(event)
            if isinstance(event, SpeechStarted) and self.barge_in:
                cut = self._cut(event.at_s)
                if cut is not None:
                    out.append(cut)
        return out

    def flush(self) -> list[VadEvent]:
        """End of the microphone stream: an open utterance ends now."""
        return self.vad.flush()

    def _cut(self, at_s: float) -> ReplyInterrupted | None:
        with self._lock:
            if not self._replying or self._interrupt is not None:
                return None
            self._interrupt = ReplyInterrupted(at_s, "")
        self.session.cancel()
        return self._interrupt

    def interrupt(self) -> None:
        """Cancels the running reply (as barge-in does)."""
        self._cut(self.vad.position / INPUT_SAMPLE_RATE)

    def encode(self, utterance: SpeechStopped) -> EncodedAudio:
        return self.session.encode_audio(utterance.audio)

    def _user_turn(self, turn) -> tuple[list, SpeechStopped | None, float]:
        """The user's part of a turn as history contents (str, EncodedAudio), the utterance it
        came from, and the encoding time."""
        items = turn if isinstance(turn, list) else [turn]
        if not items:
            raise InvalidArgumentError("respond() needs something to respond to")
        contents, utterance, encode_ms = [], None, 0.0
        for item in items:
            if isinstance(item, SpeechStopped):
                utterance, item = item, self.encode(item)
            if isinstance(item, EncodedAudio):
                encode_ms += item.encode_ms
            elif not isinstance(item, str):
                raise InvalidArgumentError(
                    f"respond() takes SpeechStopped, EncodedAudio or text (or a list), got {type(item).__name__}"
                )
            contents.append(item)
        return contents, utterance, encode_ms

    def respond(
        self,
        turn,
        *,
        speech: bool | None = None,
        max_new_tokens: int | None = None,
        system_prompt: str | None = None,
    ) -> Iterator[SpeechChunk]:
        """The reply to the user's turn -- an utterance (SpeechStopped), already encoded audio,
        text, or a list of them -- streamed; afterwards the turn is in ``history`` and ``turns``
        (its text cut to what was delivered when speech interrupted it). ``speech``,
        ``max_new_tokens`` and ``system_prompt`` override the session's for this reply."""
        with self._lock:
            if self._replying:
                raise InvalidArgumentError("a reply is already running in this hands-free session")
            self._replying, self._interrupt = True, None
        t0 = time.perf_counter()
        text: list[str] = []
        contents = None
        try:
            contents, utterance, encode_ms = self._user_turn(turn)
            record = TurnRecord(self.turn_count + 1, "", False, utterance, encode_ms)
            audio = [c for c in contents if isinstance(c, EncodedAudio)]
            stream = self.session.stream(
                " ".join(c for c in contents if isinstance(c, str)) or None,
                audio=audio or None,
                ref_audio=self.ref_audio,
                system_prompt=self.system_prompt if system_prompt is None else system_prompt,
                history=self.history[-MAX_TURNS_KEPT:],
                speech=self.speech if speech is None else speech,
                max_new_tokens=max_new_tokens or self.max_new_tokens,
                llm=self.llm,
            )
            try:
                for chunk in stream:
                    if self._interrupt is not None:
                        break
                    text.append(chunk.text_delta)
                    record.chunks += 1
                    record.audio_samples += chunk.audio.size
                    if chunk.audio.size and record.first_audio_s is None:
                        record.first_audio_s = time.perf_counter() - t0
                    if chunk.is_final and chunk.timings is not None:
                        record.timings, record.prompt_cached = chunk.timings, chunk.timings.prompt_cached
                    yield chunk
            finally:
                stream.close()  # a cut reply: cancelled, its threads joined
        finally:
            with self._lock:
                interrupted = self._interrupt is not None
                if interrupted:
                    self._interrupt = ReplyInterrupted(self._interrupt.at_s, "".join(text))
                self._replying = False
            if contents is not None:
                record.text, record.interrupted = "".join(text), interrupted
                self.history += [("user", c) for c in contents] + [("assistant", record.text)]
                self.turns = [*self.turns[-(MAX_RECORDS_KEPT - 1) :], record]
                self.turn_count += 1
                self._trim()

    def add(self, role: str, content) -> None:
        """Adds an earlier message to the conversation (text, or EncodedAudio for the user)."""
        if role not in ("user", "assistant") or not isinstance(content, (str, EncodedAudio)):
            raise InvalidArgumentError("add() takes role user or assistant and text (or EncodedAudio for the user)")
        self.history.append((role, content))
        self._trim()

    def _trim(self) -> None:
        """Bounds the conversation to what a prompt could still hold: at most MAX_TURNS_KEPT
        entries, and no entry older than those whose audio alone fills the LLM context. The
        oldest go first, a whole turn at a time, as the prompt would leave them out."""
        n_ctx = self.session.engine_config.n_ctx
        rows = [c.embeddings.shape[0] if isinstance(c, EncodedAudio) else 0 for _, c in self.history]
        drop, later = 0, sum(rows)
        while drop < len(self.history) and (len(self.history) - drop > MAX_TURNS_KEPT or later - rows[drop] >= n_ctx):
            later -= rows[drop]
            drop += 1
        while 0 < drop < len(self.history) and self.history[drop][0] != "user":  # a turn starts with the user
            drop += 1
        if drop:
            del self.history[:drop]

    @property
    def last_interrupt(self) -> ReplyInterrupted | None:
        return self._interrupt

    def reset(self) -> None:
        """Forgets the conversation and the VAD's state (a new conversation, same options)."""
        self.vad.reset()
        self.history.clear()
        self.turns.clear()
        self.turn_count = 0

    def close(self) -> None:
        if self._replying:
            self.session.cancel()
        self._closed = True

    def __enter__(self) -> HandsFreeSession:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
