"""Full-duplex conversation: one ~1 s unit of audio in, one unit of speech or silence out
(docs/duplex.md).

Owns: decoder (a unit's token policy: listen, speak, end of turn), context (the LLM context of a
session: a protected prefix, whole units dropped when it fills), forbidden (the reference's bad
token ids), session (DuplexSession: the three stage threads of a duplex session). May import the
base, data, modules and orchestration layers; never session.py or the server. Its names resolve
on first use, so the decoder's pure logic imports without the compiled core.
"""

from .._lazy import lazy

__getattr__, __dir__ = lazy(
    __name__,
    {
        **dict.fromkeys(("DuplexTokens", "UnitDecision", "UnitDecoder"), "llama_omni_py.duplex.decoder"),
        "bad_token_ids": "llama_omni_py.duplex.forbidden",
        **dict.fromkeys(("DuplexResult", "DuplexSession", "DuplexTimings"), "llama_omni_py.duplex.session"),
    },
)

__all__ = [
    "DuplexResult",
    "DuplexSession",
    "DuplexTimings",
    "DuplexTokens",
    "UnitDecision",
    "UnitDecoder",
    "bad_token_ids",
]
