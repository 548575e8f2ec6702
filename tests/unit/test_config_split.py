"""The configuration split: EngineConfig (what an engine loads) apart from ReplyConfig (how a
session replies), and SessionConfig, both in one object for one release."""

from dataclasses import fields, replace

import pytest

import llama_omni_py as omni
from llama_omni_py.config import ENGINE_FIELDS, REPLY_FIELDS
from llama_omni_py.errors import ConfigError


def test_session_config_is_the_two_parts_in_one():
    assert [f.name for f in fields(omni.SessionConfig)] == [*ENGINE_FIELDS, *REPLY_FIELDS]
    assert not set(ENGINE_FIELDS) & set(REPLY_FIELDS)
    engine, reply = omni.SessionConfig().split()
    assert engine == omni.EngineConfig() and reply == omni.ReplyConfig()
    c = omni.SessionConfig(n_ctx=4096, fidelity="reference", max_new_tokens=99, system_prompt="Be brief.", seed=-1)
    engine, reply = c.split()
    assert (engine.n_ctx, engine.fidelity) == (4096, "reference")
    assert (reply.max_new_tokens, reply.system_prompt, reply.seed) == (99, "Be brief.", -1)
    assert omni.SessionConfig.of(engine, reply) == c and c.engine_config is engine and c.reply_config is reply


def test_resolved_values_come_from_the_part_that_holds_them():
    c = omni.SessionConfig(fidelity="reference", threads=1)
    assert c.tts_sampling == omni.TtsSampling.reference() == c.reply_config.tts_sampling("reference")
    assert c.prompt_rule == "reference" and c.token2wav_config.cache_policy == "reference"
    assert omni.ReplyConfig(prompt_fidelity="llama.cpp-omni").prompt_rule("reference") == "llama.cpp-omni"
    assert c.llm_threads == 1 == c.engine_config.module_threads
    assert omni.SessionConfig(llm=omni.LlmSampling(num_beams=3)).max_beams == 3  # None: llm.num_beams
    assert omni.EngineConfig().max_beams == 1


def test_channels_follow_the_environment_unless_given(monkeypatch):
    monkeypatch.setenv("OMNI_TTS_QUEUE", "7")
    assert omni.ReplyConfig().tts_queue == 7 and omni.SessionConfig().tts_queue == 7
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
    with pytest.raises(ConfigError) as e:  # the combined form checks the same at construction
        omni.SessionConfig(n_ctx=512, max_new_tokens=513)
    assert e.value.field == "max_new_tokens"


def test_the_combined_form_replaces_like_a_dataclass():
    c = replace(omni.SessionConfig(), max_new_tokens=5, exact=True)
    assert c.split()[0].exact and c.split()[1].max_new_tokens == 5
