"""OpenAI ``stop`` sequences over a reply's text as it streams in: the text is cut before the
first occurrence of any of them. A piece of text that could be the start of a stop sequence is
held back until the next piece shows whether it is one, so a streamed reply never sends text
that a stop sequence later removes."""

from __future__ import annotations


class StopScanner:
    def __init__(self, stops: tuple[str, ...]):
        self.stops = tuple(s for s in stops if s)
        self.hold = max((len(s) for s in self.stops), default=1) - 1  # the most a partial match can hold
        self.text = ""  # the reply so far, cut at the stop once one is found
        self.sent = 0  # characters of ``text`` handed out
        self.hit = False

    def feed(self, piece: str) -> str:
        """The text that can be sent now (nothing after a stop sequence, ever)."""
        if self.hit:
            return ""
        start = max(0, len(self.text) - self.hold)  # an earlier start would have matched before
        self.text += piece
        found = [i for i in (self.text.find(s, start) for s in self.stops) if i >= 0]
        if found:
            self.hit = True
            self.text = self.text[: min(found)]
            return self._take(len(self.text))
        return self._take(len(self.text) - self._partial())

    def flush(self) -> str:
        """What was held back, at the end of the reply (no stop sequence came)."""
        return "" if self.hit else self._take(len(self.text))

    def _partial(self) -> int:
        """The length of the longest tail of the text that begins a stop sequence."""
        for n in range(min(self.hold, len(self.text)), 0, -1):
            tail = self.text[-n:]
            if any(s.startswith(tail) for s in self.stops):
                return n
        return 0

    def _take(self, end: int) -> str:
        end = max(end, self.sent)
        out, self.sent = self.text[self.sent : end], end
        return out
