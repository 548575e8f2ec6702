"""The duplex LLM context: the protected prefix, unit spans, and pruning of whole units with the
positions shifted -- the logits afterwards equal a fresh prefill of what was kept."""

import numpy as np
import pytest

from llama_omni_py.duplex.context import UnitContext
from llama_omni_py.modelset.layout import discover
from llama_omni_py.modules.llm.model import LanguageModel


@pytest.fixture(scope="module")
def lm(tiny_dir):
    return LanguageModel(discover(tiny_dir).llm, "cpu", 1024, 1, exact=True, prompt_cache=False)


def _fill(ctx: UnitContext, rng, units: int):
    n_embd = ctx.lm.model.info.n_embd_inp
    for u in range(units):
        ctx.prefill_unit(5, [], rng.standard_normal((10, n_embd)).astype(np.float32) * 0.1)
        ctx.feed(7 + u % 5)
        ctx.finalize_unit(9, 11)


def _fresh_logits(lm: LanguageModel, parts, token: int) -> np.ndarray:
    lm.llm.keep(0)
    for p in parts:
        if isinstance(p, (int, np.integer)):
            lm.llm.eval_tokens([int(p)])
        elif isinstance(p, list):
            lm.llm.eval_tokens(p)
        else:
            lm.llm.eval_embeddings(np.ascontiguousarray(p, dtype=np.float32))
    lm.llm.eval_tokens([token])
    return np.asarray(lm.llm.logits())


def test_pruning_keeps_the_prefix_and_evaluates_the_kept_units_again(lm):
    rng = np.random.default_rng(0)
    ctx = UnitContext(lm)
    voice = rng.standard_normal((6, lm.model.info.n_embd_inp)).astype(np.float32) * 0.1
    ctx.start([1, 2, 3, 4], voice, [5, 6])
    assert ctx.n_keep == 12
    _fill(ctx, rng, 8)  # 8 units of 14 positions
    assert ctx.n_past == 12 + 8 * 14 and [u.length for u in ctx.units] == [14] * 8
    dropped = ctx.prune(high=100, low=70)
    assert dropped == 4 * 14 and ctx.n_past == 12 + 4 * 14 and ctx.pruned_units == 4
    assert ctx.units[0].start == ctx.n_keep  # the first kept unit now follows the prefix
    pruned, _ = ctx.feed(8)
    fresh = _fresh_logits(lm, ctx.kept_parts()[:-1], 8)  # the last part is the token just fed
    assert np.abs(pruned - fresh).max() <= 1e-3 * np.abs(fresh).max()
    assert ctx.prune(high=10_000, low=5_000) == 0  # below the limit: nothing happens


def test_a_long_session_stays_bounded(lm):
    rng = np.random.default_rng(1)
    ctx = UnitContext(lm)
    ctx.start([1, 2], None, [3])
    peak = 0
    for _ in range(60):
        _fill(ctx, rng, 1)
        ctx.prune(high=200, low=150)
        peak = max(peak, ctx.n_past)
    assert peak <= 200 + 14 and ctx.pruned_units > 40 and ctx.n_keep == 3
