"""Two entry points the evaluation layouts use: a teacher-forced reply (reply_text: evaluated, not
sampled, and spoken from its hidden states) and a prompt built by the caller."""

import numpy as np
import pytest

import llama_omni_py as omni
from llama_omni_py.orchestration.inputs import Request, build_prompt


@pytest.fixture(scope="module")
def session(tiny_dir):
    cfg = omni.EngineConfig(threads=1, token2wav=omni.Token2WavConfig(threads=1))
    with omni.OmniSession(tiny_dir, "cpu", cfg, reply=omni.ReplyConfig(max_new_tokens=12)) as s:
        yield s


def test_a_forced_reply_is_the_given_text_spoken(session):
    text = "Hello there, this reply is given."
    r = session.speak("Read it.", reply_text=text, seed=1)
    assert r.text == text and r.timings.n_tokens == len(session.llm.model.tokenize(text, False))
    assert r.audio.size > 0 and r.timings.n_tts_tokens > 0
    other = session.speak("Something else entirely.", reply_text=text, seed=1)
    assert other.text == text  # whatever the prompt, the reply is the text
    with pytest.raises(omni.InvalidArgumentError, match="reply_text"):
        session.speak("x", reply_text="   ")


def test_a_prebuilt_prompt_is_used_as_it_is(session):
    greedy = omni.LlmSampling(temperature=0.0)
    r = Request.of("What is a tone?", speech=False, tts_template=False)
    prompt = build_prompt(
        session.llm.model, r, session.inputs.encode(r), style=session.reply.prompt_rule(session.engine_config.fidelity)
    )
    direct = session.speak("What is a tone?", speech=False, tts_template=False, llm=greedy)
    built = session.speak(prompt=prompt, speech=False, tts_template=False, llm=greedy)
    assert built.text == direct.text and built.timings.prompt_tokens == prompt.token_count()
    tone = (0.1 * np.sin(np.arange(16000) / 16000 * 2 * np.pi * 200)).astype(np.float32)
    with pytest.raises(omni.InvalidArgumentError, match="prebuilt prompt"):
        session.speak("x", prompt=prompt)
    with pytest.raises(omni.InvalidArgumentError, match="prebuilt prompt"):
        session.speak(prompt=prompt, ref_audio=tone)
    with pytest.raises(omni.InvalidArgumentError, match="Prompt"):
        session.speak(prompt="a string")
