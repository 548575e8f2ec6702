"""The configuration's two parts: EngineConfig (what an engine loads) apart from ReplyConfig (how
a session replies)."""

from dataclasses import fields

import pytest

import llama_omni_py as omni
from llama_omni_py.errors import ConfigError


def test_the_two_parts_share_no_field():
    assert not {f.name for f in fields(omni.EngineConfig)} & {f.name for f in fields(omni.ReplyConfig)}


def test_resolved_values_come_from_the_part_that_holds_them():
    engine, reply = omni.EngineConfig(fidelity="reference", threads=1), omni.ReplyConfig()
    assert reply.tts_sampling(engine.fidelity) == omni.TtsSampling.reference()
    assert reply.prompt_rule(engine.fidelity) == "reference" and engine.token2wav_config.cache_policy == "reference"
    assert omni.ReplyConfig(prompt_fidelity="llama.cpp-omni").prompt_rule("reference") == "llama.cpp-omni"
    assert engine.llm_threads == 1 == engine.module_threads
    assert omni.EngineConfig().max_beams == 1


def test_channels_follow_the_environment_unless_given(monkeypatch):
    monkeypatch.setenv("OMNI_TTS_QUEUE", "7")
    assert omni.ReplyConfig().tts_queue == 7
    assert omni.ReplyConfig(tts_queue=3).tts_queue == 3
    monkeypatch.setenv("OMNI_TTS_QUEUE", "many")
    with pytest.raises(ConfigError, match="OMNI_TTS_QUEUE"):
        omni.ReplyConfig()


@pytest.mark.parametrize(
    "cls,field,value",
    [
        (omni.EngineConfig, "n_ctx", 10),
        (omni.EngineConfig, "fidelity", "mine"),
        (omni.EngineConfig, "max_beams", 9),
        (omni.EngineConfig, "vision", "all"),
        (omni.EngineConfig, "exact", 1),
        (omni.ReplyConfig, "system_prompt", 3),
        (omni.ReplyConfig, "llm", {"temperature": 1}),
        (omni.ReplyConfig, "seed", -2),
        (omni.ReplyConfig, "tts_handoff", "now"),
        (omni.ReplyConfig, "prompt_fidelity", "mine"),
    ],
)
def test_each_part_names_its_bad_field(cls, field, value):
    with pytest.raises(ConfigError) as e:
        cls(**{field: value})
    assert e.value.field == field


def test_replies_an_engine_cannot_hold_are_refused_by_name():
    engine = omni.EngineConfig(n_ctx=512, tts_ctx=256)
    omni.ReplyConfig(max_new_tokens=512, max_audio_per_chunk=240).check_fits(engine)
    for reply, field in (
        (omni.ReplyConfig(max_new_tokens=513), "max_new_tokens"),
        (omni.ReplyConfig(max_audio_per_chunk=241), "tts_ctx"),
        (omni.ReplyConfig(max_audio_per_chunk=240, llm=omni.LlmSampling(num_beams=2)), "max_beams"),
    ):
        with pytest.raises(ConfigError) as e:
            reply.check_fits(engine)
        assert e.value.field == field


def test_a_long_clip_follows_the_fidelity_unless_audio_mode_says():
    assert omni.EngineConfig().audio_mode_rule == "clamp"  # llama.cpp-omni keeps the first 29.9 s
    assert omni.EngineConfig(fidelity="reference").audio_mode_rule == "window"  # the reference: 30 s chunks
    assert omni.EngineConfig(fidelity="reference", audio_mode="clamp").audio_mode_rule == "clamp"
    assert omni.EngineConfig(audio_mode="window").audio_mode_rule == "window"
