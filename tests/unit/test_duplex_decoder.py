"""The duplex token policy with a scripted LLM: forced listening, the listen scale, <|listen|>
turned into <|tts_bos|> inside a turn, the two-stage draw, each terminator, the end of a turn,
the token and character caps, penalties and the top-k/top-p filter."""

import numpy as np
import pytest

from llama_omni_py.config import DuplexConfig
from llama_omni_py.duplex.decoder import DuplexTokens, TextSampler, UnitDecoder, _top_k_top_p
from llama_omni_py.errors import ConfigError

V = 64
T = DuplexTokens(
    listen=50, speak=51, tts_bos=52, turn_eos=53, chunk_eos=54, chunk_tts_eos=55, tts_pad=56, unit=57, unit_end=58
)
FIRST_ADDED = 50  # ids from here on are special


class ScriptedLlm:
    """Logits that make `script[i]` the only likely token at step i (greedy picks it)."""

    def __init__(self, script):
        self.script, self.fed = list(script), []

    def logits(self):
        x = np.full(V, -30.0)
        if self.script:
            x[self.script.pop(0)] = 30.0
        return x

    def feed(self, token):
        self.fed.append(token)
        return self.logits(), np.full(8, float(token))

    def detokenize(self, tokens):
        return "".join(chr(97 + t % 26) * 3 for t in tokens if t < FIRST_ADDED)  # 3 characters a token

    def detokenize_bytes(self, tokens):
        return self.detokenize(tokens).encode()

    def is_special(self, token):
        return token >= FIRST_ADDED


def decoder(script, **cfg):
    llm = ScriptedLlm(script)
    d = UnitDecoder(DuplexConfig(**{"greedy": True, "force_listen_count": 0, **cfg}), T, llm, seed=0)
    return d, llm


def test_forced_listen_for_the_first_units():
    d, llm = decoder([T.speak, 1, 2, T.chunk_eos], force_listen_count=3)
    for _ in range(3):
        r = d.decode(np.zeros(V))  # whatever the logits say
        assert r.is_listen and r.forced_listen and r.terminator == T.listen and r.text == ""
    r = d.decode(llm.logits())
    assert not r.is_listen and not r.forced_listen
    assert llm.fed[:1] == [T.speak]  # nothing was fed for the forced units (listen waits for finalize)


def test_a_speaking_unit_and_its_tts_tokens():
    d, llm = decoder([T.speak, 3, 4, T.turn_eos, 5, T.chunk_eos])
    r = d.decode(llm.logits())
    assert not r.is_listen and r.end_of_turn and r.terminator == T.chunk_eos
    assert llm.fed == [T.speak, 3, 4, T.turn_eos, 5]  # <|turn_eos|> is fed and decoding goes on
    assert r.tokens == [3, 4, T.turn_eos, 5]  # the unit's first (decision) token is left out
    assert [h[0] for h in r.hidden] == [3, 4, T.turn_eos, 5]
    assert r.text == llm.detokenize([3, 4, 5])


@pytest.mark.parametrize("term", [T.listen, T.chunk_eos, T.chunk_tts_eos])
def test_each_terminator_ends_the_unit_unfed(term):
    d, llm = decoder([term])
    r = d.decode(llm.logits())
    assert r.terminator == term and llm.fed == [] and r.is_listen == (term == T.listen)


def test_listen_inside_a_turn_becomes_tts_bos():
    d, llm = decoder([T.speak, 3, T.chunk_eos, T.listen, 4, T.chunk_eos, T.turn_eos, T.listen])
    d.decode(llm.logits())  # opens a turn
    r = d.decode(llm.logits())
    assert not r.is_listen and llm.fed[2] == T.tts_bos and r.tokens == [4]
    r = d.decode(llm.logits())  # <|turn_eos|> closes the turn; then a listen is a listen
    assert d.turn_open is False and r.is_listen and r.text == "" and not r.end_of_turn  # as the demo reports it
    assert r.turn_eos_fed  # but the session learns the turn closed (TTS and Token2Wav start over)


def test_token_and_character_caps():
    d, llm = decoder([T.speak] + [1] * 40, max_tokens_per_unit=6, max_chars_per_unit=1000)
    r = d.decode(llm.logits())
    assert len(llm.fed) == 5 and r.terminator == T.chunk_eos  # slot 6 is a forced <|chunk_eos|>
    d, llm = decoder([T.speak] + [1] * 40, max_chars_per_unit=28)
    r = d.decode(llm.logits())
    assert len(r.text) < 28 and len(r.tokens) == 9 and r.terminator == T.chunk_eos  # 9 x 3 chars
    assert llm.fed == [T.speak] + [1] * 9  # the token that would reach 28 is dropped, not fed


def test_interrupt_closes_an_open_turn_first():
    d, llm = decoder([T.speak, 3, T.chunk_eos, 99 % V, 7, T.chunk_eos])
    d.decode(llm.logits())
    r = d.decode(llm.logits(), force_listen=True)
    assert r.turn_eos_fed and r.is_listen and llm.fed[-1] == T.turn_eos


def _sampler(**cfg):
    return TextSampler(DuplexConfig(**cfg), T, lambda t: t >= FIRST_ADDED, seed=1)


def test_two_stage_draw_takes_chunk_eos_only_untempered():
    s = _sampler(temperature=0.01)
    x = np.full(V, -50.0)
    x[T.chunk_eos] = 50.0  # stage 1 almost surely draws it
    assert s.sample(x) == T.chunk_eos and not s.history  # not recorded
    x[T.chunk_eos], x[5] = 2.0, 2.0  # both likely in stage 1; stage 2 never yields chunk_eos or tts_pad
    x[T.tts_pad] = 40.0
    draws = {s.sample(x.copy()) for _ in range(200)}
    assert T.tts_pad not in draws and draws <= {5, T.chunk_eos}


def test_forbidden_tokens_are_masked_after_the_untempered_draw():
    # as the reference's StreamDecoder: the chunk_eos pre-check sees the raw logits, the draw that
    # picks what is said never sees <|tts_pad|>, <|chunk_eos|> or the forbidden ids
    d, llm = decoder([], forbidden_token_ids=[7, 9])
    x = np.full(V, -30.0)
    x[7], x[9], x[3] = 30.0, 29.0, 5.0  # the forbidden ids lead; 3 is the best allowed token
    assert d.sampler.sample(x.copy()) == 3
    x[T.chunk_eos] = 40.0  # the untempered first draw still ends the unit on <|chunk_eos|>
    assert d.sampler.sample(x.copy()) == T.chunk_eos
    s = _sampler(temperature=1.0, forbidden_token_ids=(7, 9))
    x = np.zeros(V)
    x[7] = x[9] = 8.0
    draws = {s.sample(x.copy()) for _ in range(300)}
    assert not draws & {7, 9, T.tts_pad, T.chunk_eos} and len(draws) > 10
    # in a whole unit: the forbidden token is never fed, the next best is
    script = [T.speak, 7, T.chunk_eos]
    d, llm = decoder(script, forbidden_token_ids=[7])
    logits = llm.logits()  # speak
    r = d.decode(logits)
    assert 7 not in llm.fed and 7 not in r.tokens


def test_forbidden_ids_are_checked():
    assert DuplexConfig(forbidden_token_ids=[9, 3, 9]).forbidden_token_ids == (3, 9)
    for bad in ([-1], ["7"], 7, [True]):
        with pytest.raises(ConfigError) as e:
            DuplexConfig(forbidden_token_ids=bad)
        assert e.value.field == "forbidden_token_ids"
    with pytest.raises(ConfigError, match="vocabulary"):
        TextSampler(DuplexConfig(forbidden_token_ids=[V]), T, lambda t: False, 0, vocab=V)


def test_bad_token_ids_from_a_tokenizer_config(tmp_path):
    import json

    import llama_omni_py as omni
    from llama_omni_py.duplex import bad_token_ids

    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"bad_token_ids": [198, 7, 271, 7], "x": 1}))
    assert bad_token_ids(tmp_path / "tokenizer_config.json") == (7, 198, 271)
    assert bad_token_ids(tmp_path) == (7, 198, 271)  # the directory holding it
    cases = {"missing": None, "nojson": "{", "nokey": "{}", "notints": '{"bad_token_ids": ["a"]}'}
    for name, text in cases.items():
        path = tmp_path / f"{name}.json"
        if text is not None:
            path.write_text(text)
        with pytest.raises(omni.ModelFileError) as e:
            bad_token_ids(path)
        assert e.value.path == str(path)


def test_penalties_and_listen_scale():
    s = _sampler(repetition_penalty=2.0, length_penalty=2.0, listen_prob_scale=3.0, greedy=True)
    s.history.extend([5, T.speak])  # a special in the history is not penalised
    x = np.full(V, -50.0)
    x[T.chunk_eos] = -100.0
    x[5], x[6], x[T.turn_eos], x[T.speak], x[T.listen] = 10.0, 6.0, 11.0, 1.0, 3.0
    # 5 -> 5.0 (penalised), <|turn_eos|> -> 5.5, <|listen|> -> 9.0: 6 stays, the listen wins
    assert s.sample(x) == T.listen
    s2 = _sampler(length_penalty=2.0, greedy=True)
    x2 = np.full(V, -50.0)
    x2[T.chunk_eos] = -100.0
    x2[T.turn_eos], x2[7] = -1.0, -1.5  # a negative <|turn_eos|> logit is multiplied: -2.0
    assert s2.sample(x2) == 7


def test_top_k_top_p_filter():
    x = np.log(np.array([0.5, 0.3, 0.15, 0.05]))
    assert np.count_nonzero(_top_k_top_p(x, 2, 1.0)) == 2
    p = _top_k_top_p(x, 0, 0.7)  # 0.5 < 0.7 <= 0.8: the token crossing p is kept
    assert np.count_nonzero(p) == 2 and p.sum() == pytest.approx(1.0)


class ByteLlm(ScriptedLlm):
    """Tokens 1..3 are the three bytes of 你 (a byte-level vocabulary splits it)."""

    PIECES = {1: b"\xe4", 2: b"\xbd", 3: b"\xa0", 4: b"!"}

    def detokenize_bytes(self, tokens):
        return b"".join(self.PIECES.get(t, b"") for t in tokens)

    def detokenize(self, tokens):
        return self.detokenize_bytes(tokens).decode("utf-8", "replace")


def test_a_character_split_over_two_units_comes_out_whole():
    llm = ByteLlm([T.speak, 4, 1, T.chunk_eos, T.speak, 2, 3, 4, T.turn_eos, T.chunk_eos])
    d = UnitDecoder(DuplexConfig(greedy=True, force_listen_count=0), T, llm, seed=0)
    first = d.decode(llm.logits())
    second = d.decode(llm.logits())
    assert (first.text, second.text) == ("!", "你!")  # no U+FFFD on either side
    assert second.end_of_turn


def test_a_barge_in_drops_a_half_character():
    llm = ByteLlm([T.speak, 1, 2, T.chunk_eos, 0, 0, T.speak, 4, T.turn_eos, T.chunk_eos])  # 0, 0: read by the barge-in
    d = UnitDecoder(DuplexConfig(greedy=True, force_listen_count=0), T, llm, seed=0)
    assert d.decode(llm.logits()).text == ""
    assert d.decode(llm.logits(), force_listen=True).is_listen
    assert d.decode(llm.logits()).text == "!"  # the next turn does not start with a broken character


@pytest.mark.parametrize(
    "field, value",
    [("temperature", -1.0), ("top_p", 0.0), ("force_listen_count", -1), ("max_tokens_per_unit", 1),
     ("audio_queue", 0), ("codes_per_unit", 0), ("cache_policy", "fast"), ("greedy", "yes")],
)  # fmt: skip
def test_duplex_config_names_the_bad_field(field, value):
    with pytest.raises(ConfigError, match=field):
        DuplexConfig(**{field: value})
