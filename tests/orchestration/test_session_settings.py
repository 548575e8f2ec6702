"""Each session of an engine replies its own way (its ReplyConfig: system prompt, reference audio,
sampling, limits) over one loaded module set."""

import numpy as np
import pytest

import llama_omni_py as omni
from llama_omni_py.errors import ConfigError, InvalidArgumentError
from llama_omni_py.orchestration.inputs import Request, build_prompt

ENGINE = omni.EngineConfig(threads=1, token2wav=omni.Token2WavConfig(threads=1), prompt_cache=False)
REPLY = omni.ReplyConfig(max_new_tokens=8, max_audio_per_chunk=25)


@pytest.fixture(scope="module")
def engine(tiny_dir):
    with omni.OmniEngine(tiny_dir, "cpu", slots=2, config=ENGINE, reply=REPLY) as e:
        yield e


def _prompt_tokens(session, text="hi"):
    r = Request.of(text, system_prompt=session.reply.system_prompt, ref_audio=session.reply.ref_audio)
    prompt = build_prompt(
        session.llm.model, r, session.inputs.encode(r), style=session.reply.prompt_rule(session.engine_config.fidelity)
    )
    return [t for kind, part in prompt.segments if kind == "tokens" for t in part]


def test_two_sessions_of_one_engine_reply_their_own_way(engine):
    plain = engine.session()
    terse = engine.session(system_prompt="Answer in one word.", max_new_tokens=3, llm=omni.LlmSampling(temperature=0))
    try:
        assert plain.reply == REPLY and terse.reply.max_new_tokens == 3 and terse.reply.llm.temperature == 0
        assert terse.engine_config.n_ctx == plain.engine_config.n_ctx == ENGINE.n_ctx  # the engine's, shared
        assert _prompt_tokens(terse) != _prompt_tokens(plain)
        text = plain.llm.model.tokenize("Answer in one word.", False)
        assert all(t in _prompt_tokens(terse) for t in text)
        r = terse.speak("hello", speech=False)
        assert r.timings.n_tokens <= 3 and plain.speak("hello", speech=False).timings.n_tokens <= 8
        # a request's own value still wins over the session's
        assert terse.speak("hello", speech=False, max_new_tokens=1).timings.n_tokens == 1
    finally:
        plain.close()
        terse.close()


def test_a_session_takes_reference_audio_of_its_own(engine):
    voice = (0.3 * np.sin(np.linspace(0, 2000, 16000))).astype(np.float32)
    with engine.session(ref_audio=voice) as s, engine.session() as t:
        assert _prompt_tokens(s) == _prompt_tokens(t)  # the voice goes in as embedding rows
        r = Request.of("hi", ref_audio=voice)
        assert s.inputs.encode(r).ref_audio.shape[0] > 0
        assert s.speak("hi", speech=False).timings.apm_ms > 0  # encoded for every reply


def test_settings_the_engine_cannot_hold_are_refused(engine):
    with pytest.raises(ConfigError) as e:
        engine.session(max_new_tokens=ENGINE.n_ctx + 1)
    assert e.value.field == "max_new_tokens"
    with pytest.raises(ConfigError) as e:
        engine.session(llm=omni.LlmSampling(num_beams=2))
    assert e.value.field == "max_beams"
    with pytest.raises(InvalidArgumentError, match="no_such_field"):
        engine.session(no_such_field=1)
    assert engine.free_slots == 2  # nothing was taken


def test_a_session_alone_takes_an_engine_config_and_a_reply_config(tiny_dir):
    config = omni.EngineConfig(threads=1, token2wav=omni.Token2WavConfig(threads=1))
    reply = omni.ReplyConfig(max_new_tokens=4, seed=9)
    with omni.OmniSession(tiny_dir, "cpu", config, reply=reply) as s:
        assert s.engine_config == config and s.reply == reply and s.reply.seed == 9 and s.engine_config.threads == 1
        assert s.speak("hi", speech=False).timings.seed == 9
    with pytest.raises(ConfigError) as e:  # a reply's settings are not an engine's
        omni.OmniSession(tiny_dir, "cpu", omni.ReplyConfig())
    assert e.value.field == "config"
