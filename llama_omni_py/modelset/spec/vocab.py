"""The LLM tokenizer the generator writes: Qwen3-style byte-level BPE that libllama accepts.

``tokenizer.ggml.model = "gpt2"`` with the ``qwen2`` pre-tokenizer: 256 byte tokens (GPT-2's
byte-to-unicode alphabet), merges learned deterministically from a short built-in text,
then either filler up to the real vocabulary size with the MiniCPM-o special tokens at their
real ids (151643..151747), or -- in the tiny set -- the same special tokens, in the same
order, right after the merges. Prompting resolves special tokens by name, so both work.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from .common import SPECIAL_TOKEN_BASE, SPECIAL_TOKENS, KeyRule

TOKEN_NORMAL, TOKEN_CONTROL, TOKEN_USER_DEFINED, TOKEN_UNUSED = 1, 3, 4, 5
# Qwen marks the think tags as user-defined (they appear in text); the rest are control tokens.
_USER_DEFINED = {"<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"}

_CORPUS = (
    "the quick brown fox jumps over the lazy dog. hello world! this is a test of the speech "
    "model: it listens, it thinks and then it speaks. there are three stages in the pipeline, "
    "the language model, the text to speech model and the vocoder that turns tokens into sound."
)


def byte_alphabet() -> list[str]:
    """GPT-2's reversible byte -> printable unicode mapping, index = byte value."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    mapping, extra = {}, 0
    for b in range(256):
        if b in keep:
            mapping[b] = chr(b)
        else:
            mapping[b] = chr(256 + extra)
            extra += 1
    return [mapping[b] for b in range(256)]


def learn_merges(n_merges: int, text: str = _CORPUS) -> list[tuple[str, str]]:
    """Plain BPE on the words of ``text`` (space attached to the following word, as GPT-2 does)."""
    alphabet = byte_alphabet()
    words = Counter()
    for i, w in enumerate(text.split(" ")):
        raw = (" " if i else "") + w
        words[tuple(alphabet[b] for b in raw.encode())] += 1
    merges: list[tuple[str, str]] = []
    for _ in range(n_merges):
        pairs = Counter()
        for w, c in words.items():
            for a, b in zip(w, w[1:]):
                pairs[(a, b)] += c
        if not pairs:
            break
        # Highest count, ties broken by the pair itself so the result is deterministic.
        best = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))[0]
        merges.append(best)
        new_words = Counter()
        for w, c in words.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == best:
                    out.append(w[i] + w[i + 1])
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            new_words[tuple(out)] += c
        words = new_words
    return merges


@dataclass(frozen=True)
class Vocab:
    tokens: list[str]
    token_types: list[int]
    merges: list[str]
    special_base: int  # id of <|endoftext|>; the special block follows SPECIAL_TOKENS order

    @property
    def size(self) -> int:
        return len(self.tokens)

    def special_id(self, name: str) -> int:
        return self.special_base + SPECIAL_TOKENS.index(name)

    def metadata(self) -> list[tuple[str, str, object]]:
        return [
            ("tokenizer.ggml.model", "string", "gpt2"),
            ("tokenizer.ggml.pre", "string", "qwen2"),
            ("tokenizer.ggml.tokens", "string[]", self.tokens),
            ("tokenizer.ggml.token_type", "int32[]", self.token_types),
            ("tokenizer.ggml.merges", "string[]", self.merges),
            ("tokenizer.ggml.bos_token_id", "uint32", self.special_id("<|endoftext|>")),
            ("tokenizer.ggml.eos_token_id", "uint32", self.special_id("<|im_end|>")),
            ("tokenizer.ggml.padding_token_id", "uint32", self.special_id("<|endoftext|>")),
            ("tokenizer.ggml.add_bos_token", "bool", False),
        ]


def build_vocab(full_size: bool, n_merges: int = 64) -> Vocab:
    """Full size: 151748 entries, specials at their real ids. Otherwise the tiny layout."""
    merges = learn_merges(n_merges)
    tokens = byte_alphabet() + [a + b for a, b in merges]
    # Merged strings can repeat a byte token only if a merge produced an existing symbol; BPE never does.
    types = [TOKEN_NORMAL] * len(tokens)
    if full_size:
        # Ordinary words (" w0", " w1", ... in the byte-level spelling) up to the special block:
        # a random-weight reply then reads as text, as a real one would, in every engine that
        # detokenizes it; BPE never produces them from input text (no merge leads to them).
        filler = [f"\u0120w{i}" for i in range(SPECIAL_TOKEN_BASE - len(tokens))]
        assert not set(filler) & set(tokens)
        tokens += filler
        types += [TOKEN_NORMAL] * len(filler)
    base = len(tokens)
    tokens += list(SPECIAL_TOKENS)
    types += [TOKEN_USER_DEFINED if t in _USER_DEFINED else TOKEN_CONTROL for t in SPECIAL_TOKENS]
    return Vocab(tokens, types, [f"{a} {b}" for a, b in merges], base)


# Vocabulary keys llama.cpp's loader reads (docs/model-files.md): the model is required; the
# rest are checked against it and the token table by vocab_problems().
VOCAB_KEYS = (
    KeyRule("tokenizer.ggml.model", "str"),
    KeyRule("tokenizer.ggml.pre", "str", required=False),
    KeyRule("tokenizer.ggml.tokens", "str[]", required=False),
    KeyRule("tokenizer.ggml.token_type", "int[]", required=False),
    KeyRule("tokenizer.ggml.merges", "str[]", required=False),
)
# Tokenizer models llama.cpp knows; "none"/"no_vocab" load without a token list.
TOKENIZER_MODELS = ("gpt2", "llama", "bert", "t5", "rwkv", "plamo2", "none", "no_vocab")


def vocab_problems(meta: dict, rows: int) -> list[str]:
    """What llama.cpp's vocabulary loader would reject in ``meta`` (the file's metadata), for a
    token_embd of ``rows`` rows."""
    model = meta.get("tokenizer.ggml.model")
    if model not in TOKENIZER_MODELS:
        return [f"tokenizer.ggml.model is {model!r}, not one of {', '.join(TOKENIZER_MODELS)}"]
    if model in ("none", "no_vocab"):
        return []
    tokens = meta.get("tokenizer.ggml.tokens")
    if tokens is None:
        return ["missing metadata key 'tokenizer.ggml.tokens'"]
    problems = []
    if len(tokens) != rows:
        problems.append(f"tokenizer.ggml.tokens has {len(tokens)} entries but token_embd.weight has {rows} rows")
    if len(set(tokens)) != len(tokens):
        problems.append("tokenizer.ggml.tokens has duplicate entries (llama.cpp needs them unique)")
    types = meta.get("tokenizer.ggml.token_type")
    if types is not None and len(types) != len(tokens):
        problems.append(f"tokenizer.ggml.token_type has {len(types)} entries for {len(tokens)} tokens")
    if model == "gpt2" and "tokenizer.ggml.merges" not in meta:
        problems.append("missing metadata key 'tokenizer.ggml.merges' (a gpt2 tokenizer needs it)")
    return problems
