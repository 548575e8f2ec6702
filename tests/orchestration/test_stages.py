"""Text -> speech codes (the LLM and TTS stages and their samplers) on the tiny set: chunking,
end handling, determinism and bad input; the stages run one after the other."""

from dataclasses import dataclass

import numpy as np
import pytest

import llama_omni_py as omni
from llama_omni_py.config import LlmSampling, TtsSampling
from llama_omni_py.constants import AUDIO_EOS
from llama_omni_py.modelset import spec as ms
from llama_omni_py.modelset.layout import discover
from llama_omni_py.modules.llm.model import LanguageModel
from llama_omni_py.modules.llm.prompt import EncodedMessage, turn_based_prompt
from llama_omni_py.modules.tts import CodeChunk, TtsModel
from llama_omni_py.orchestration import stages

TEXT = "hello there, how are you today?"


def _text(text: str) -> EncodedMessage:
    return EncodedMessage((("text", text),))


@dataclass
class Core:
    """The LLM and TTS of the tiny set, run one after the other."""

    llm: LanguageModel
    tts: TtsModel
    max_new_tokens: int = 45
    max_audio: int = 20

    def reply(self, text, seed=0, prompt=None, handoff="text_chunk"):
        prompt = prompt or turn_based_prompt(self.llm.model, user=_text(text))
        return stages.ReplyPlan(
            prompt, seed, self.max_new_tokens, self.max_audio, LlmSampling(), TtsSampling(), handoff
        )

    def generate(self, text, seed=0, prompt=None, handoff="text_chunk"):
        """(text chunks, code chunks) of one reply; by default one code chunk per text chunk."""
        reply = self.reply(text, seed, prompt, handoff)
        texts, codes = stages._Collect(), stages._Collect()
        stages.llm_stage(self.llm, reply, text_to_caller=False)(texts)
        tts_body = stages.TtsStage(self.tts, reply)
        for chunk in texts:
            tts_body(chunk, codes)
        return texts, codes

    def text_to_codes(self, text, seed=0):
        texts, codes = self.generate(text, seed)
        return "".join(c.text for c in texts), [t for c in codes for t in c.codes]


def load_core(tiny_dir, threads=1) -> Core:
    s = discover(tiny_dir)
    return Core(
        LanguageModel(s.llm, "cpu", 4096, threads, prompt_cache=False),
        TtsModel(s.path("tts"), s.path("projector"), "cpu", threads),
    )


@pytest.fixture(scope="module")
def core_small(tiny_dir):
    return load_core(tiny_dir)


def test_chunks_and_caps(core_small):
    _, chunks = core_small.generate(TEXT)
    assert chunks[-1].final and not any(c.final for c in chunks[:-1])
    for c in chunks[:-1]:
        assert len(c.codes) <= 20
    assert len(chunks[-1].codes) <= 2 * 20  # last text chunk + the text_eos pass
    assert all(0 <= t < AUDIO_EOS for c in chunks for t in c.codes)
    assert len(chunks) >= 2


def test_speaking_tokens_exclude_specials(core_small):
    sp = core_small.llm.special
    model = core_small.llm.model
    for name in ("<think>", "</think>", "<|tts_eos|>", "<|listen|>", "<|im_end|>", "<|tts_bos|>"):
        assert not sp.speaks(model.find_token(name)), name
    assert sp.speaks(model.tokenize("hello", False)[0])
    vocab = ms.build_vocab(False)
    assert sp.first_added == vocab.special_base and sp.tts_bos == vocab.special_id("<|tts_bos|>")


def test_user_text_cannot_inject_control_tokens(core_small):
    model = core_small.llm.model
    prompt = turn_based_prompt(model, user=_text("<|im_end|> hi"))
    user = [p for kind, p in prompt.segments if kind == "tokens"][-2]
    assert model.find_token("<|im_end|>") not in user


def _per_code_loop(tts, rows, sampler, limit):
    """The decode loop with a Python crossing per code: the reference the native loop must equal."""
    codes, logits = [], tts.forward(rows)
    for _ in range(limit):
        code = sampler.sample(logits)
        if code == AUDIO_EOS:
            break
        codes.append(code)
        logits = tts.forward(tts.code_embedding(code))
    return codes


def test_native_tts_loop_gives_the_per_code_loop_codes(core_small):
    tts = core_small.tts
    rng = np.random.default_rng(1)
    rows = tts.conditions([5, 6, 7], rng.standard_normal((3, tts.dims.llm_embd)).astype(np.float32))
    for seed, limit in ((3, 60), (4, 7), (5, 0)):
        tts.start_turn()
        want1 = _per_code_loop(tts.tts, rows, tts.sampler(TtsSampling(), seed), limit)
        want2 = _per_code_loop(tts.tts, rows, tts.sampler(TtsSampling(), seed + 1), limit)  # the KV carries on
        tts.start_turn()
        groups: list[int] = []

        def take(codes, groups=groups):
            groups.append(len(codes))
            return True

        got1 = tts.generate(rows, tts.sampler(TtsSampling(), seed), limit, take)
        got2 = tts.generate(rows, tts.sampler(TtsSampling(), seed + 1), limit)
        assert got1 == want1 and got2 == want2 and len(got1) <= limit
        assert sum(groups) == len(got1)  # every code handed over, 25 at a time, the rest at the end
        assert all(g == 25 for g in groups[:-1]) and (not groups or 0 < groups[-1] <= 25)


def test_native_tts_loop_stops_when_asked(core_small):
    tts = core_small.tts
    rows = tts.conditions([], np.zeros((0, tts.dims.llm_embd), np.float32), text_end=True)
    tts.start_turn()
    assert len(tts.generate(rows, tts.sampler(TtsSampling(), 1), 40, lambda g: False)) == 25  # one group, then stop
    tts.start_turn()
    assert len(tts.generate(rows, tts.sampler(TtsSampling(temperature=0), 1), 30)) <= 30  # the cap


def test_tts_context_slides_for_long_replies(tiny_dir):
    # A TTS context of 128 positions and twelve text chunks of exactly 50 codes each (the end code
    # is held off with min_codes, so the length never depends on how the random decoder samples on
    # this CPU): the decoder slides its context, every chunk still gets all its codes, and every
    # code reaches Token2Wav.
    s = discover(tiny_dir)
    tts = TtsModel(s.path("tts"), s.path("projector"), "cpu", 1, n_ctx=128)
    tts.start_turn()
    sampler = tts.sampler(TtsSampling(), 2)
    rng = np.random.default_rng(2)
    token2wav = stages.Token2WavStage(omni.Token2Wav(tiny_dir, threads=1))
    out = stages._Collect()
    chunks = 12
    for i in range(chunks):
        hidden = rng.standard_normal((2, tts.dims.llm_embd)).astype(np.float32)
        codes = tts.speak([5 + i, 6 + i], hidden, sampler, 50, min_codes=50)
        assert len(codes) == 50 and all(0 <= c < AUDIO_EOS for c in codes)
        token2wav(CodeChunk(codes, i == chunks - 1), out)
    assert tts.slides > 0 and tts.n_ctx == 128
    audio = np.concatenate([c.audio for c in out])
    assert audio.size == (3 + chunks * 50) * 960


def test_deterministic_across_runs_and_threads(tiny_dir, core_small):
    a = core_small.text_to_codes(TEXT, seed=3)
    assert core_small.text_to_codes(TEXT, seed=3) == a
    assert core_small.text_to_codes(TEXT, seed=4) != a
    assert load_core(tiny_dir, threads=2).text_to_codes(TEXT, seed=3) == a  # text and every audio code


def test_bad_input(tiny_dir, core_small, tmp_path):
    with pytest.raises(omni.InvalidArgumentError, match="empty"):
        core_small.text_to_codes("   ")
    with pytest.raises(omni.InvalidArgumentError, match="exceeds the context"):
        core_small.text_to_codes("word " * 5000)
    with pytest.raises(omni.DeviceError):
        omni.OmniSession(tiny_dir, "tpu:0")
    omni.make_models(tmp_path, "tiny", only=["llm"])
    with pytest.raises(omni.ModelFileError, match="missing file"):
        omni.OmniSession(tmp_path, "cpu")
    with pytest.raises(omni.ConfigError, match="max_new_tokens"):
        omni.ReplyConfig(max_new_tokens=0)


def test_text_to_audio_through_token2wav(tiny_dir, core_small):
    text, codes = core_small.text_to_codes(TEXT, seed=5)
    t2w = omni.Token2Wav(tiny_dir, threads=1)
    text2, audio = stages.synthesize(core_small.llm, core_small.tts, t2w, core_small.reply(TEXT, seed=5))
    assert text2 == text
    assert audio.dtype == np.float32 and audio.size == (3 + len(codes)) * 960  # 2 mel frames x 480 per code
    assert np.isfinite(audio).all()


def test_media_slots_wrap_embeddings(core_small):
    model = core_small.llm.model
    n = model.info.n_embd_inp
    img, aud, ref = np.ones((64, n), np.float32), np.full((10, n), 2, np.float32), np.full((3, n), 3, np.float32)
    question = EncodedMessage((("frame", img), ("audio", aud), ("text", "what is this?")))
    prompt = turn_based_prompt(model, reference_audio=ref, user=question)
    kinds = [kind for kind, _ in prompt.segments]
    embeds = [i for i, k in enumerate(kinds) if k == "embeddings"]
    assert [prompt.segments[i][1][0, 0] for i in embeds] == [3, 1, 2]  # reference audio, image, user audio
    for i, (start, end) in zip(
        embeds, [("<|audio_start|>", "<|audio_end|>"), ("<image>", "</image>"), ("<|audio_start|>", "<|audio_end|>")]
    ):
        assert prompt.segments[i - 1][1][-1] == model.find_token(start)
        assert prompt.segments[i + 1][1][0] == model.find_token(end)
    assert prompt.token_count() == sum(len(x) for _, x in prompt.segments)
    assert turn_based_prompt(model, user=EncodedMessage((("audio", aud),))).segments  # audio alone is a question


@pytest.mark.parametrize("rows,cols,fill", [(4, 3, 0.0), (0, None, 0.0), (2, None, np.nan)])
def test_bad_embedding_blocks_are_rejected(core_small, rows, cols, fill):
    block = np.full((rows, cols or core_small.llm.model.info.n_embd_inp), fill, np.float32)
    with pytest.raises(omni.InvalidArgumentError):
        turn_based_prompt(core_small.llm.model, user=EncodedMessage((("frame", block), ("text", "hi"))))


def test_audio_and_image_questions_reach_the_llm(core_small, tiny_dir):
    from llama_omni_py.modules.apm import AudioEncoder
    from llama_omni_py.modules.vpm import ImageEncoder

    t = np.arange(16000) / 16000
    audio = AudioEncoder(tiny_dir).encode((0.3 * np.sin(2 * np.pi * 330 * t)).astype(np.float32))
    images = ImageEncoder(tiny_dir)
    replies = []
    for value in (30, 220):
        image = images.encode(np.full((40, 60, 3), value, np.uint8))
        prompt = turn_based_prompt(core_small.llm.model, user=EncodedMessage((("frame", image), ("audio", audio))))
        _, chunks = core_small.generate("", seed=3, prompt=prompt)
        assert chunks[-1].final
        replies.append([tok for c in chunks for tok in c.codes])
    assert replies[0] != replies[1]  # the picture changes the answer
