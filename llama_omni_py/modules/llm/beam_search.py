"""Beam search over an LLM slot's sequences, by the rules of transformers' ``generate`` with
``num_beams`` > 1 and ``do_sample=False`` (4.52; the facts are in docs/speech-path.md#beam-search).

    BeamSearch  the rules: scores, candidates, finished hypotheses, when to stop (numpy, float32
                as transformers computes them; no model)
    search()    runs them on a slot: each running beam decodes in a KV sequence of its own, the
                beams' steps go to the context as one batch, and a beam that takes over another's
                place gets a copy of its parent's KV cache
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ...errors import InvalidArgumentError

NEG = np.float32(-1e9)  # transformers' score of an impossible beam
F32 = np.float32


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """Row-wise log-probabilities in float32."""
    x = np.asarray(logits, dtype=F32)
    shifted = x - x.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def top(values: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` largest values, largest first; equal values by the lower index."""
    if k < values.size:
        kth = values[np.argpartition(values, values.size - k)[values.size - k :]].min()
        cand = np.flatnonzero(values >= kth)
    else:
        cand = np.arange(values.size)
    return cand[np.argsort(-values[cand], kind="stable")][:k]


@dataclass(frozen=True)
class Hypothesis:
    """A finished beam: its tokens (the stop token included) and length-normalised score."""

    tokens: tuple[int, ...]
    score: float


class BeamSearch:
    """The state of one search. ``advance(logits)`` takes the running beams' next-token logits
    and returns, for each new running beam, the beam it continues (its new token is the last of
    ``running[i]``); ``done`` says when to stop and ``best`` is the answer."""

    def __init__(
        self,
        num_beams: int,
        eos: frozenset[int],
        max_new_tokens: int,
        repetition_penalty: float = 1.0,
        length_penalty: float = 1.0,
        early_stopping: bool | str = False,
    ):
        if not eos:
            raise InvalidArgumentError("beam search needs at least one stop token")
        self.num_beams, self.eos, self.max_new_tokens = num_beams, np.array(sorted(eos)), max_new_tokens
        self.penalty, self.length_penalty, self.early_stopping = F32(repetition_penalty), length_penalty, early_stopping
        self.n_candidates = max(2, 1 + len(eos)) * num_beams
        self.running: list[list[int]] = [[] for _ in range(num_beams)]
        # only the first beam is live at first: the others would repeat its candidates
        self.running_scores = np.full(num_beams, NEG, F32)
        self.running_scores[0] = 0.0
        self.finished: list[tuple[int, ...]] = [()] * num_beams
        self.finished_scores = np.full(num_beams, NEG, F32)
        self.is_finished = np.zeros(num_beams, bool)
        self.cur_len = 0  # tokens generated so far
        self.done = False

    def _scores(self, logits: np.ndarray) -> np.ndarray:
        """Log-probabilities with the repetition penalty on each beam's generated tokens (each
        distinct token once; no renormalisation), plus the beam's running score."""
        lp = log_softmax(logits)
        if self.penalty != 1.0:
            for b, tokens in enumerate(self.running):
                if tokens:
                    ids = np.unique(tokens)
                    row = lp[b, ids]
                    lp[b, ids] = np.where(row < 0, row * self.penalty, row / self.penalty)
        return lp + self.running_scores[:, None]

    def advance(self, logits: np.ndarray) -> list[int]:
        """One step on ``logits`` (num_beams, vocab): the running beams' next-token logits."""
        if self.done:
            raise RuntimeError("the search is over")
        vocab = logits.shape[1]
        acc = self._scores(logits).reshape(-1)
        pick = top(acc, self.n_candidates)
        beam, token, score = pick // vocab, pick % vocab, acc[pick]
        stops = np.isin(token, self.eos) | (self.cur_len + 1 >= self.max_new_tokens)
        # the next running beams: the best candidates that did not stop
        live = score + stops.astype(F32) * NEG
        keep = top(live, self.num_beams)
        parents = beam[keep]
        self._finish(beam, token, score, stops)
        self.running = [self.running[b] + [int(t)] for b, t in zip(parents, token[keep])]
        self.running_scores = live[keep]
        self.cur_len += 1
        self.done = not self._may_go_on(stops)
        return [int(p) for p in parents]

    def _finish(self, beam, token, score, stops) -> None:
        """Candidates among the first num_beams that stopped join the finished set (the best
        num_beams hypotheses so far, by length-normalised score)."""
        norm = score / F32((self.cur_len + 1) ** self.length_penalty)
        if self.early_stopping is True and self.is_finished.all():
            norm = norm + NEG
        ranked = np.arange(norm.size) < self.num_beams
        norm = norm + (~(stops & ranked)).astype(F32) * NEG
        tokens = [(*self.running[b], int(t)) for b, t in zip(beam, token)]
        merged = np.concatenate([self.finished_scores, norm])
        keep = top(merged, self.num_beams)
        pool = self.finished + tokens
        flags = np.concatenate([self.is_finished, stops & ranked])
        self.finished = [pool[i] for i in keep]
        self.finished_scores, self.is_finished = merged[keep], flags[keep]

    def _may_go_on(self, stops: np.ndarray) -> bool:
        """transformers' three conditions: a running beam could still beat the worst finished one,
        a beam is open (early_stopping=True closes them once num_beams have finished), and some
        candidate did not stop (max_new_tokens stops all)."""
        if self.early_stopping == "never" and self.length_penalty > 0:
            best_length = self.max_new_tokens
        else:
            best_length = self.cur_len
        best_running = self.running_scores[0] / F32(best_length**self.length_penalty)
        worst = np.where(self.is_finished, self.finished_scores.min(), NEG)
        improvable = bool(np.any(best_running > worst))
        open_beam = not (self.is_finished.all() and self.early_stopping is True)
        return improvable and open_beam and not bool(stops.all())

    @property
    def best(self) -> Hypothesis:
        if not self.is_finished[0]:
            raise RuntimeError("no beam has finished")
        return Hypothesis(self.finished[0], float(self.finished_scores[0]))


@dataclass(frozen=True)
class SearchResult:
    best: Hypothesis
    steps: int  # decode rounds (each evaluates num_beams tokens)
    copies: int  # KV sequence copies (the first round's copies of the prompt included)


def place(parents: list[int], holders: list[int], seqs: list[int]) -> tuple[list[int], list[tuple[int, int]]]:
    """Sequences for the new running beams: the first child of a beam keeps its parent's
    sequence, the others take sequences no child keeps and get a copy of the parent's KV. Copy
    sources are all kept sequences, so no copy reads a sequence another copy writes."""
    placed: list[int | None] = [None] * len(parents)
    kept: set[int] = set()
    for i, p in enumerate(parents):
        if holders[p] not in kept:
            placed[i] = holders[p]
            kept.add(holders[p])
    free = [s for s in seqs if s not in kept]
    copies = []
    for i, p in enumerate(parents):
        if placed[i] is None:
            placed[i] = free.pop(0)
            copies.append((holders[p], placed[i]))
    return placed, copies  # type: ignore[return-value]


def search(slot, first_logits: np.ndarray, rules: BeamSearch, cancelled: Callable[[], bool] = lambda: False):
    """Runs ``rules`` on ``slot`` (an LlmSlot whose own sequence holds the evaluated prompt, whose
    last logits are ``first_logits``) over its beam sequences; None when cancelled."""
    seqs = slot.beam_seqs[: rules.num_beams]
    holders = [seqs[0]] * rules.num_beams  # every beam starts as the prompt
    logits = np.tile(np.asarray(first_logits, F32), (rules.num_beams, 1))
    steps = copies = 0
    with slot.looping():
        while True:
            parents = rules.advance(logits)
            if rules.done:
                return SearchResult(rules.best, steps, copies)
            if cancelled():
                return None
            holders, moves = place(parents, holders, seqs)
            slot.copy_kv(moves)
            copies += len(moves)
            out = slot.feed_beams(holders, [beam[-1] for beam in rules.running])
            logits = np.stack([r.logits for r in out])
            steps += 1
