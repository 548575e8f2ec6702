"""The LLM's session slots: one libllama context with a KV stream per slot, its decode steps batched
across slots by the DecodeScheduler (llm_slots.py, docs/slots.md)."""

import threading

import numpy as np
import pytest
from threads import in_threads

from llama_omni_py.config import LlmSampling
from llama_omni_py.errors import InvalidArgumentError
from llama_omni_py.modelset.layout import discover
from llama_omni_py.modules.llm.context import DecodeScheduler, LlmContext
from llama_omni_py.modules.llm.model import LanguageModel
from llama_omni_py.modules.llm.prompt import Prompt

PROMPTS = [[(i * 37 + 11 * s) % 300 + 10 for i in range(30 + 9 * s)] for s in range(3)]
FORCED = [[(7 * k + 3 * s) % 250 + 20 for k in range(12)] for s in range(3)]


def _context(tiny_dir, slots, **kw) -> LlmContext:
    return LlmContext(discover(tiny_dir).llm, "cpu", 512, 1, slots=slots, **kw)


def _forced_run(slot, s, barrier=None):
    """Prompt s, then the forced tokens one decode step at a time: the hidden state of each."""
    slot.eval_tokens(PROMPTS[s])
    out = []
    with slot.looping():
        if barrier is not None:  # every slot is inside its loop before any steps
            barrier.wait(60)
        for t in FORCED[s]:
            out.append(slot.decode_step(t)[1])
    return np.stack(out)


@pytest.fixture(scope="module")
def alone(tiny_dir):
    """Each slot's hidden states from a lone context."""
    out = []
    for s in range(3):
        ctx = _context(tiny_dir, 1)
        out.append(_forced_run(ctx.slot(0), s))
    return out


def test_batch_invariant_slots_equal_lone_contexts_bit_for_bit(tiny_dir, alone):
    ctx = _context(tiny_dir, 3, batch_invariant=True)
    barrier = threading.Barrier(3)
    got = in_threads(lambda s: _forced_run(ctx.slot(s), s, barrier), 3)
    for s in range(3):
        np.testing.assert_array_equal(got[s], alone[s])
    assert ctx.scheduler.mean_batch == 1.0  # every step alone


def test_batched_steps_stay_within_the_stated_tolerance(tiny_dir, alone):
    ctx = _context(tiny_dir, 3)
    ctx.scheduler._gather_s = 5.0  # every looping slot is waited for: batches of 3, whatever the load
    barrier = threading.Barrier(3)
    got = in_threads(lambda s: _forced_run(ctx.slot(s), s, barrier), 3)
    assert ctx.scheduler.mean_batch > 2.5  # the steps really ran together
    for s in range(3):
        scale = np.abs(alone[s]).max()
        assert np.abs(got[s] - alone[s]).max() <= 5e-3 * scale, s  # docs/slots.md: F16-rounding sized


def test_slot_generation_equals_lone_generation_with_batch_invariant(tiny_dir):
    sampling, seed = LlmSampling(), 11

    def reply(lm, s):
        chunks = list(lm.chunks(Prompt([("tokens", PROMPTS[s])]), sampling, seed + s, 24))
        return [t for c in chunks for t in c.tokens], np.concatenate([c.hidden for c in chunks])

    lone = [reply(LanguageModel(discover(tiny_dir).llm, "cpu", 512, 1, prompt_cache=False), s) for s in range(2)]
    ctx = _context(tiny_dir, 2, batch_invariant=True)
    got = in_threads(lambda s: reply(LanguageModel.slot(ctx, s, prompt_cache=False), s), 2)
    for s in range(2):
        assert got[s][0] == lone[s][0]
        np.testing.assert_array_equal(got[s][1], lone[s][1])


def test_slots_keep_their_own_kv_and_positions(tiny_dir):
    ctx = _context(tiny_dir, 2)
    a, b = ctx.slot(0), ctx.slot(1)
    a.eval_tokens(PROMPTS[0])
    b.eval_tokens(PROMPTS[1][:5])
    assert (a.n_past, b.n_past) == (len(PROMPTS[0]), 5)
    logits_a = a.logits()
    b.eval_tokens(PROMPTS[1][5:])  # another slot's work leaves a's last row alone
    np.testing.assert_array_equal(a.logits(), logits_a)
    b.keep(0)
    assert (a.n_past, b.n_past) == (len(PROMPTS[0]), 0)
    assert ctx.kv_bytes_per_slot > 0


def test_prefill_chunks_let_other_slots_step_in_between(tiny_dir):
    ctx = _context(tiny_dir, 2, prefill_chunk=8)
    order = []
    native = ctx.native

    class Recording:  # the native context, with each call's kind recorded
        def __getattr__(self, name):
            attr = getattr(native, name)
            if name in ("eval_tokens", "decode_many"):
                return lambda *a, **k: (order.append(name), attr(*a, **k))[1]
            return attr

    ctx.scheduler._native = Recording()
    ctx.slot(0).eval_tokens(PROMPTS[0][:4])
    started, done = threading.Event(), threading.Event()

    def stepper(_):
        slot = ctx.slot(0)
        with slot.looping():
            for k in range(400):  # steps until the other slot's prompt is in
                slot.decode_step(30 + k % 200)
                started.set()
                if done.is_set():
                    break

    def prefiller(_):
        started.wait(60)
        ctx.slot(1).eval_tokens(PROMPTS[2])  # 48 rows: 6 chunks of 8
        done.set()

    def run(k):
        return (stepper if k == 0 else prefiller)(k)

    in_threads(run, 2)
    chunks = [i for i, name in enumerate(order) if name == "eval_tokens"][1:]  # the first is slot 0's prompt
    assert len(chunks) == 6
    steps_inside = [i for i, name in enumerate(order) if name == "decode_many" and chunks[0] < i < chunks[-1]]
    assert steps_inside  # the stepping slot was not held until the whole prompt was in


class _FailingNative:
    n_seq = 2

    def decode_many(self, seqs, tokens):
        raise InvalidArgumentError("token id 999999 is outside the vocabulary")


def test_an_error_in_a_batch_reaches_every_slot_in_it():
    sched = DecodeScheduler(_FailingNative(), gather_s=5.0)
    errors = []

    def body(s):
        with sched.looping(s):
            try:
                sched.step(s, 1)
            except InvalidArgumentError as e:
                errors.append(str(e))

    with sched.looping(0), sched.looping(1):  # both are waited for: one batch of two
        threads = [threading.Thread(target=body, args=(s,)) for s in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
    assert len(errors) == 2 and all("outside the vocabulary" in e for e in errors)


def test_a_slot_outside_the_context_is_refused(tiny_dir):
    ctx = _context(tiny_dir, 2)
    with pytest.raises(ValueError, match="slot 2"):
        ctx.slot(2)
    with pytest.raises(InvalidArgumentError, match="sequence 5"):
        ctx.native.eval_tokens([1, 2], False, 5)
    with pytest.raises(InvalidArgumentError, match="twice"):
        ctx.native.decode_many([0, 0], [1, 2])
