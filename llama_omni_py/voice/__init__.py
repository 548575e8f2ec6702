"""Hands-free voice: Silero voice activity detection with the MiniCPM-o demo's windowing
(:class:`StreamingVad`, :class:`VadOptions`) and :class:`VoiceSession`, spoken turns on an
OmniSession without a server. docs/voice.md."""

from .session import ReplyInterrupted, TurnRecord, VoiceSession
from .silero import SileroVad
from .vad import SpeechDiscarded, SpeechStarted, SpeechStopped, StreamingVad, VadEvent, VadOptions

__all__ = [
    "ReplyInterrupted",
    "SileroVad",
    "SpeechDiscarded",
    "SpeechStarted",
    "SpeechStopped",
    "StreamingVad",
    "TurnRecord",
    "VadEvent",
    "VadOptions",
    "VoiceSession",
]
