"""The turn-based prompt in both layouts (docs/fidelity.md): llama.cpp-omni's token for token as its
pipeline evaluates it, and the reference's chat template + processor layout, each restated here as
text with embedding slots and compared with what prompt.turn_based_prompt builds."""

import numpy as np
import pytest

import llama_omni_py as omni
from llama_omni_py._native import core
from llama_omni_py.modules.llm import prompt as p

SLOT = object()  # an embedding block in a restated layout

VOICE = "模仿音频样本的音色并生成新的内容。"
ROLE = "你的任务是用这种声音模式来当一个助手。请认真、高质量地回复用户的问题。请用高自然度的方式和用户聊天。"
IDENTITY = "你是由面壁智能开发的人工智能助手：面壁小钢炮。"
SPEECH_TAIL = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n<|tts_bos|>"


@pytest.fixture(scope="module")
def model(tiny_dir):
    return core.LlmModel(str(tiny_dir / "MiniCPM-o-4_5-F16.gguf"), "cpu")


def _flatten(model, parts) -> list:
    """Token ids of a restated layout, with -1 for each embedding row."""
    out: list = []
    for part in parts:
        if isinstance(part, np.ndarray):
            out += [-1] * len(part)
        else:
            out += model.tokenize(part, True)
    return out


def _built(prompt) -> list:
    out: list = []
    for kind, x in prompt.segments:
        out += list(x) if kind == "tokens" else [-1] * len(x)
    return out


def _text(text: str) -> p.EncodedMessage:
    return p.EncodedMessage((("text", text),))


def _blocks(model, *rows):
    return [np.full((n, model.info.n_embd_inp), 0.01 * (i + 1), np.float32) for i, n in enumerate(rows)]


def test_llama_cpp_omni_layout_of_a_first_turn(model):
    voice, audio = _blocks(model, 7, 5)
    built = p.turn_based_prompt(
        model, reference_audio=voice, user=p.EncodedMessage((("audio", audio), ("text", "what is this")))
    )
    expected = [
        f"<|im_start|>system\n{VOICE}\n<|audio_start|>",
        voice,
        f"<|audio_end|>{ROLE}{IDENTITY}<|im_end|>\n<|im_start|>user\n<|im_start|>user\n<|audio_start|>",
        audio,
        "<|audio_end|>what is this" + SPEECH_TAIL,
    ]
    assert _built(built) == _flatten(model, expected)


def test_llama_cpp_omni_keeps_an_empty_voice_slot_and_drops_the_identity_with_images(model):
    image, audio = _blocks(model, 4, 3)
    built = p.turn_based_prompt(model, user=p.EncodedMessage((("frame", image), ("audio", audio))))
    expected = [
        f"<|im_start|>system\n{VOICE}\n<|audio_start|><|audio_end|>{ROLE}<|im_end|>\n"
        "<|im_start|>user\n<|im_start|>user\n<image>",
        image,
        "</image><|audio_start|>",
        audio,
        "<|audio_end|>" + SPEECH_TAIL,
    ]
    assert _built(built) == _flatten(model, expected)
    # without the TTS template llama.cpp-omni opens a plain assistant turn
    plain = p.turn_based_prompt(model, user=_text("hi"), tts_template=False)
    assert _built(plain)[-len(model.tokenize(p.ASSISTANT_PLAIN_PREFIX, True)) :] == model.tokenize(
        p.ASSISTANT_PLAIN_PREFIX, True
    )


def test_reference_layout_joins_parts_with_newlines(model):
    voice, image, audio = _blocks(model, 6, 4, 3)
    built = p.turn_based_prompt(
        model,
        reference_audio=voice,
        user=p.EncodedMessage((("frame", image), ("audio", audio), ("text", "describe"))),
        style="reference",
    )
    expected = [
        f"<|im_start|>system\n{VOICE}\n<|audio_start|>",
        voice,
        f"<|audio_end|>\n{ROLE}{IDENTITY}<|im_end|>\n<|im_start|>user\n<image>",
        image,
        "</image>\n<|audio_start|>",
        audio,
        "<|audio_end|>\ndescribe" + SPEECH_TAIL,
    ]
    assert _built(built) == _flatten(model, expected)
    no_voice = p.turn_based_prompt(model, user=_text("hi"), style="reference")
    assert _built(no_voice) == _flatten(
        model, [f"<|im_start|>system\nUse the <reserved_53> voice.\n{ROLE}{IDENTITY}<|im_end|>\n<|im_start|>user\nhi"]
    ) + model.tokenize(SPEECH_TAIL, True)


def test_a_turn_with_history_extends_the_first_turn(model):
    # the next turn's prompt repeats the first up to its assistant header, so the KV cache of the
    # first turn serves the next; llama.cpp-omni's doubled header stays with its first user turn
    header = model.tokenize("<|im_start|>user\n", True)
    assistant = model.tokenize("<|im_start|>assistant\n", True)
    for style, headers in (("llama.cpp-omni", 3), ("reference", 2)):
        first = _built(p.turn_based_prompt(model, user=_text("first"), style=style))
        cut = next(i for i in range(len(first)) if first[i : i + len(assistant)] == assistant) + len(assistant)
        history = [("user", "first"), ("assistant", "second")]
        toks = _built(p.turn_based_prompt(model, user=_text("third"), history=history, style=style))
        assert toks[:cut] == first[:cut], style
        assert sum(toks[i : i + len(header)] == header for i in range(len(toks))) == headers, style


def test_prompt_rule_follows_the_switch_and_is_validated():
    lco, reference = omni.EngineConfig(), omni.EngineConfig(fidelity="reference")
    assert omni.ReplyConfig().prompt_rule(lco.fidelity) == "llama.cpp-omni"
    assert omni.ReplyConfig().prompt_rule(reference.fidelity) == "reference"
    assert omni.ReplyConfig(prompt_fidelity="llama.cpp-omni").prompt_rule(reference.fidelity) == "llama.cpp-omni"
    with pytest.raises(omni.ConfigError, match="prompt_fidelity"):
        omni.ReplyConfig(prompt_fidelity="mine")
    with pytest.raises(omni.InvalidArgumentError, match="style"):
        p.turn_based_prompt(None, user=_text("x"), style="mine")


def test_a_session_runs_the_layout_of_its_fidelity(tiny_dir, model):
    lengths = {}
    for fid in p.PROMPT_STYLES:
        cfg = omni.EngineConfig(fidelity=fid, threads=1, token2wav=omni.Token2WavConfig(threads=1))
        with omni.OmniSession(tiny_dir, "cpu", cfg, reply=omni.ReplyConfig(max_new_tokens=4)) as s:
            lengths[fid] = s.speak("hello", seed=1, speech=False).timings.prompt_tokens
    for fid in p.PROMPT_STYLES:
        assert (
            lengths[fid] == p.turn_based_prompt(model, user=_text("hello"), tts_template=False, style=fid).token_count()
        )
    assert lengths["llama.cpp-omni"] != lengths["reference"]


def test_vllm_omni_layout_of_a_daily_omni_request(model):
    # a Daily-Omni item as the local run encodes it: each frame followed by its second of audio,
    # then the question; the video brings audio, so the message is in the reference's omni mode
    from llama_omni_py.eval.protocols import protocol

    f0, a0, f1, a1 = _blocks(model, 4, 3, 4, 2)
    vo = protocol("vllm-omni", "daily-omni")
    question = vo.prompt("What barks?", ["A. a dog", "B. a cat", "C. a cow", "D. a fox"])
    parts = (("frame", f0), ("audio", a0), ("frame", f1), ("audio", a1), ("text", question))
    message = p.EncodedMessage(parts, video=True, omni=True)
    assert vo.prompt_style == p.VLLM_OMNI_STYLE and not vo.system and not vo.tts_template

    def built(style):
        return _built(p.turn_based_prompt(model, user=message, system_prompt=False, tts_template=False, style=style))

    # vLLM-Omni's server (--interleave-mm-strings): the parts in their order, every two joined by "\n"
    expected = [
        "<|im_start|>user\n<image>",
        f0,
        "</image>\n<|audio_start|>",
        a0,
        "<|audio_end|>\n<image>",
        f1,
        "</image>\n<|audio_start|>",
        a1,
        "<|audio_end|>\n" + question + p.ASSISTANT_TEXT_PREFIX,
    ]
    assert p.join_of(message, vo.prompt_style) == "\n"
    assert built(vo.prompt_style) == _flatten(model, expected)
    # the reference's omni mode (the evalkit protocol) keeps joining the same parts with ""
    evalkit = protocol("evalkit", "daily-omni").prompt_style
    omni_mode = [x.replace(">\n<", "><") if isinstance(x, str) else x for x in expected[:-1]]
    assert built(evalkit) == _flatten(model, [*omni_mode, "<|audio_end|>" + question + p.ASSISTANT_TEXT_PREFIX])
    # Video-MME's frames only: "\n" joins under both
    frames = p.EncodedMessage((("frame", f0), ("frame", f1), ("text", "Q?")), video=True)
    want = ["<|im_start|>user\n<image>", f0, "</image>\n<image>", f1, "</image>\nQ?" + p.ASSISTANT_TEXT_PREFIX]
    for style in (protocol("vllm-omni", "videomme").prompt_style, protocol("evalkit", "videomme").prompt_style):
        got = p.turn_based_prompt(model, user=frames, system_prompt=False, tts_template=False, style=style)
        assert _built(got) == _flatten(model, want), style
