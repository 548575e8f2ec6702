"""Text out of token pieces, whole characters only."""

from __future__ import annotations

import codecs
from collections.abc import Callable


class TextStream:
    """Text of a reply that arrives in pieces of tokens. A byte-level tokenizer may split one
    character (a CJK character, an emoji) over two tokens, and so over two pieces; its bytes wait
    for the rest and the character comes out whole with the later piece, never as two U+FFFD."""

    def __init__(self, to_bytes: Callable[[list[int]], bytes]):
        self._to_bytes = to_bytes
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def feed(self, tokens: list[int], final: bool = False) -> str:
        """The text the tokens complete; ``final`` also gives out what is left (invalid as U+FFFD)."""
        return self._utf8.decode(self._to_bytes(tokens) if tokens else b"", final)

    def reset(self) -> None:
        """Forgets bytes still waiting (a turn that was cut off)."""
        self._utf8.reset()
