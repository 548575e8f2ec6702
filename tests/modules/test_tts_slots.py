"""TTS slots: one set of weights, a KV cache per slot, and the code steps of slots decoding at the
same time evaluated in shared graphs (docs/slots.md#tts). With batch_invariant a slot gives the
codes it gives alone with the same seed, bit for bit, whatever its siblings do; without it the
logits may differ in the last bits (greedy codes still agree)."""

import threading
import time

import numpy as np
import pytest

import llama_omni_py as omni
from llama_omni_py._native import core
from llama_omni_py.modelset import spec as ms
from llama_omni_py.modules.tts import TtsModel

CODES = 40  # per chunk: min_codes = limit, so every slot runs its whole loop


def _load(tiny_dir, exact=False, batch_invariant=True, threads=2):
    return TtsModel(
        tiny_dir / ms.TTS_FILE, tiny_dir / ms.PROJECTOR_FILE, "cpu", threads, exact, batch_invariant=batch_invariant
    )


@pytest.fixture(scope="module", params=[False, True], ids=["f16", "exact"])
def model(request, tiny_dir):
    return _load(tiny_dir, exact=request.param)


def _sampler(seed, temperature=0.8, repetition_penalty=None):
    o = core.TtsSamplerOptions()
    o.temperature, o.seed = temperature, seed
    if repetition_penalty is not None:
        o.repetition_penalty = repetition_penalty
    return core.TtsSampler(o)


def _conditions(tts: TtsModel, k: int) -> np.ndarray:
    """Slot k's condition rows: 3 + k text tokens, so the slots sit at different positions."""
    rng = np.random.default_rng(100 + k)
    tokens = [int(t) for t in rng.integers(0, tts.dims.text_vocab, 3 + k)]
    return tts.conditions(tokens, rng.standard_normal((len(tokens), tts.dims.llm_embd)).astype(np.float32))


def _reply(tts: TtsModel, k: int, callback=None, temperature=0.8, repetition_penalty=None) -> list[list[int]]:
    """Two chunks of one reply (the second continues the first's KV cache), seed k."""
    tts.start_turn()
    sampler, rows = _sampler(k, temperature, repetition_penalty), _conditions(tts, k)
    groups: list[list[int]] = []

    def on_codes(codes):
        groups.append(list(codes))
        return callback(k, len(groups)) if callback else True

    chunks = [tts.generate(rows, sampler, CODES, on_codes, min_codes=CODES, group=8) for _ in range(2)]
    return chunks + [sum(groups, [])]


def _concurrently(slots: list[TtsModel], callback=None, temperature=0.8, repetition_penalty=None) -> list:
    """Every slot's reply from its own thread, started together; an exception is the result."""
    out: list = [None] * len(slots)
    start = threading.Barrier(len(slots))

    def run(k):
        start.wait()
        try:
            out[k] = _reply(slots[k], k, callback, temperature, repetition_penalty)
        except Exception as e:  # noqa: BLE001 - handed to the test
            out[k] = e

    threads = [threading.Thread(target=run, args=(k,)) for k in range(len(slots))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a slot hangs"
    return out


def test_slots_share_the_weights_and_own_their_cache(model, request):
    slot = model.new_slot(256)
    d = model.dims
    exact = request.node.callspec.params["model"]
    kv = 4 if exact else 2  # K and V: F16 as llama.cpp-omni keeps them, F32 when exact
    assert slot.weight_bytes == model.weight_bytes > 0
    assert slot.kv_bytes == 2 * d.layers * 256 * d.hidden * kv
    assert model.kv_bytes == 2 * d.layers * model.n_ctx * d.hidden * kv
    assert slot.n_ctx == 256 and slot.batch_invariant is model.batch_invariant is True
    lone = _reply(model.new_slot(), 0)
    _reply(slot, 1)  # another slot's reply leaves nothing behind in this one
    assert _reply(model.new_slot(), 0) == lone
    with pytest.raises(omni.InvalidArgumentError, match="n_ctx"):
        model.new_slot(8)


@pytest.mark.parametrize("n", [2, 4])
def test_batch_invariant_slots_give_the_codes_they_give_alone(model, n):
    """batch_invariant on the CPU: the steps are still batched, and exact."""
    alone = [_reply(model.new_slot(), k) for k in range(n)]
    graphs0, rows0 = model.step_batches
    together = _concurrently([model.new_slot() for _ in range(n)])
    graphs, rows = model.step_batches[0] - graphs0, model.step_batches[1] - rows0
    assert together == alone
    assert rows == n * 2 * CODES and graphs < rows  # steps of several slots did share graphs


def test_slot_in_its_callback_or_leaving_early_holds_nobody_back(model):
    """Slot 0 stops after its first group, slot 1 sleeps in every callback (as on a full queue),
    slot 2's callback raises: the others still give their lone codes."""
    slots = [model.new_slot() for _ in range(4)]

    def callback(k, group):
        if k == 1:
            time.sleep(0.02)
        if k == 2 and group == 2:
            raise RuntimeError("consumer gone")
        return not (k == 0 and group == 1)

    alone = [_reply(model.new_slot(), k, callback) for k in (0, 1, 3)]
    out = _concurrently(slots, callback)
    assert [out[0], out[1], out[3]] == alone
    assert len(out[0][0]) == 8  # its first chunk stopped after the first group
    assert isinstance(out[2], RuntimeError) and "consumer gone" in str(out[2])


def test_a_failed_batch_reaches_every_slot_in_it(tiny_dir):
    # batch_invariant: still batched on the CPU, and the codes after the failure are exactly the
    # lone ones (without it a near tie may flip a greedy code)
    tts = _load(tiny_dir, batch_invariant=True, threads=1)
    slots = [tts.new_slot() for _ in range(2)]
    tts.tts._fail_next_batch()
    for _ in range(5):  # until the two slots overlap (a shared graph is what fails)
        out = _concurrently(slots)
        if any(isinstance(e, Exception) for e in out):
            break
    assert all(isinstance(e, omni.DeviceError) and "injected" in str(e) for e in out), out
    greedy = [_reply(tts.new_slot(), k, temperature=0.0) for k in range(2)]
    assert _concurrently(slots, temperature=0.0) == greedy  # the weights still serve


def _greedy_margins(tts: TtsModel, k: int, reply: list[list[int]]) -> list[float]:
    """The gap between the two best logits at each of a greedy reply's codes (no repetition
    penalty), found by feeding a fresh slot the reply's rows and codes one step at a time."""
    slot = tts.new_slot()
    slot.start_turn()
    rows, margins = _conditions(slot, k), []
    for chunk in reply[:2]:
        logits = slot.tts.forward(rows)
        for code in chunk:
            best = np.sort(logits)[-2:]
            assert int(np.argmax(logits)) == code  # the replay is the reply
            margins.append(float(best[1] - best[0]))
            logits = slot.tts.forward(np.asarray(slot.tts.code_embedding(code), np.float32).reshape(1, -1))
    return margins


# Far above the last-bits difference of summing in another order, far below a typical gap.
NEAR_TIE = 0.02


@pytest.mark.parametrize("exact", [False, True], ids=["f16", "exact"])
def test_default_batching_keeps_the_greedy_codes(tiny_dir, exact):
    """Without batch_invariant the batched sums may run in another order: logits differ in the
    last bits, so greedy codes agree except where the two best codes nearly tie (on the tiny set
    with F16 weights, gaps of 1e-3 occur). Each slot's codes must match its lone reply up to its
    first difference, and that difference must fall on a near tie."""
    tts = _load(tiny_dir, exact=exact, batch_invariant=False)
    assert not tts.new_slot().batch_invariant
    alone = [_reply(tts.new_slot(), k, temperature=0.0, repetition_penalty=1.0) for k in range(4)]
    before = tts.step_batches
    batched = _concurrently([tts.new_slot() for _ in range(4)], temperature=0.0, repetition_penalty=1.0)
    graphs, rows = (a - b for a, b in zip(tts.step_batches, before))
    assert rows == 4 * 2 * CODES and graphs < rows
    for k, (got, want) in enumerate(zip(batched, alone)):
        got, want = got[0] + got[1], want[0] + want[1]
        first = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), None)
        if first is not None:
            gap = _greedy_margins(tts, k, alone[k])[first]
            assert gap < NEAR_TIE, f"slot {k} left its lone codes at code {first}, where the best led by {gap:.3g}"
