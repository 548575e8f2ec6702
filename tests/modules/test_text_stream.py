"""TextStream: whole characters out of token pieces, with the tiny model's byte-level tokenizer."""

from llama_omni_py._native import core
from llama_omni_py.modelset import spec as ms
from llama_omni_py.modules.llm.text_stream import TextStream


def test_pieces_split_inside_characters():
    data = "héllo 你好 🙂".encode()
    pieces = [data[i : i + 1] for i in range(len(data))]  # one byte per piece
    stream = TextStream(lambda toks: b"".join(pieces[t] for t in toks))
    out = [stream.feed([i]) for i in range(len(pieces))]
    assert "".join(out) == "héllo 你好 🙂" and "\ufffd" not in "".join(out)
    assert out[7:9] == ["", ""] and out[9] == "你"  # the bytes wait for the whole character


def test_final_and_reset():
    stream = TextStream(lambda toks: bytes(toks))
    assert stream.feed([0xE4, 0xBD]) == ""
    assert stream.feed([], final=True) == "\ufffd"  # a reply that ends inside a character says so
    stream.feed([0xE4])
    stream.reset()
    assert stream.feed([0x41]) == "A"  # what waited is gone


def test_token_by_token_with_the_real_tokenizer(tiny_dir):
    m = core.LlmModel(str(tiny_dir / ms.LLM_FILE), "cpu")
    text = "ünïcode 你好, 🙂 and 語"
    ids = m.tokenize(text, False)
    assert m.detokenize_bytes(ids) == text.encode()
    split = [m.detokenize(ids[i : i + 1]) for i in range(len(ids))]
    stream = TextStream(m.detokenize_bytes)
    assert "".join(stream.feed([t]) for t in ids) + stream.feed([], final=True) == text
    # the tiny vocabulary does split characters, so the plain per-piece text would be broken
    assert "\ufffd" in "".join(split)
