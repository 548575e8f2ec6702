"""Full-duplex conversation: one ~1 s unit of audio in, one unit of speech or silence out."""

from .decoder import DuplexTokens, UnitDecision, UnitDecoder
from .forbidden import bad_token_ids
from .session import DuplexResult, DuplexSession, DuplexTimings

__all__ = [
    "DuplexResult",
    "DuplexSession",
    "DuplexTimings",
    "DuplexTokens",
    "UnitDecision",
    "UnitDecoder",
    "bad_token_ids",
]
