"""TTS backbone + extras and the separate projector file."""

from __future__ import annotations

from dataclasses import dataclass

from .common import (
    AUDIO_TOKENS,
    F16,
    F32,
    SPECIAL_TOKEN_BASE,
    TTS_AUDIO_BOS_ID,
    TTS_TEXT_EOS_ID,
    KeyRule,
    Meta,
    TensorSpec,
    _linear,
    _w,
)
from .llm import LLM_TINY
from .vocab import TOKEN_UNUSED, VOCAB_KEYS, Vocab


# =======================================================================================
# TTS: 20-layer LLaMA + MiniCPM-o extras, and the separate projector.
@dataclass(frozen=True)
class TtsDims:
    hidden: int
    n_layer: int
    n_head: int
    n_ff: int
    text_vocab: int  # rows of emb_text (LLM token ids)
    llm_embd: int
    # Rows of the LLaMA backbone's token_embd = entries of its tokenizer; 0: audio_tokens +
    # text_vocab, the size llama.cpp-omni's converter gives it (docs/model-files.md).
    n_token_vocab: int = 0
    live_token_rows: int = 32000  # rows with values; the converter zero-pads the rest
    audio_tokens: int = AUDIO_TOKENS
    rope_theta: float = 10000.0
    rms_eps: float = 1e-6

    @property
    def token_rows(self) -> int:
        return self.n_token_vocab or self.audio_tokens + self.text_vocab


TTS_REAL = TtsDims(768, 20, 12, 3072, 152064, 4096)
TTS_TINY = TtsDims(64, 2, 4, 128, 0, LLM_TINY.n_embd, live_token_rows=256)  # text_vocab = tiny LLM vocab


def tts_tensors(d: TtsDims) -> list[TensorSpec]:
    t = d.hidden
    out = [
        TensorSpec("token_embd.weight", (t, d.token_rows), F16, "embed", live_rows=min(d.live_token_rows, d.token_rows))
    ]
    for i in range(d.n_layer):
        p = f"blk.{i}"
        out += [
            TensorSpec(f"{p}.attn_norm.weight", (t,), F32, "norm"),
            _w(f"{p}.attn_q.weight", (t, t)),
            _w(f"{p}.attn_k.weight", (t, t)),
            _w(f"{p}.attn_v.weight", (t, t)),
            _w(f"{p}.attn_output.weight", (t, t), gain=0.5),
            TensorSpec(f"{p}.ffn_norm.weight", (t,), F32, "norm"),
            _w(f"{p}.ffn_gate.weight", (t, d.n_ff)),
            _w(f"{p}.ffn_up.weight", (t, d.n_ff)),
            _w(f"{p}.ffn_down.weight", (d.n_ff, t), gain=0.5),
        ]
    out += [
        TensorSpec("output_norm.weight", (t,), F32, "norm"),
        TensorSpec("emb_code.0.weight", (t, d.audio_tokens), F32, "embed"),
        TensorSpec("emb_text.weight", (t, d.text_vocab), F32, "embed"),
    ]
    out += _linear("projector_semantic.linear1", d.llm_embd, t, dtype=F32)
    out += _linear("projector_semantic.linear2", t, t, dtype=F32)
    # Stored as numpy (hidden, audio_tokens) = ggml ne [audio_tokens, hidden] (weight norm folded).
    out.append(_w("head_code.0.weight", (d.audio_tokens, t), F32, fan_in=t))
    return out


def tts_metadata(d: TtsDims) -> Meta:
    a = "llama"
    meta: Meta = [
        ("general.architecture", "string", a),
        ("general.name", "string", "MiniCPM-o-4_5 TTS (llama-omni-py random weights)"),
        ("general.file_type", "uint32", 1),
        (f"{a}.context_length", "uint32", 4096),
        (f"{a}.embedding_length", "uint32", d.hidden),
        (f"{a}.block_count", "uint32", d.n_layer),
        (f"{a}.feed_forward_length", "uint32", d.n_ff),
        (f"{a}.rope.dimension_count", "uint32", d.hidden // d.n_head),
        (f"{a}.attention.head_count", "uint32", d.n_head),
        (f"{a}.attention.head_count_kv", "uint32", d.n_head),
        (f"{a}.attention.layer_norm_rms_epsilon", "float32", d.rms_eps),
        (f"{a}.rope.freq_base", "float32", d.rope_theta),
        (f"{a}.vocab_size", "uint32", d.token_rows),
    ]
    return meta


def tts_vocab(llm_vocab: Vocab, d: TtsDims) -> Vocab:
    """The TTS file's tokenizer: the LLM's, padded with unique "[PAD{id}]" entries (type unused)
    up to token_embd's rows, as llama.cpp-omni's converter writes it. Only llama.cpp's loader
    reads it; no text is ever tokenized with it."""
    n = d.token_rows
    if n < llm_vocab.size:
        raise ValueError(f"TTS token_embd has {n} rows, fewer than the {llm_vocab.size} LLM tokens")
    pad = range(llm_vocab.size, n)
    return Vocab(
        llm_vocab.tokens + [f"[PAD{i}]" for i in pad],
        llm_vocab.token_types + [TOKEN_UNUSED] * len(pad),
        llm_vocab.merges,
        llm_vocab.special_base,
    )


def tts_vocab_metadata(v: Vocab) -> Meta:
    """Tokenizer keys of the TTS file: no BOS (Qwen has none), EOS <|im_end|>, pad <|endoftext|>."""
    return [m for m in v.metadata() if m[0] not in ("tokenizer.ggml.bos_token_id", "tokenizer.ggml.add_bos_token")]


def _head_dim(d) -> int:
    return d.tts.hidden // d.tts.n_head


# What llama.cpp's loader needs of an arch "llama" file (docs/model-files.md). The vocabulary
# (tokenizer.ggml.tokens, merges) is checked against token_embd by the validator.
TTS_KEYS = (
    KeyRule("llama.context_length", "int"),
    KeyRule("llama.embedding_length", "int"),
    KeyRule("llama.block_count", "int"),
    KeyRule("llama.feed_forward_length", "int"),
    KeyRule("llama.attention.head_count", "int"),
    KeyRule("llama.attention.layer_norm_rms_epsilon", "float"),
    KeyRule("llama.rope.dimension_count", "int", required=False, value=_head_dim),
    *VOCAB_KEYS,
)


def tts_special_ids(special_base: int = SPECIAL_TOKEN_BASE) -> tuple[int, int]:
    """(audio_bos, text_eos) row ids into emb_text.

    Real sets use llama.cpp-omni's hard-coded ids (special_base = 151643). The tiny set keeps
    the same offsets from the start of its special-token block and records the result in the
    ``omni.tts.audio_bos_token_id`` / ``omni.tts.text_eos_token_id`` keys.
    """
    return (special_base + TTS_AUDIO_BOS_ID - SPECIAL_TOKEN_BASE, special_base + TTS_TEXT_EOS_ID - SPECIAL_TOKEN_BASE)


def tts_infer(g) -> TtsDims:
    return TtsDims(
        hidden=g.get_int("llama.embedding_length"),
        n_layer=g.get_int("llama.block_count"),
        n_head=g.get_int("llama.attention.head_count"),
        n_ff=g.get_int("llama.feed_forward_length"),
        text_vocab=g.tensor_ne("emb_text.weight")[1],
        llm_embd=g.tensor_ne("projector_semantic.linear1.weight")[0],
        n_token_vocab=g.tensor_ne("token_embd.weight")[1],
        audio_tokens=g.tensor_ne("emb_code.0.weight")[1],
    )


@dataclass(frozen=True)
class ProjectorDims:
    llm_embd: int
    hidden: int


PROJECTOR_REAL = ProjectorDims(4096, 768)
PROJECTOR_TINY = ProjectorDims(LLM_TINY.n_embd, TTS_TINY.hidden)


def projector_tensors(d: ProjectorDims) -> list[TensorSpec]:
    return _linear("linear1", d.llm_embd, d.hidden, dtype=F32) + _linear("linear2", d.hidden, d.hidden, dtype=F32)


def projector_metadata(d: ProjectorDims) -> Meta:
    return [("general.architecture", "string", "projector")]


def projector_infer(g) -> ProjectorDims:
    ne = g.tensor_ne("linear1.weight")
    return ProjectorDims(llm_embd=ne[0], hidden=ne[1])
