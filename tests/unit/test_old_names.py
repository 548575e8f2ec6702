"""Old names kept for one release (docs/architecture.md#names): each still works and warns with a
DeprecationWarning naming the new one; giving an old and a new name at once is refused. The old
names that need the compiled core are tested in orchestration/ and worker/."""

import argparse

import pytest

import llama_omni_py as omni
from llama_omni_py.bench import arguments
from llama_omni_py.deprecation import renamed_kwargs
from llama_omni_py.errors import InvalidArgumentError


def test_token2wav_config_engine_is_token2mel():
    with pytest.warns(DeprecationWarning, match="token2mel"):
        old = omni.Token2WavConfig(engine="graph")
    assert old == omni.Token2WavConfig(token2mel="graph")
    with pytest.warns(DeprecationWarning, match=r"Token2WavConfig\.token2mel"):
        assert old.engine == "graph"
    with pytest.raises(InvalidArgumentError, match="token2mel"):
        omni.Token2WavConfig(engine="graph", token2mel="native")


def test_voice_session_is_the_hands_free_session():
    import llama_omni_py.voice as voice

    with pytest.warns(DeprecationWarning, match="HandsFreeSession"):
        old = voice.VoiceSession
    assert old is voice.HandsFreeSession
    with pytest.raises(AttributeError):
        voice.NoSuchThing  # noqa: B018


def test_simplex_speech_prompt_is_the_turn_based_prompt():
    from llama_omni_py.modules.llm import prompt

    with pytest.warns(DeprecationWarning, match="turn_based_prompt"):
        assert prompt.simplex_speech_prompt is prompt.turn_based_prompt


def test_server_config_is_the_worker_config():
    import llama_omni_py.server as server

    with pytest.warns(DeprecationWarning, match="WorkerConfig"):
        old = server.ServerConfig
    assert old is server.WorkerConfig
    assert server.WorkerConfig(slots=2).slots == 2


def test_bench_flags_and_mode_take_their_old_spelling():
    parser = argparse.ArgumentParser()
    arguments.add_arguments(parser)
    with pytest.warns(DeprecationWarning, match="--token2mel"):
        a = parser.parse_args(["--t2w-engine", "graph", "--mode", "simplex"])
    assert a.token2mel == "graph"
    with pytest.warns(DeprecationWarning, match="turn_based"):
        assert arguments.bench_mode(a.mode) == "turn_based"
    assert arguments.bench_mode("duplex") == "duplex"


def test_renamed_keywords_warn_and_refuse_both_names():
    @renamed_kwargs(voice="ref_audio")
    def speak(text, ref_audio=None):
        return text, ref_audio

    with pytest.warns(DeprecationWarning, match="ref_audio="):
        assert speak("hi", voice="me.wav") == ("hi", "me.wav")
    with pytest.raises(InvalidArgumentError, match="ref_audio"):
        speak("hi", voice="a.wav", ref_audio="b.wav")
