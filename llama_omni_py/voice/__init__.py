"""Hands-free voice: Silero voice activity detection with the MiniCPM-o demo's windowing
(:class:`StreamingVad`, :class:`VadOptions`) and :class:`HandsFreeSession`, spoken turns on an
OmniSession without a server (``session.hands_free()``). docs/voice.md.

Owns: silero (the VAD model), vad (windowing and hysteresis), session (HandsFreeSession).
May import: the base, data and modules layers (config, results, content, the LLM prompt) and the
turn-based orchestration through the OmniSession it is given; never session.py or the server.
"""

from .._lazy import lazy
from .session import HandsFreeSession, ReplyInterrupted, TurnRecord
from .silero import SileroVad
from .vad import SpeechDiscarded, SpeechStarted, SpeechStopped, StreamingVad, VadEvent, VadOptions

__getattr__, __dir__ = lazy(__name__, {})

__all__ = [
    "HandsFreeSession",
    "ReplyInterrupted",
    "SileroVad",
    "SpeechDiscarded",
    "SpeechStarted",
    "SpeechStopped",
    "StreamingVad",
    "TurnRecord",
    "VadEvent",
    "VadOptions",
]
