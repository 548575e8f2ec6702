"""Many streams over one Token2Wav (new_stream): shared weights, per-stream state, and each
stream's audio exactly what it gives alone while the others push from their own threads."""

import queue
import threading

import numpy as np
import pytest

import llama_omni_py as omni
from llama_omni_py._native import core
from llama_omni_py.errors import InvalidArgumentError

THREADS = 2  # vocoder (and CPU Token2Mel) workers: shared by the streams


def _calls(k: int, reset: bool) -> list:
    """Stream k's calls: pushes of odd sizes (different codes per stream), a flush, optionally a
    reset in the middle (the stream starts again), then the rest with final=True."""
    codes = np.random.default_rng(100 + k).integers(0, 6561, 200).astype(np.int32)
    calls = [("push", codes[: 25 + 3 * k]), ("push", codes[25 + 3 * k : 60]), ("flush", None)]
    calls += [("push", codes[60:83])]
    if reset:
        calls += [("reset", None), ("push", codes[83:120])]
    return calls + [("push", codes[120 + k :]), ("final", None)]


def _run(t2w, calls, out: list) -> None:
    """push/flush/final/reset, one audio array per call (empty for reset)."""
    for kind, codes in calls:
        if kind == "reset":
            t2w.reset()
            out.append(np.zeros(0, np.float32))
        elif kind == "flush":
            out.append(t2w.flush())
        else:
            out.append(t2w.push([] if codes is None else codes, final=kind == "final"))


def _run_split(t2w, calls, out: list) -> None:
    """The same calls through the two halves: this thread makes mel windows, a second thread
    vocodes them (as the overlapped pipeline does); a reset waits for the vocoder to go idle."""
    todo: queue.Queue = queue.Queue()
    errors: list = []

    def vocoder():
        try:
            while (item := todo.get()) is not None:
                audio = [t2w.vocode(w) for w in item]
                out.append(np.concatenate(audio) if audio else np.zeros(0, np.float32))
                todo.task_done()
        except Exception as e:  # reaches the assertion below
            errors.append(e)

    th = threading.Thread(target=vocoder)
    th.start()
    try:
        for kind, codes in calls:
            if kind == "reset":
                todo.join()
                t2w.reset()
                out.append(np.zeros(0, np.float32))
            elif kind == "flush":
                todo.put(t2w.flush_mel())
            else:
                todo.put(t2w.push_mel([] if codes is None else codes, final=kind == "final"))
        todo.join()
    finally:
        todo.put(None)
        th.join()
    assert not errors, errors


def _concurrently(streams, calls, split) -> list[list]:
    """Every stream driven by its own thread(s) at once; their outputs."""
    outs: list[list] = [[] for _ in streams]
    errors: list = []
    start = threading.Barrier(len(streams))

    def drive(i):
        try:
            start.wait(60)
            (_run_split if split[i] else _run)(streams[i], calls[i], outs[i])
        except Exception as e:
            errors.append(e)

    threads = [threading.Thread(target=drive, args=(i,)) for i in range(len(streams))]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors
    return outs


def _alone(tiny_dir, options, calls) -> list:
    """The stream's audio from a Token2Wav of its own, nothing else running."""
    out: list = []
    with omni.Token2Wav(tiny_dir, threads=THREADS, **options) as t2w:
        _run(t2w, calls, out)
    return out


def _assert_same(got: list, want: list, name: str) -> None:
    assert [a.size for a in got] == [a.size for a in want], name
    for i, (a, b) in enumerate(zip(got, want)):
        np.testing.assert_array_equal(a, b, err_msg=f"{name}, call {i}")


@pytest.mark.parametrize("n_streams", [2, 3])
@pytest.mark.parametrize("token2mel", ["graph", "native"])
@pytest.mark.parametrize("policy", ["llama.cpp-omni", "reference"])
def test_concurrent_streams_give_their_lone_audio(tiny_dir, n_streams, token2mel, policy):
    options = {"cache_policy": policy, "token2mel": token2mel}
    first = omni.Token2Wav(tiny_dir, threads=THREADS, **options)
    streams = [first] + [first.new_stream() for _ in range(n_streams - 1)]
    # Stream 1 resets in the middle; the last one (of 3) runs as two halves on two threads.
    calls = [_calls(k, reset=k == 1) for k in range(n_streams)]
    split = [k == 2 for k in range(n_streams)]
    for _ in range(2):  # twice: the second round starts from reset() on every stream
        got = _concurrently(streams, calls, split)
        for k in range(n_streams):
            _assert_same(got[k], _alone(tiny_dir, options, calls[k]), f"stream {k}")
        for s in streams:
            s.reset()


def test_streams_under_each_cpu_kernel_set(tiny_dir, cpu_isa):
    """The kernel set forced for the process (portable, AVX2, ...): two streams pushing at once
    still give exactly their lone audio."""
    first = omni.Token2Wav(tiny_dir, threads=THREADS)
    streams = [first, first.new_stream()]
    calls = [_calls(k, reset=False) for k in range(2)]
    got = _concurrently(streams, calls, [False, True])
    for k in range(2):
        _assert_same(got[k], _alone(tiny_dir, {}, calls[k]), f"stream {k}")


def _estimator_cache_bytes(model_dir, policy: str) -> int:
    """One copy of a stream's DiT caches on the device, from the prompt cache's shapes: K and V
    of every CFM step, block and head for the CFG pair, over the capacity the policy needs (the
    prompt's frames, + 100 recent ones under "reference", + two windows, rounded up to 16),
    plus the conv caches."""
    g = core.GgufFile(str(model_dir / "token2wav-gguf" / "prompt_cache.gguf"))
    batch, slabs, prompt, row = g.find_tensor("prompt_cache.estimator_att_cache").shape
    frames = prompt + 2 * 28 + (100 if policy == "reference" else 0)
    capacity = (frames + 15) // 16 * 16
    return 4 * (batch * slabs * capacity * row + int(np.prod(g.find_tensor("prompt_cache.estimator_cnn_cache").shape)))


@pytest.mark.parametrize("token2mel", ["native", "graph"])
@pytest.mark.parametrize("policy", ["llama.cpp-omni", "reference"])
def test_stream_holds_one_copy_of_the_estimator_caches(tiny_dir, policy, token2mel):
    # The caches are updated in place: one copy, where two ping-pong copies would make a stream
    # over twice this (real dimensions: docs/performance.md#many-streams-of-one-token2wav).
    one_copy = _estimator_cache_bytes(tiny_dir, policy)
    t2w = omni.Token2Wav(tiny_dir, threads=1, cache_policy=policy, token2mel=token2mel)
    s = t2w.new_stream()
    assert one_copy <= s.stream_bytes < 2 * one_copy
    t2w.push(np.arange(200, 300, dtype=np.int32))
    assert one_copy <= t2w.stream_bytes < 2 * one_copy


def test_new_stream_shares_weights_not_state(tiny_dir):
    t2w = omni.Token2Wav(tiny_dir, threads=1, cache_policy="reference", seed=7, first_window_codes=10)
    s = t2w.new_stream()
    assert (s.config, s.device, s.cache_policy, s.token2mel, s.threads) == (
        t2w.config,
        t2w.device,
        "reference",
        t2w.token2mel,
        1,
    )
    assert s.weight_bytes == t2w.weight_bytes > 0
    fresh = s.stream_bytes
    assert 0 < fresh < t2w.weight_bytes
    codes = np.arange(200, 300, dtype=np.int32)
    a = t2w.push(codes)  # the first stream's caches grow; the second's do not move
    assert s.stream_bytes == fresh
    assert t2w.stream_bytes > fresh  # the reference policy keeps recent frames beside the prompt's
    t2w.reset()
    assert t2w.stream_bytes == fresh
    # Closing the stream that loaded the weights leaves them loaded for the others.
    t2w.close()
    assert np.array_equal(s.push(codes), a)
    with pytest.raises(InvalidArgumentError, match="closed"):
        t2w.new_stream()


def test_vocode_refuses_another_streams_window(tiny_dir):
    t2w = omni.Token2Wav(tiny_dir, threads=1)
    other = t2w.new_stream()
    codes = np.arange(100, 130, dtype=np.int32)
    mine, theirs = t2w.push_mel(codes), other.push_mel(codes)
    assert len(mine) == len(theirs) == 1
    with pytest.raises(InvalidArgumentError, match="not a mel window of this stream"):
        t2w.vocode(theirs[0])  # same position in its stream, made by another one
    assert np.array_equal(t2w.vocode(mine[0]), other.vocode(theirs[0]))
