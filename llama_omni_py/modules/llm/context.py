"""One libllama context shared by an engine's session slots (docs/slots.md).

    LlmContext       the model and one context with a KV stream per slot (and per beam), and
                     its scheduler
    DecodeScheduler  every call on the context goes through it: one at a time, and the one-token
                     decode steps of several slots in one llama_decode
    LlmSlot          slot k's view, with the native context's API for one sequence

A slot's thread submits a job and waits; whichever waiting thread finds the context idle runs the
next piece of work for everyone (leader/follower, no scheduler thread): the pending decode steps
as one batch once every slot inside a decode loop has submitted its step (or after a short gather
window), else the oldest other job (a prefill chunk, a KV edit), so a long prompt in one slot
delays the others' steps by one chunk, not by the whole prompt.

With ``batch_invariant`` each step runs alone: the weights are still shared, but a slot's outputs
are then bit for bit those of a lone session. Batched steps differ from lone ones in the last bits
(libllama evaluates every sequence of a batch over the longest sequence's KV length; the masked
positions add nothing, but they move where ggml's dot products switch from vector to scalar
code), so sampled replies can part ways after some tokens.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ..._native import core

N_BATCH = 512  # prompt rows per libllama batch
GATHER_S = 0.002  # how long a batch waits for slots still inside a decode loop


@dataclass
class StepResult:
    """One slot's decode step: the sampled next token (when asked), the hidden state of the token
    evaluated, and its logits (when asked)."""

    next: int | None
    hidden: np.ndarray
    logits: np.ndarray | None


class _Job:
    __slots__ = ("seq", "token", "sample", "logits", "fn", "done", "result", "error")

    def __init__(self, seq: int, token: int = -1, sample: bool = True, logits: bool = False, fn=None):
        self.seq, self.token, self.sample, self.logits, self.fn = seq, token, sample, logits, fn
        self.done, self.result, self.error = False, None, None


class DecodeScheduler:
    """Serializes the calls on one native context and batches its slots' decode steps."""

    def __init__(self, native, batch_invariant: bool = False, gather_s: float = GATHER_S):
        self._native = native
        self.batch_invariant = batch_invariant
        self._gather_s = gather_s
        self._cond = threading.Condition(threading.Lock())
        self._steps: dict[int, _Job] = {}
        self._ops: deque[_Job] = deque()
        self._first_step_at = 0.0
        self._busy = False
        self._steps_turn_done = False  # a step batch ran since the last other job
        self._looping: set[int] = set()
        self.batches = 0  # llama_decode calls for steps
        self.batched_rows = 0  # steps they evaluated

    # -- what slots call ---------------------------------------------------------------------
    def run(self, seq: int, fn: Callable[[Any], Any]) -> Any:
        """``fn(native)`` with the context to itself, in turn with the other slots' work."""
        return self._submit(_Job(seq, fn=fn))[0]

    def step(self, seq: int, token: int, sample: bool = True, logits: bool = False) -> StepResult:
        """Evaluates one token of ``seq``, batched with the other slots' steps."""
        return self._submit(_Job(seq, int(token), sample, logits))[0]

    def steps(self, seqs: list[int], tokens: list[int]) -> list[StepResult]:
        """One token for each of ``seqs`` (a slot's beams), batched with the other slots' steps;
        each result has its logits, none is sampled."""
        if len(seqs) != len(tokens):
            raise ValueError("one token per sequence")
        return self._submit(*(_Job(s, int(t), False, True) for s, t in zip(seqs, tokens)))

    @contextlib.contextmanager
    def looping(self, seq: int):
        """Marks ``seq`` as inside a decode loop: batches wait (briefly) for its next step."""
        with self._cond:
            self._looping.add(seq)
        try:
            yield
        finally:
            with self._cond:
                self._looping.discard(seq)
                self._cond.notify_all()

    @contextlib.contextmanager
    def away(self, seq: int):
        """Inside a decode loop but busy elsewhere (handing a chunk on): not waited for."""
        with self._cond:
            was = seq in self._looping
            self._looping.discard(seq)
            self._cond.notify_all()
        try:
            yield
        finally:
            if was:
                with self._cond:
                    self._looping.add(seq)

    @property
    def mean_batch(self) -> float:
        return self.batched_rows / self.batches if self.batches else 0.0

    # -- leader/follower -----------------------------------------------------------------------
    def _submit(self, *jobs: _Job) -> list:
        """Queues the jobs (one op, or steps of distinct sequences) and works until all are done."""
        with self._cond:
            pending = [j.seq for j in jobs if j.fn is None and j.seq in self._steps]
            if pending:
                raise RuntimeError(f"sequence {pending[0]} already has a step pending")
            for job in jobs:
                if job.fn is None:
                    if not self._steps:
                        self._first_step_at = time.monotonic()
                    self._steps[job.seq] = job
                else:
                    self._ops.append(job)
            self._cond.notify_all()
            while not all(job.done for job in jobs):
                work = None if self._busy else self._take()
                if work is None:
                    self._cond.wait(self._timeout())
                    continue
                self._busy = True
                self._cond.release()
                try:
                    self._execute(work)
                finally:
                    self._cond.acquire()
                    self._busy = False
                    self._cond.notify_all()
        for job in jobs:
            if job.error is not None:
                raise job.error
        return [job.result for job in jobs]

    def _steps_ready(self) -> bool:
        if not self._steps:
            return False
        if self.batch_invariant or self._looping <= self._steps.keys():
            return True
        return time.monotonic() - self._first_step_at >= self._gather_s

    def _take(self) -> list[_Job] | _Job | None:
        # steps and other work take turns when both wait: neither starves the other
        if self._ops and (self._steps_turn_done or not self._steps):
            self._steps_turn_done = False
            return self._ops.popleft()
        if self._steps_ready():
            self._steps_turn_done = True
            if self.batch_invariant:  # one at a time, oldest first
                seq = next(iter(self._steps))
                batch = [self._steps.pop(seq)]
            else:
                batch, self._steps = list(self._steps.values()), {}
            self._first_step_at = time.monotonic()
            return batch
        if self._ops:
            return self._ops.popleft()
        return None

    def _timeout(self) -> float | None:
        if self._busy or not self._steps:
            return None
        return max(self._gather_s - (time.monotonic() - self._first_step_at), 0.0) + 1e-4

    def _execute(self, work) -> None:
        if isinstance(work, _Job):
            try:
                work.result = work.fn(self._native)
            except BaseException as e:  # handed to the slot that asked
                work.error = e
            work.done = True
            return
        n = self._native
        try:
            n.decode_many([j.seq for j in work], [j.token for j in work])
            self.batches += 1
            self.batched_rows += len(work)
            for j in work:
                j.result = StepResult(
                    n.sample(j.seq) if j.sample else None,
                    n.hidden(-1, j.seq),
                    n.logits(-1, j.seq) if j.logits else None,
                )
        except BaseException as e:
            for j in work:
                j.error = e
        for j in work:
            j.done = True


class LlmContext:
    """The LLM's weights and one context with ``beams`` KV streams of ``n_ctx`` positions for
    each of ``slots`` slots. Slot k decodes in sequence k; its beam search also uses sequences
    ``slots + k * (beams - 1) + j`` (so with one beam the layout is one sequence per slot)."""

    def __init__(
        self,
        path: str | Path,
        device: str,
        n_ctx: int = 4096,
        threads: int = 0,
        exact: bool = False,
        slots: int = 1,
        batch_invariant: bool = False,
        prefill_chunk: int = N_BATCH,
        beams: int = 1,
    ):
        self.model = core.LlmModel(str(path), device)
        self.beams = beams
        self.native = core.Llm(self.model, n_ctx, N_BATCH, threads, exact, n_seq=slots * beams)
        self.scheduler = DecodeScheduler(self.native, batch_invariant)
        self.prefill_chunk = prefill_chunk

    @property
    def slots(self) -> int:
        return self.native.n_seq // self.beams

    @property
    def kv_bytes_per_slot(self) -> int:
        """Bytes of the KV streams of one slot (all its beams' sequences)."""
        return self.native.kv_bytes_per_seq * self.beams

    def beam_seqs(self, seq: int) -> list[int]:
        """Slot ``seq``'s sequences for a beam search: its own first."""
        first = self.slots + seq * (self.beams - 1)
        return [seq, *range(first, first + self.beams - 1)]

    def slot(self, seq: int) -> LlmSlot:
        return LlmSlot(self, seq)


class LlmSlot:
    """Sequence ``seq`` of a shared context, with the native context's API (eval, sample, decode
    steps, KV edits); prompts are evaluated in chunks of ``prefill_chunk`` rows."""

    def __init__(self, context: LlmContext, seq: int):
        if not 0 <= seq < context.slots:
            raise ValueError(f"slot {seq} is outside 0..{context.slots - 1}")
        self.context, self.seq = context, seq
        self._native, self._sched = context.native, context.scheduler
        self.beam_seqs = context.beam_seqs(seq)

    @property
    def n_past(self) -> int:
        return self._native.n_past_of(self.seq)

    @property
    def n_ctx(self) -> int:
        return self._native.n_ctx

    def _run(self, fn: Callable[[Any], Any]) -> Any:
        return self._sched.run(self.seq, fn)

    def eval_tokens(self, tokens, all_outputs: bool = False) -> None:
        tokens, s = list(tokens), self.seq
        step = max(len(tokens), 1) if all_outputs else self.context.prefill_chunk
        for i in range(0, max(len(tokens), 1), step):
            part = tokens[i : i + step]
            self._run(lambda n, part=part: n.eval_tokens(part, all_outputs, s))

    def eval_embeddings(self, rows: np.ndarray, all_outputs: bool = False) -> None:
        rows, s = np.ascontiguousarray(rows, dtype=np.float32), self.seq
        step = max(len(rows), 1) if all_outputs else self.context.prefill_chunk
        for i in range(0, max(len(rows), 1), step):
            part = rows[i : i + step]
            self._run(lambda n, part=part: n.eval_embeddings(part, all_outputs, s))

    def logits(self, i: int = -1) -> np.ndarray:
        # the last row is this slot's own copy: no other slot's work can change it
        return self._native.logits(i, self.seq) if i == -1 else self._run(lambda n: n.logits(i, self.seq))

    def hidden(self, i: int = -1) -> np.ndarray:
        return self._native.hidden(i, self.seq) if i == -1 else self._run(lambda n: n.hidden(i, self.seq))

    def set_sampling(self, options) -> None:
        self._run(lambda n: n.set_sampling(options, self.seq))

    def sample(self) -> int:
        return self._run(lambda n: n.sample(self.seq))

    def decode_step(self, token: int) -> tuple[int, np.ndarray]:
        """Evaluates ``token``; (the next sampled token, the hidden state of ``token``)."""
        r = self._sched.step(self.seq, token)
        return r.next, r.hidden

    def feed(self, token: int) -> tuple[np.ndarray, np.ndarray]:
        """Evaluates ``token``; (its logits, its hidden state), for a caller's own sampling."""
        r = self._sched.step(self.seq, token, sample=False, logits=True)
        return r.logits, r.hidden

    def keep(self, n_keep: int) -> None:
        self._run(lambda n: n.keep(n_keep, self.seq))

    def slide(self, n_keep: int, n_discard: int) -> None:
        self._run(lambda n: n.slide(n_keep, n_discard, self.seq))

    def feed_beams(self, seqs: list[int], tokens: list[int]) -> list[StepResult]:
        """Evaluates one token in each of the slot's beam sequences ``seqs`` in one batch (with the
        other slots' steps); a result per sequence with its logits and hidden state."""
        return self._sched.steps(seqs, tokens)

    def clear_beams(self) -> None:
        """Empties the slot's beam sequences (all but its own)."""
        others = self.beam_seqs[1:]
        if others:
            self._run(lambda n: [n.keep(0, s) for s in others])

    def copy_kv(self, copies: list[tuple[int, int]]) -> None:
        """Makes each destination sequence a copy of its source, in order (beam reordering)."""
        if copies:
            self._run(lambda n: [n.copy_seq(src, dst) for src, dst in copies])

    def looping(self):
        return self._sched.looping(self.seq)

    def away(self):
        return self._sched.away(self.seq)
