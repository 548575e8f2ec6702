"""Beam search (LlmSampling(num_beams=N), beam_search.py, docs/speech-path.md#beam-search): the
search over an engine slot's KV sequences equals transformers' rules restated plainly below, run
on the same tiny LLM's logits for every prefix from a separate one-sequence context."""

import numpy as np
import pytest
from threads import in_threads

import llama_omni_py as omni
from llama_omni_py._native import core
from llama_omni_py.config import EngineConfig, LlmSampling, ReplyConfig
from llama_omni_py.errors import ConfigError, InvalidArgumentError
from llama_omni_py.modelset.layout import discover
from llama_omni_py.modelset.random_set import random_set_config
from llama_omni_py.modules.llm.beam_search import BeamSearch, place, search
from llama_omni_py.modules.llm.context import LlmContext
from llama_omni_py.modules.llm.model import LanguageModel
from llama_omni_py.modules.llm.prompt import Prompt, SpecialTokens
from llama_omni_py.orchestration.inputs import Request
from llama_omni_py.orchestration.turn_based import fitting_prompt

N_CTX = 512
NEG = np.float32(-1e9)


def _prompt(k: int) -> list[int]:
    return [(i * 37 + 11 * k) % 300 + 10 for i in range(20 + 7 * k)]


# -- transformers' beam search, restated ----------------------------------------------------------
class PrefixLogits:
    """Next-token logits after the prompt and a beam's tokens, from a context of its own: the
    prompt once, then each prefix's tokens one decode at a time from the prompt."""

    def __init__(self, model, prompt: list[int], exact: bool, segments: tuple = ()):
        self.llm = core.Llm(model, N_CTX, 512, 1, exact)
        for part in segments or [prompt]:  # a session evaluates its prompt a segment at a time
            self.llm.eval_tokens(part)
        self.n_prompt = self.llm.n_past
        self.cache = {(): np.array(self.llm.logits(), np.float32)}

    def __call__(self, tokens: tuple) -> np.ndarray:
        if tokens not in self.cache:
            self.llm.keep(self.n_prompt)
            for t in tokens:
                self.llm.eval_tokens([t])
            self.cache[tokens] = np.array(self.llm.logits(), np.float32)
        return self.cache[tokens]


def plain_beam_search(logits_of, num_beams, eos, max_new, penalty=1.0, length_penalty=1.0, early_stopping=False):
    """transformers 4.52 _beam_search for one prompt given as inputs_embeds (no prompt ids: the
    penalty and the lengths count generated tokens only). Returns the finished hypotheses, best
    first, as (score, tokens)."""
    f32 = np.float32
    n_keep = max(2, 1 + len(eos)) * num_beams
    running = [((), f32(0.0))] + [((), NEG)] * (num_beams - 1)  # only the first beam is live
    finished = [(NEG, None)] * num_beams  # (score, tokens); None: an empty place
    for cur_len in range(max_new):
        candidates = []
        for b, (tokens, score) in enumerate(running):
            x = logits_of(tokens).astype(f32)
            lp = x - x.max()
            lp = lp - np.log(np.exp(lp).sum())
            for t in set(tokens):  # each generated token once, on the log-probability
                lp[t] = lp[t] * f32(penalty) if lp[t] < 0 else lp[t] / f32(penalty)
            for v in range(lp.size):
                candidates.append((f32(lp[v] + score), b * lp.size + v, tokens + (v,)))
        candidates.sort(key=lambda c: (-c[0], c[1]))
        candidates = candidates[:n_keep]
        stopped = [c[2][-1] in eos or cur_len + 1 >= max_new for c in candidates]
        # the next running beams: the best candidates that did not stop (stopped ones sink by 1e9)
        live = [(f32(c[0] + NEG) if s else c[0], i, c[2]) for i, (c, s) in enumerate(zip(candidates, stopped))]
        live.sort(key=lambda c: (-c[0], c[1]))
        running = [(c[2], c[0]) for c in live[:num_beams]]
        # the finished set: only the first num_beams candidates may enter, scored per length
        full = all(t is not None for _, t in finished)
        entries = list(finished)
        for i, (c, s) in enumerate(zip(candidates, stopped)):
            score = f32(c[0] / f32((cur_len + 1) ** length_penalty))
            if full and early_stopping is True:
                score = f32(score + NEG)
            ok = s and i < num_beams
            entries.append((score if ok else f32(score + NEG), c[2] if ok else None))
        order = sorted(range(len(entries)), key=lambda i: (-entries[i][0], i))
        finished = [entries[i] for i in order[:num_beams]]
        # go on while a candidate did not stop and, once every place is filled, the best running
        # beam (per its length so far) beats the worst finished one
        if all(stopped):
            break
        places_full = all(t is not None for _, t in finished)
        if places_full and early_stopping is True:
            break
        length = max_new if early_stopping == "never" and length_penalty > 0 else cur_len + 1
        if places_full and not running[0][1] / f32(length**length_penalty) > min(s for s, _ in finished):
            break
    return [(float(s), t) for s, t in finished if t is not None]


# -- fixtures -------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def model(tiny_dir):
    return core.LlmModel(str(discover(tiny_dir).llm), "cpu")


@pytest.fixture(scope="module")
def eos(model):
    return SpecialTokens.resolve(model).reference_eos


def _engine_search(tiny_dir, prompt, rules, slots=1, slot=0, **kw):
    ctx = LlmContext(discover(tiny_dir).llm, "cpu", N_CTX, 1, slots=slots, beams=rules.num_beams, **kw)
    lm = LanguageModel.slot(ctx, slot, prompt_cache=False)
    lm.prefill(Prompt([("tokens", prompt)]))
    return search(lm.llm, lm.llm.logits(), rules), rules


CASES = [  # prompt, beams, max_new_tokens, repetition penalty
    (0, 2, 12, 1.0),
    (1, 3, 12, 1.2),
    (2, 3, 20, 1.2),
    (3, 2, 16, 1.2),
]


@pytest.mark.parametrize("k,beams,max_new,penalty", CASES)
def test_engine_beams_equal_the_restated_search(tiny_dir, model, eos, k, beams, max_new, penalty):
    plain = plain_beam_search(PrefixLogits(model, _prompt(k), False), beams, eos, max_new, penalty)
    rules = BeamSearch(beams, eos, max_new, penalty)
    found, rules = _engine_search(tiny_dir, _prompt(k), rules, batch_invariant=True)
    assert [t for _, t in plain] == rules.finished  # every finished hypothesis, in order
    np.testing.assert_allclose(rules.finished_scores, [s for s, _ in plain], rtol=1e-6)
    assert found.best.tokens == plain[0][1]


def test_a_search_that_ends_on_max_new_tokens(tiny_dir, model, eos):
    plain = plain_beam_search(PrefixLogits(model, _prompt(1), False), 3, eos, 12, 1.2)
    assert len(plain[0][1]) == 12 and plain[0][1][-1] not in eos  # the case this test is for
    found, _ = _engine_search(tiny_dir, _prompt(1), BeamSearch(3, eos, 12, 1.2), batch_invariant=True)
    assert found.best.tokens == plain[0][1]
    assert found.steps == 11  # the last token is chosen, never evaluated


def test_a_search_that_eos_wins(tiny_dir, model, eos):
    k, beams, max_new = 23, 3, 30
    plain = plain_beam_search(PrefixLogits(model, _prompt(k), False), beams, eos, max_new, 1.2)
    assert plain[0][1][-1] in eos and len(plain[0][1]) < max_new  # the case this test is for
    found, rules = _engine_search(tiny_dir, _prompt(k), BeamSearch(beams, eos, max_new, 1.2), batch_invariant=True)
    assert found.best.tokens == plain[0][1]
    assert rules.finished == [t for _, t in plain]


def test_batched_beam_steps_give_the_same_beams(tiny_dir, model, eos):
    """Without batch_invariant the beams' steps share one llama_decode: logits within F16
    rounding of the lone ones (docs/slots.md), the same beams here."""
    plain = plain_beam_search(PrefixLogits(model, _prompt(2), False), 3, eos, 20, 1.2)
    found, rules = _engine_search(tiny_dir, _prompt(2), BeamSearch(3, eos, 20, 1.2))
    assert rules.finished == [t for _, t in plain]
    np.testing.assert_allclose(rules.finished_scores, [s for s, _ in plain], rtol=2e-3)
    assert found.copies > 0  # beams did take over each other's places


def test_early_stopping_and_length_penalty_follow_the_rules(tiny_dir, model, eos):
    logits = PrefixLogits(model, _prompt(23), False)
    for early, lp in ((True, 1.0), ("never", 1.0), (False, 0.5), (False, -1.0)):
        plain = plain_beam_search(logits, 3, eos, 30, 1.2, lp, early)
        _, rules = _engine_search(tiny_dir, _prompt(23), BeamSearch(3, eos, 30, 1.2, lp, early), batch_invariant=True)
        assert rules.finished == [t for _, t in plain], (early, lp)


@pytest.fixture(scope="module")
def f32_llm(tmp_path_factory):
    d = tmp_path_factory.mktemp("f32")
    omni.make_models(d, "tiny", only=["llm"], llm_dtype="f32")
    return str(d / "MiniCPM-o-4_5-F32.gguf")


@pytest.mark.parametrize("k,beams,max_new", [(0, 2, 12), (2, 3, 20), (23, 3, 30)])
def test_beams_equal_transformers_generate(f32_llm, k, beams, max_new):
    """transformers' own generate(inputs_embeds=..., num_beams, do_sample=False,
    repetition_penalty=1.2) on the same F32 weights (tests/support/reference/llm.py), as MiniCPM-o's
    chat() calls it: the same best beam, ended by max_new_tokens (k 0, 2) or by EOS (k 23)."""
    import torch
    from reference import llm as ref

    model = core.LlmModel(f32_llm, "cpu")
    eos = SpecialTokens.resolve(model).reference_eos
    rows = np.array(core.GgufFile(f32_llm).read("token_embd.weight"))[_prompt(k)].astype(np.float32)
    with torch.inference_mode():
        out = ref.build_qwen3(f32_llm).generate(
            inputs_embeds=torch.from_numpy(rows[None]),
            attention_mask=torch.ones(1, len(rows), dtype=torch.long),
            pad_token_id=0,
            eos_token_id=sorted(eos),
            num_beams=beams,
            do_sample=False,
            repetition_penalty=1.2,
            max_new_tokens=max_new,
            return_dict_in_generate=True,
            output_scores=True,
        )
    ctx = LlmContext(f32_llm, "cpu", N_CTX, 1, exact=True, beams=beams, batch_invariant=True)
    lm = LanguageModel.slot(ctx, 0, prompt_cache=False)
    lm.prefill(Prompt([("embeddings", rows)]))
    found = search(lm.llm, lm.llm.logits(), BeamSearch(beams, eos, max_new, 1.2))
    assert list(found.best.tokens) == out.sequences[0].tolist()
    assert found.best.score == pytest.approx(float(out.sequences_scores[0]), rel=1e-5)
    assert (found.best.tokens[-1] in eos) == (k == 23)


def test_a_cancelled_search_stops_and_yields_nothing(tiny_dir, eos):
    ctx = LlmContext(discover(tiny_dir).llm, "cpu", N_CTX, 1, beams=3)
    lm = LanguageModel.slot(ctx, 0, prompt_cache=False)
    asked = []

    def cancelled():
        asked.append(1)
        return len(asked) >= 3  # after two decode rounds

    beams = LlmSampling.reference_beam_search()
    assert list(lm.chunks(Prompt([("tokens", _prompt(0))]), beams, 0, 40, cancelled=cancelled)) == []
    assert len(asked) == 3
    (chunk,) = lm.chunks(Prompt([("tokens", _prompt(0))]), beams, 0, 40)  # the slot goes on
    assert chunk.final and chunk.text and chunk.stats.beam_steps > 0


def test_copy_seq_gives_the_destination_the_sources_kv_and_position(model):
    llm = core.Llm(model, N_CTX, 512, 1, n_seq=3)
    llm.eval_tokens(_prompt(0), seq=0)
    llm.eval_tokens(_prompt(1), seq=2)  # overwritten whole by the copy
    llm.copy_seq(0, 1)
    llm.copy_seq(0, 2)
    assert [llm.n_past_of(s) for s in range(3)] == [len(_prompt(0))] * 3
    for s in (1, 2):
        with pytest.raises(InvalidArgumentError, match="no outputs"):
            llm.logits(-1, s)  # nothing evaluated since the copy
    lone = core.Llm(model, N_CTX, 512, 1)
    lone.eval_tokens(_prompt(0))
    lone.eval_tokens([42])
    for s in range(3):  # one at a time: each step as a lone context's
        llm.decode_many([s], [42])
        np.testing.assert_array_equal(llm.logits(-1, s), lone.logits())
    with pytest.raises(InvalidArgumentError, match="same sequence"):
        llm.copy_seq(1, 1)
    with pytest.raises(InvalidArgumentError, match="outside"):
        llm.copy_seq(0, 3)


# -- the rules on their own -------------------------------------------------------------------------
def test_the_penalty_scales_each_generated_token_once_without_renormalising():
    rules = BeamSearch(2, frozenset({0}), 10, repetition_penalty=1.5)
    rules.running = [[3, 3, 5], [4]]
    rules.running_scores = np.zeros(2, np.float32)
    logits = np.log(np.array([[0.1, 0.2, 0.3, 0.25, 0.05, 0.1]] * 2, np.float32))
    got = rules._scores(logits)
    want = np.log(np.array([0.1, 0.2, 0.3, 0.25, 0.05, 0.1], np.float32) / 1.0)
    want = want - np.log(np.exp(want).sum())
    for b, tokens in enumerate(([3, 5], [4])):
        expect = want.copy()
        expect[tokens] *= 1.5  # log-probabilities are negative: more negative, once per token
        np.testing.assert_allclose(got[b], expect, rtol=1e-6)
    assert np.exp(got[0]).sum() < 1.0  # not renormalised


def test_beams_go_on_when_stop_tokens_crowd_the_candidates():
    """(1 + stop tokens) * num_beams candidates per step: when three of the four best stop (two
    stop tokens), the fifth still goes on as the second running beam."""
    rules = BeamSearch(2, frozenset({0, 1}), 10)
    rules.advance(np.array([[0.0, 0.0, 5.0, 4.0, 1.0, 0.0]] * 2, np.float32))
    assert rules.running == [[2], [3]] and not rules.is_finished.any()
    step = np.array([[8.0, 8.0, 0.0, 0.0, 9.0, 0.0], [8.5, 0.0, 0.0, 0.0, 0.0, 2.0]], np.float32)
    parents = rules.advance(step)
    assert rules.finished[0] == (3, 0) and rules.is_finished.sum() == 1  # one place filled: go on
    assert not rules.done
    assert rules.running == [[2, 4], [3, 5]] and parents == [0, 1]
    assert rules.running_scores.min() > -100  # a live beam, not a stopped one at -1e9


def test_the_penalty_changes_the_reply(tiny_dir, model, eos):
    logits = PrefixLogits(model, _prompt(2), False)
    with_penalty = plain_beam_search(logits, 3, eos, 20, 1.2)[0][1]
    without = plain_beam_search(logits, 3, eos, 20, 1.0)[0][1]
    assert with_penalty != without
    assert len(set(with_penalty)) >= len(set(without))  # it discourages repeats
    for penalty, want in ((1.2, with_penalty), (1.0, without)):
        found, _ = _engine_search(tiny_dir, _prompt(2), BeamSearch(3, eos, 20, penalty), batch_invariant=True)
        assert found.best.tokens == want


def test_place_keeps_a_parents_sequence_for_its_first_child():
    seqs = [0, 4, 5]
    placed, copies = place([1, 1, 0], [0, 4, 5], seqs)
    assert placed == [4, 5, 0] and copies == [(4, 5)]  # beam 2 had no child: its place is free
    placed, copies = place([0, 0, 0], [0, 0, 0], seqs)  # the first step: every beam is the prompt
    assert placed == [0, 4, 5] and copies == [(0, 4), (0, 5)]
    placed, copies = place([2, 0, 1], [0, 4, 5], seqs)
    assert placed == [5, 0, 4] and copies == []


# -- sessions and engines -------------------------------------------------------------------------
QUESTIONS = ["Which letter is right?", "Hello there.", "Tell me a story about a fox."]


def _config(**kw):
    """OmniSession's and OmniEngine's config= and reply=: the random set's short replies."""
    engine, reply = random_set_config(EngineConfig(**kw), max_new_tokens=24)
    return {"config": engine, "reply": reply}


def _plain_reply_text(model, segments, beams, max_new, penalty):
    sp = SpecialTokens.resolve(model)
    logits = PrefixLogits(model, [], False, segments)
    best = plain_beam_search(logits, beams, sp.reference_eos, max_new, penalty)[0][1]
    tokens = list(best[:-1] if best[-1] in sp.reference_eos else best)
    if sp.tts_eos in tokens:
        tokens = tokens[: tokens.index(sp.tts_eos)]
    return model.detokenize([t for t in tokens if sp.speaks(t)]) if tokens else ""


def test_speak_returns_the_best_beams_text(tiny_dir, model):
    beams = LlmSampling.reference_beam_search()
    config = _config(max_beams=3, batch_invariant=True, prompt_cache=False)
    with omni.OmniSession(tiny_dir, "cpu", **config) as s:
        r = s.speak(QUESTIONS[0], speech=False, llm=beams, max_new_tokens=16)
        request = Request.of(QUESTIONS[0], speech=False, tts_template=False, seed=0)
        prompt, _ = fitting_prompt(
            s.stages, request, s.stages.inputs.encode(request), 16, s.reply.prompt_rule(s.engine_config.fidelity)
        )
    assert {kind for kind, _ in prompt.segments} == {"tokens"}
    want = _plain_reply_text(model, [[int(t) for t in part] for _, part in prompt.segments], 3, 16, 1.2)
    assert r.text == want and r.audio.size == 0
    assert r.timings.n_tokens > 0 and r.timings.prefill_ms > 0
    assert r.timings.beam_steps > 0 and r.timings.beam_score < 0


def test_bad_beam_values_are_refused_by_name(tiny_dir):
    for bad in (0, 9, 1.5, True, "3"):
        with pytest.raises(ConfigError, match="num_beams"):
            LlmSampling(num_beams=bad)
    with pytest.raises(ConfigError, match="length_penalty"):
        LlmSampling(num_beams=3, length_penalty="long")
    for bad in (1, "always", None):
        with pytest.raises(ConfigError, match="early_stopping"):
            LlmSampling(num_beams=3, early_stopping=bad)
    for bad in (0, 9):
        with pytest.raises(ConfigError, match="max_beams"):
            EngineConfig(max_beams=bad)
    with pytest.raises(ConfigError, match="max_beams"):
        ReplyConfig(llm=LlmSampling(num_beams=3)).check_fits(EngineConfig(max_beams=2))
    ReplyConfig(llm=LlmSampling(num_beams=3)).check_fits(EngineConfig(max_beams=3))
    with omni.OmniSession(tiny_dir, "cpu", **_config()) as s:  # one KV sequence per slot
        with pytest.raises(InvalidArgumentError, match="max_beams=3"):
            s.speak("Hi.", speech=False, llm=LlmSampling(num_beams=3))
        with pytest.raises(InvalidArgumentError, match="speech=False"):
            s.speak("Hi.", llm=LlmSampling(num_beams=2))
        assert s.speak("Hi.", speech=False).text  # the session goes on


def test_other_slots_reply_as_alone_while_one_beam_searches(tiny_dir):
    beams = LlmSampling.reference_beam_search()
    config = _config(max_beams=3, batch_invariant=True, prompt_cache=False)

    def beam_reply(session):
        return session.speak(QUESTIONS[0], speech=False, llm=beams, max_new_tokens=20).text

    def spoken_reply(session):
        r = session.speak(QUESTIONS[2], seed=5)
        return r.text, r.audio

    with omni.OmniSession(tiny_dir, "cpu", **config) as alone:
        want_beams, want_spoken = beam_reply(alone), spoken_reply(alone)
    with omni.OmniEngine(tiny_dir, "cpu", slots=2, **config) as engine:
        a, b = engine.session(), engine.session()
        got = in_threads(lambda k: beam_reply(a) if k == 0 else spoken_reply(b), 2)
        assert got[0] == want_beams
        assert got[1][0] == want_spoken[0]
        np.testing.assert_array_equal(got[1][1], want_spoken[1])
        # the searching slot serves a sampled reply next, as a fresh slot would
        again = spoken_reply(a)
        assert again[0] == want_spoken[0]


class _BatchSizes:
    """The native context, recording how many sequences each decode_many evaluated."""

    def __init__(self, native):
        self._native, self.sizes = native, []

    def decode_many(self, seqs, tokens):
        self.sizes.append(len(seqs))
        return self._native.decode_many(seqs, tokens)

    def __getattr__(self, name):
        return getattr(self._native, name)


def test_beam_steps_share_batches_with_other_slots(tiny_dir):
    beams, greedy = LlmSampling.reference_beam_search(), LlmSampling(temperature=0.0)
    config = _config(max_beams=3, prompt_cache=False)

    def beam_reply(session):
        return session.speak(QUESTIONS[0], speech=False, llm=beams, max_new_tokens=20).text

    def greedy_reply(session):
        return session.speak(QUESTIONS[1], speech=False, llm=greedy, max_new_tokens=20).text

    with omni.OmniSession(tiny_dir, "cpu", **config) as alone:
        want = beam_reply(alone), greedy_reply(alone)
    with omni.OmniEngine(tiny_dir, "cpu", slots=2, **config) as engine:
        scheduler = engine.modules.llm.scheduler
        scheduler._gather_s = 1.0  # every generating slot is waited for
        scheduler._native = recorder = _BatchSizes(scheduler._native)
        a, b = engine.session(), engine.session()
        got = in_threads(lambda k: beam_reply(a) if k == 0 else greedy_reply(b), 2)
    assert 4 in recorder.sizes  # three beams and the other slot's step in one llama_decode
    assert tuple(got) == want
