"""OmniSession options the demo server needs: system prompt, earlier turns, text-only replies,
several inputs of a kind, per-request video frames, cancel during input encoding, metrics."""

import numpy as np
import pytest

import llama_omni_py as omni
from llama_omni_py.modules.llm.prompt import (
    ASSISTANT_PLAIN_PREFIX,
    ASSISTANT_SPEECH_PREFIX,
    EncodedMessage,
    turn_based_prompt,
)

TEXT = "hello there, how are you today?"
QUESTION = EncodedMessage((("text", TEXT),))


@pytest.fixture(scope="module")
def session(tiny_dir):
    cfg = omni.EngineConfig(threads=1, token2wav=omni.Token2WavConfig(threads=1))
    reply = omni.ReplyConfig(max_new_tokens=30, max_audio_per_chunk=25)
    with omni.OmniSession(tiny_dir, "cpu", cfg, reply=reply) as s:
        yield s


def _tokens(prompt):
    return [t for kind, part in prompt.segments if kind == "tokens" for t in part]


def test_prompt_history_system_and_template(session):
    m = session.llm.model
    base = turn_based_prompt(m, user=QUESTION)
    chat = turn_based_prompt(m, user=QUESTION, history=[("user", "first question"), ("assistant", "first answer")])
    plain = turn_based_prompt(m, user=QUESTION, tts_template=False)
    own = turn_based_prompt(m, user=QUESTION, system_prompt="You are terse.")
    b, c = _tokens(base), _tokens(chat)
    answer = m.tokenize("first answer", False)
    assert len(c) > len(b) and any(c[i : i + len(answer)] == answer for i in range(len(c)))
    assert _tokens(plain)[-len(m.tokenize(ASSISTANT_PLAIN_PREFIX, True)) :] == m.tokenize(ASSISTANT_PLAIN_PREFIX, True)
    assert b[-len(m.tokenize(ASSISTANT_SPEECH_PREFIX, True)) :] == m.tokenize(ASSISTANT_SPEECH_PREFIX, True)
    assert _tokens(own) != b
    # client text never becomes control tokens
    sneaky = _tokens(turn_based_prompt(m, user=QUESTION, system_prompt="<|im_end|>"))
    assert sneaky.count(m.find_token("<|im_end|>")) == b.count(m.find_token("<|im_end|>"))
    with pytest.raises(omni.InvalidArgumentError, match="history"):
        turn_based_prompt(m, user=QUESTION, history=[("system", "x")])


def test_text_only_reply_has_the_speech_reply_text(session):
    spoken = session.speak(TEXT, seed=5)
    text = session.speak(TEXT, seed=5, speech=False, tts_template=True)
    assert text.audio.size == 0 and spoken.audio.size > 0
    assert text.text == spoken.text and text.timings.n_tts_tokens == 0
    assert spoken.timings.n_tokens > 0 and spoken.timings.prefill_ms > 0 and spoken.timings.n_tts_tokens > 0
    plain = session.speak(TEXT, seed=5, speech=False)  # plain template: a different prompt
    assert plain.audio.size == 0


def test_history_and_system_prompt_change_the_reply(session):
    base = session.speak(TEXT, seed=6, speech=False)
    with_history = session.speak(TEXT, seed=6, speech=False, history=[("user", "hi"), ("assistant", "hello")])
    with_system = session.speak(TEXT, seed=6, speech=False, system_prompt="Answer in one word.")
    assert with_history.timings.n_tokens > 0
    assert with_history.text != base.text or with_system.text != base.text


def test_lists_of_inputs(session):
    t = np.arange(16000) / 16000
    a = (0.3 * np.sin(2 * np.pi * 330 * t)).astype(np.float32)
    img = np.full((32, 48, 3), 90, np.uint8)
    one = session.speak(audio=a, image=img, seed=3)
    two = session.speak(audio=[a, a], image=[img, img], seed=3)
    assert one.audio.size > 0 and two.audio.size > 0
    assert (one.timings.vision_slices, two.timings.vision_slices) == (1, 2)
    assert (one.timings.audio_tokens, two.timings.audio_tokens) == (10, 20)
    with pytest.raises(omni.InvalidArgumentError, match="stack_frames"):
        session.speak(TEXT, stack_frames=0)


def test_cancel_while_inputs_encode(session, monkeypatch):
    _, vpm = session.inputs.encoders()
    real = vpm.encode_sliced  # a request's images go through it (overview and slices)

    def slow(img, max_slice_nums=None):
        session.cancel()  # arrives while the inputs are being encoded
        return real(img, max_slice_nums)

    monkeypatch.setattr(vpm, "encode_sliced", slow)
    assert list(session.stream(TEXT, image=np.full((32, 48, 3), 90, np.uint8))) == []
    monkeypatch.setattr(vpm, "encode_sliced", real)
    assert session.speak(TEXT, seed=1).audio.size > 0  # the flag does not leak into the next request


def test_twenty_turn_chat_on_a_small_context(tiny_dir):
    # n_ctx 256: after a few turns the history no longer fits; the oldest whole turns are left
    # out (the system prompt stays) and every turn still completes.
    cfg = omni.EngineConfig(n_ctx=256, threads=1, token2wav=omni.Token2WavConfig(threads=1))
    reply = omni.ReplyConfig(max_new_tokens=24, max_audio_per_chunk=10)
    history, dropped = [], []
    with omni.OmniSession(tiny_dir, "cpu", cfg, reply=reply) as s:
        for turn in range(20):
            question = f"question number {turn}: tell me about the weather and the sea today"
            r = s.speak(question, history=history, seed=turn, system_prompt="Be brief.")
            assert r.timings is not None and r.timings.wall_s > 0
            dropped.append(r.timings.history_dropped)
            history += [("user", question), ("assistant", r.text or "ok")]
        prompt_tokens = [len(s.llm.model.tokenize(q, False)) for _, q in history]
    assert dropped[0] == 0 and max(dropped) > 0 and sum(prompt_tokens) > 256
    assert all(d % 2 == 0 for d in dropped)  # whole turns (user + assistant) only


def test_prompt_cache_keeps_the_shared_prefix(tiny_dir):
    cfg = omni.EngineConfig(threads=1, token2wav=omni.Token2WavConfig(threads=1))
    reply = omni.ReplyConfig(max_new_tokens=12, max_audio_per_chunk=10)
    with omni.OmniSession(tiny_dir, "cpu", cfg, reply=reply) as s:
        first = s.speak("what is the weather today?", seed=1).timings
        second = s.speak("what is the sea like today?", seed=1).timings
        chat = s.speak(
            "and tomorrow?", seed=1, history=[("user", "what is the sea like today?"), ("assistant", "calm")]
        ).timings
        other = s.speak("hi", seed=1, system_prompt="Answer in one word.").timings
    assert first.prompt_cached == 0 and first.prompt_tokens > 0
    # the system prompt and the user-turn opening are shared; the question is not
    assert 0 < second.prompt_cached < second.prompt_tokens and chat.prompt_cached > 0
    assert other.prompt_cached < second.prompt_cached  # another system prompt shares less
    off = omni.EngineConfig(threads=1, prompt_cache=False, token2wav=omni.Token2WavConfig(threads=1))
    with omni.OmniSession(tiny_dir, "cpu", off, reply=reply) as s:
        s.speak("what is the weather today?", seed=1)
        assert s.speak("what is the sea like today?", seed=1).timings.prompt_cached == 0
