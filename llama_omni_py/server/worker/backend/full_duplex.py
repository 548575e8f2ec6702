"""The backend protocol's ``full_duplex`` mode on ``/backend``: one ``input.append`` per second of
audio, and per unit either a ``kind: listen`` delta, or the unit's text and audio deltas (and a
listen delta when the speaking turn ends). A speaking turn keeps one ``response_id`` until it
ends. Used by connection.Connection."""

from __future__ import annotations

import asyncio

from ....duplex import DuplexResult
from ...pcm import pcm_b64
from ..duplex import protocol as D
from . import protocol as P


class BackendDuplex:
    def __init__(self, session, session_id: str, backend: str):
        self.session, self.id, self.backend = session, session_id, backend
        self.turns = 0
        self.response_id: str | None = None

    async def unit(self, unit: D.UnitInput) -> list[dict]:
        """Runs one unit; returns its events."""
        r = await asyncio.to_thread(
            self.session.push, unit.audio, unit.frames or None, unit.force_listen, unit.max_slice_nums
        )
        return self.events(r)

    def _metrics(self, r: DuplexResult) -> dict:
        always = ("kv_cache_length", "wall_clock_ms", "vision_slices", "vision_tokens")
        m = {k: v for k, v in D.unit_metrics(r).items() if v or k in always}
        return {"backend": self.backend, **m, "current_time": r.unit, "end_of_turn": r.end_of_turn}

    def events(self, r: DuplexResult) -> list[dict]:
        m = self._metrics(r)

        def delta(kind: str, **fields) -> dict:
            return P.event(
                "response.output.delta",
                kind=kind,
                session_id=self.id,
                response_id=self.response_id,
                metrics=m,
                **fields,
            )

        if r.is_listen:
            out = [delta("listen")]
            self.response_id = None
            return out
        if self.response_id is None:
            self.response_id = f"{self.id}_resp_{self.turns}"
            self.turns += 1
        out = [delta("text", text=r.text)] if r.text else []
        out.append(delta("audio", audio=pcm_b64(r.audio)))
        if r.end_of_turn:  # the speaking turn ends: the listen delta says so
            out.append(delta("listen"))
            self.response_id = None
        return out

    async def close(self) -> None:
        await asyncio.to_thread(self.session.close)
