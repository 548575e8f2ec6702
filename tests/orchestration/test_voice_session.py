"""HandsFreeSession on the tiny set: spoken questions in, a reply per utterance, the conversation kept
in the LLM's KV cache across turns, and barge-in cutting a running reply."""

import threading

import numpy as np
import pytest
from speech import SR, conversation

import llama_omni_py as omni
from llama_omni_py.content import EncodedAudio
from llama_omni_py.errors import InvalidArgumentError
from llama_omni_py.voice import HandsFreeSession, ReplyInterrupted, SpeechStarted, SpeechStopped, VadOptions


@pytest.fixture(scope="module")
def session(tiny_dir):
    cfg = omni.EngineConfig(threads=1, token2wav=omni.Token2WavConfig(threads=1))
    with omni.OmniSession(tiny_dir, "cpu", cfg, reply=omni.ReplyConfig(max_new_tokens=30)) as s:
        yield s


@pytest.fixture(scope="module")
def talk():
    return conversation(["What is the capital of France?", "And how many people live there?"], pause_s=1.5)


def _utterances(voice, audio, piece=SR // 2):
    for i in range(0, audio.size, piece):
        for event in voice.push(audio[i : i + piece]):
            if isinstance(event, SpeechStopped):
                yield event


def test_turns_keep_the_conversation_in_the_kv_cache(session, talk):
    audio, spans = talk
    with session.hands_free(vad=VadOptions(min_silence_duration_ms=500)) as voice:
        assert isinstance(voice, HandsFreeSession)
        replies = []
        for utterance in _utterances(voice, audio):
            chunks = list(voice.respond(utterance))
            assert chunks[-1].is_final and chunks[-1].timings is not None
            assert sum(c.audio.size for c in chunks) > 0
            replies.append(chunks)
        assert len(replies) == len(spans) == len(voice.turns)
        first, second = voice.turns
        t1 = replies[0][-1].timings
        # turn 2 re-used everything of turn 1 up to where the assistant's reply began: the system
        # prompt and the first question's audio (the prompt cache keeps the KV cache's prefix)
        user1 = voice.history[0][1]
        assert isinstance(user1, EncodedAudio) and user1.embeddings.shape[0] > 5
        assert second.prompt_cached >= t1.prompt_tokens - 8
        assert second.prompt_cached > user1.embeddings.shape[0]
        assert [role for role, _ in voice.history] == ["user", "assistant"] * 2
        assert voice.history[1][1] == first.text and first.text == "".join(c.text_delta for c in replies[0])
        assert first.encode_ms > 0 and first.first_audio_s is not None


def test_a_new_utterance_during_a_reply_cuts_it(session, talk):
    audio, spans = talk
    voice = session.hands_free(max_new_tokens=400)
    first = next(_utterances(voice, audio[: int((spans[0].end_s + 1.2) * SR)]))
    got, done = [], threading.Event()

    def play():  # a slow listener: the reply is still running when the user speaks again
        for chunk in voice.respond(first):
            got.append(chunk)
            done.wait(0.2)
        done.set()

    t = threading.Thread(target=play)
    t.start()
    while not got and t.is_alive():
        done.wait(0.01)
    events = []
    rest = audio[int((spans[0].end_s + 1.2) * SR) :]
    for i in range(0, rest.size, SR // 10):
        events += voice.push(rest[i : i + SR // 10])
        if any(isinstance(e, ReplyInterrupted) for e in events):
            break
    t.join(60)
    assert not t.is_alive()
    kinds = [type(e) for e in events]
    assert ReplyInterrupted in kinds and kinds[kinds.index(ReplyInterrupted) - 1] is SpeechStarted
    assert not got[-1].is_final  # the reply never reached its end
    turn = voice.turns[-1]
    assert turn.interrupted and voice.history[-1] == ("assistant", turn.text)
    assert voice.last_interrupt.text_delivered == turn.text == "".join(c.text_delta for c in got)
    assert not voice.replying
    # the engine is free again: the next utterance gets its reply
    nxt = next(_utterances(voice, np.concatenate([rest[i:], np.zeros(SR, np.float32)])), None) or voice.flush()[0]
    assert list(voice.respond(nxt))[-1].is_final
    voice.close()


def test_text_turns_and_added_messages_join_the_conversation(session):
    voice = session.hands_free(max_new_tokens=10)
    voice.add("user", "My name is Ada.")
    voice.add("assistant", "Nice to meet you, Ada.")
    chunks = list(voice.respond("What is my name?", speech=False))
    assert chunks[-1].is_final and all(c.audio.size == 0 for c in chunks)  # text only, as asked
    assert [r for r, _ in voice.history] == ["user", "assistant", "user", "assistant"]
    assert voice.history[2] == ("user", "What is my name?") and voice.turns[0].speech is None
    again = list(voice.respond("And again?", speech=False))
    # the earlier messages and the first text turn are re-used from the KV cache
    assert voice.turns[1].prompt_cached >= chunks[-1].timings.prompt_tokens - 8 and again[-1].is_final
    with pytest.raises(InvalidArgumentError):
        voice.add("system", "no")


def test_bad_use_is_refused(session):
    with pytest.raises(InvalidArgumentError):
        session.hands_free(vad={"threshold": 0.5})
    voice = session.hands_free()
    with pytest.raises(InvalidArgumentError):
        list(voice.respond(42))
    with pytest.raises(InvalidArgumentError):
        voice.push(np.zeros((3, 3)))
    voice.close()
    with pytest.raises(InvalidArgumentError):
        voice.push(np.zeros(10, np.float32))


def test_the_conversation_stays_bounded(session):
    # A long conversation keeps only what a prompt could still hold: the newest 64 entries, and
    # no more audio than the LLM context; the oldest go a turn at a time.
    from llama_omni_py.voice.session import MAX_RECORDS_KEPT, MAX_TURNS_KEPT

    voice = HandsFreeSession(session, max_new_tokens=2)
    for i in range(100):
        voice.add("user", f"question {i}")
        voice.add("assistant", f"answer {i}")
    assert len(voice.history) == MAX_TURNS_KEPT and voice.history[0] == ("user", "question 68")
    width = session.encode_audio(np.zeros(SR, np.float32)).embeddings.shape[1]
    rows = np.zeros((session.engine_config.n_ctx * 3 // 8, width), np.float32)  # 3/8 of the context each
    for i in range(6):
        voice.add("user", EncodedAudio(rows))
        voice.add("assistant", f"heard {i}")
    audio = [c for _, c in voice.history if isinstance(c, EncodedAudio)]
    assert len(audio) == 3 and voice.history[0][0] == "user"  # the last 2 do not fill the context, 3 do
    assert voice.history[-1] == ("assistant", "heard 5")
    for _ in range(MAX_RECORDS_KEPT + 3):
        list(voice.respond("hi"))
    assert len(voice.turns) == MAX_RECORDS_KEPT and voice.turns[-1].index == MAX_RECORDS_KEPT + 3
