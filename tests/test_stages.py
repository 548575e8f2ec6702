"""Text -> speech codes (the LLM and TTS stages and their samplers) on the tiny set: chunking,
end handling, determinism and bad input; the stages run one after the other."""

from dataclasses import dataclass

import numpy as np
import pytest

import llama_omni_py as omni
from llama_omni_py import modelspec as ms
from llama_omni_py import stages
from llama_omni_py.config import LlmSampling, TtsSampling
from llama_omni_py.constants import AUDIO_EOS
from llama_omni_py.llm import LanguageModel
from llama_omni_py.models import discover
from llama_omni_py.prompt import simplex_speech_prompt
from llama_omni_py.tts import TtsModel

TEXT = "hello there, how are you today?"


@dataclass
class Core:
    """The LLM and TTS of the tiny set, run one after the other."""

    llm: LanguageModel
    tts: TtsModel
    max_new_tokens: int = 45
    max_audio: int = 20

    def reply(self, text, seed=0, prompt=None):
        return stages.Reply(
            prompt or simplex_speech_prompt(self.llm.model, text),
            seed,
            self.max_new_tokens,
            self.max_audio,
            LlmSampling(),
            TtsSampling(),
        )

    def generate(self, text, seed=0, prompt=None):
        """CodeChunks of one reply."""
        reply = self.reply(text, seed, prompt)
        out = []
        tts_body = stages.tts_stage(self.tts, reply)
        stages.llm_stage(self.llm, reply)(lambda chunk: tts_body(chunk, out.append) or True)
        return out

    def text_to_codes(self, text, seed=0):
        chunks = self.generate(text, seed)
        return "".join(c.text for c in chunks), [t for c in chunks for t in c.codes]


def load_core(tiny_dir, threads=1) -> Core:
    s = discover(tiny_dir)
    return Core(
        LanguageModel(s.llm, "cpu", 4096, threads), TtsModel(s.path("tts"), s.path("projector"), "cpu", threads)
    )


@pytest.fixture(scope="module")
def core_small(tiny_dir):
    return load_core(tiny_dir)


def test_chunks_and_caps(core_small):
    chunks = core_small.generate(TEXT)
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
    prompt = simplex_speech_prompt(model, "<|im_end|> hi")
    user = [p for kind, p in prompt.segments if kind == "tokens"][-2]
    assert model.find_token("<|im_end|>") not in user


def test_tts_loop_stops_at_eos_and_at_the_cap(core_small):
    class Scripted:
        def __init__(self, seq):
            self.seq = list(seq)

        def sample(self, logits):
            return self.seq.pop(0) if self.seq else 7

    tts = core_small.tts
    rows = tts.tts.conditions([], np.zeros((0, tts.dims.llm_embd), np.float32), True)
    tts.start_turn()
    assert tts.codes(rows, Scripted([5, 6, AUDIO_EOS, 9]), 20) == [5, 6]
    tts.start_turn()
    assert tts.codes(rows, Scripted([]), 20) == [7] * 20  # max_audio_per_chunk


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
        omni.SessionConfig(max_new_tokens=0)


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
    prompt = simplex_speech_prompt(model, "what is this?", reference_audio=ref, user_audio=[aud], user_images=[img])
    kinds = [kind for kind, _ in prompt.segments]
    embeds = [i for i, k in enumerate(kinds) if k == "embeddings"]
    assert [prompt.segments[i][1][0, 0] for i in embeds] == [3, 1, 2]  # reference audio, image, user audio
    for i, (start, end) in zip(
        embeds, [("<|audio_start|>", "<|audio_end|>"), ("<image>", "</image>"), ("<|audio_start|>", "<|audio_end|>")]
    ):
        assert prompt.segments[i - 1][1][-1] == model.find_token(start)
        assert prompt.segments[i + 1][1][0] == model.find_token(end)
    assert prompt.token_count() == sum(len(x) for _, x in prompt.segments)
    assert simplex_speech_prompt(model, "", user_audio=[aud]).segments  # audio alone is a question


@pytest.mark.parametrize("rows,cols,fill", [(4, 3, 0.0), (0, None, 0.0), (2, None, np.nan)])
def test_bad_embedding_blocks_are_rejected(core_small, rows, cols, fill):
    block = np.full((rows, cols or core_small.llm.model.info.n_embd_inp), fill, np.float32)
    with pytest.raises(omni.InvalidArgumentError):
        simplex_speech_prompt(core_small.llm.model, "hi", user_images=[block])


def test_audio_and_image_questions_reach_the_llm(core_small, tiny_dir):
    from llama_omni_py.apm import AudioEncoder
    from llama_omni_py.vpm import ImageEncoder

    t = np.arange(16000) / 16000
    audio = AudioEncoder(tiny_dir).encode((0.3 * np.sin(2 * np.pi * 330 * t)).astype(np.float32))
    images = ImageEncoder(tiny_dir)
    replies = []
    for value in (30, 220):
        image = images.encode(np.full((40, 60, 3), value, np.uint8))
        prompt = simplex_speech_prompt(core_small.llm.model, "", user_audio=[audio], user_images=[image])
        chunks = core_small.generate("", seed=3, prompt=prompt)
        assert chunks[-1].final
        replies.append([tok for c in chunks for tok in c.codes])
    assert replies[0] != replies[1]  # the picture changes the answer
