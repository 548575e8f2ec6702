"""OmniEngine: N session slots over one loaded module set (docs/slots.md). Replies of concurrent
slots equal a lone session's with the same seed (batch_invariant: bit for bit)."""

import numpy as np
import pytest
from threads import in_threads

import llama_omni_py as omni
from llama_omni_py.modelset.random_set import random_set_config

QUESTIONS = ["Hello there.", "What is the weather like?", "Tell me a story about a fox."]


def _config(**kw):
    """OmniSession's and OmniEngine's config= and reply=: the random set's short replies."""
    engine, reply = random_set_config(omni.EngineConfig(**kw), max_new_tokens=24)
    return {"config": engine, "reply": reply}


def _reply(session, k):
    r = session.speak(QUESTIONS[k], seed=100 + k)
    return r.text, r.audio


@pytest.fixture(scope="module")
def lone_replies(tiny_dir):
    with omni.OmniSession(tiny_dir, "cpu", **_config(batch_invariant=True)) as s:
        return [_reply(s, k) for k in range(3)]


def test_concurrent_slots_reply_as_lone_sessions_bit_for_bit(tiny_dir, lone_replies):
    with omni.OmniEngine(tiny_dir, "cpu", slots=3, **_config(batch_invariant=True)) as engine:
        sessions = [engine.session() for _ in range(3)]
        got = in_threads(lambda k: _reply(sessions[k], k), 3)
        for k in range(3):
            assert got[k][0] == lone_replies[k][0]
            np.testing.assert_array_equal(got[k][1], lone_replies[k][1])
        for s in sessions:
            s.close()
        assert engine.free_slots == 3


def test_batched_slots_run_together_and_speak(tiny_dir):
    with omni.OmniEngine(tiny_dir, "cpu", slots=2, **_config()) as engine:
        engine.modules.llm.scheduler._gather_s = 1.0  # every generating slot is waited for
        a, b = engine.session(), engine.session()
        got = in_threads(lambda k: (a, b)[k].speak(QUESTIONS[k], seed=7), 2)
        for r in got:
            assert r.audio.size > 0 and r.timings.n_tokens > 0
        assert engine.scheduler_stats["llm_mean_batch"] > 1.0  # the two replies' steps ran together


def test_slots_are_claimed_refused_and_given_back(tiny_dir):
    with omni.OmniEngine(tiny_dir, "cpu", slots=2, **_config()) as engine:
        a, b = engine.session(), engine.session()
        assert (engine.busy_slots, engine.free_slots) == (2, 0)
        with pytest.raises(omni.SlotsBusyError, match="all 2 session slots"):
            engine.session()
        a.close()
        c = engine.session()  # the freed slot, emptied: it answers as a fresh session would
        assert c.slot == a.slot
        first = c.speak(QUESTIONS[0], seed=5)
        c.close()
        d = engine.session()
        again = d.speak(QUESTIONS[0], seed=5)
        assert again.text == first.text
        d.close()
        b.close()
        mem = engine.memory()
        assert mem["llm_kv_per_slot"] > 0 and mem["tts_kv_per_slot"] > 0 and mem["token2wav_state_per_slot"] > 0
        assert mem["llm_weights"] > 0 and mem["tts_weights"] > 0 and mem["token2wav_weights"] > 0


def test_engine_arguments_are_checked(tiny_dir):
    with pytest.raises(omni.ConfigError, match="slots"):
        omni.OmniEngine(tiny_dir, "cpu", slots=0)
    with pytest.raises(omni.ConfigError, match="batch_invariant"):
        omni.EngineConfig(batch_invariant="yes")
    with pytest.raises(omni.ConfigError, match="prefill_chunk"):
        omni.EngineConfig(prefill_chunk=0)


def test_duplex_sessions_on_two_slots_equal_lone_ones(tiny_dir):
    rng = np.random.default_rng(1)
    units = [[(rng.standard_normal(16000) * 0.1).astype(np.float32) for _ in range(6)] for _ in range(2)]
    cfg = omni.DuplexConfig(force_listen_count=1, seed=9)

    def run(session, k):
        with session.duplex(config=cfg) as d:
            out = [d.push(u) for u in units[k]]
        return [r.text for r in out], np.concatenate([r.audio for r in out] + [np.zeros(0, np.float32)])

    with omni.OmniSession(tiny_dir, "cpu", **_config(batch_invariant=True)) as s:
        lone = [run(s, k) for k in range(2)]
    with omni.OmniEngine(tiny_dir, "cpu", slots=2, **_config(batch_invariant=True)) as engine:
        sessions = [engine.session() for _ in range(2)]
        got = in_threads(lambda k: run(sessions[k], k), 2)
    for k in range(2):
        assert got[k][0] == lone[k][0]
        np.testing.assert_array_equal(got[k][1], lone[k][1])
