"""The reference HiFT (flashcosyvoice HiFTGenerator) with weights read from our hifigan2.gguf."""

from __future__ import annotations

import contextlib

import numpy as np
import torch
from torch.nn.utils import parametrize

from llama_omni_py._native import core

from .stepaudio2_loader import load


def build(hifigan_gguf: str) -> torch.nn.Module:
    hifigan = load("stepaudio2.flashcosyvoice.modules.hifigan")
    g = core.GgufFile(hifigan_gguf)
    base = g.find_tensor("conv_pre.weight").ne[2]
    f0_ch = g.find_tensor("f0_predictor.condnet.0.weight").ne[2]
    model = hifigan.HiFTGenerator(
        in_channels=80, base_channels=base, f0_predictor=hifigan.ConvRNNF0Predictor(1, 80, f0_ch)
    )
    # The GGUF stores weight-norm-folded weights: drop the parametrizations, then load plainly.
    for m in model.modules():
        if parametrize.is_parametrized(m, "weight"):
            parametrize.remove_parametrizations(m, "weight", leave_parametrized=True)
    state = {t.name: torch.from_numpy(np.array(g.read(t.name))) for t in g.tensors}
    missing, unexpected = model.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise AssertionError(f"reference HiFT does not match the file: missing {missing}, unexpected {unexpected}")
    return model.eval()


@contextlib.contextmanager
def _no_randomness():
    """SineGen2 draws a random initial phase and noise on every call; llama.cpp-omni (and our
    engine) use zero for both. Patch the two torch draws it makes to zeros."""
    real_rand, real_randn_like = torch.rand, torch.randn_like
    torch.rand = lambda *a, **k: torch.zeros(*a, **{kk: v for kk, v in k.items() if kk in ("device", "dtype")})
    torch.randn_like = lambda x, **k: torch.zeros_like(x)
    try:
        yield
    finally:
        torch.rand, torch.randn_like = real_rand, real_randn_like


def deterministic_source(model: torch.nn.Module, f0: torch.Tensor) -> torch.Tensor:
    """m_source on nearest-upsampled f0, without randomness. f0: (frames,) -> (frames*480,)."""
    with _no_randomness(), torch.inference_mode():
        s = model.f0_upsamp(f0[None, None]).transpose(1, 2)
        s, _, _ = model.m_source(s)
    return s[0, :, 0]


def deterministic_forward(model: torch.nn.Module, mel: torch.Tensor, cache_source: torch.Tensor):
    """model(mel, cache_source) without randomness -> (audio (n,), excitation (n,))."""
    with _no_randomness(), torch.inference_mode():
        audio, src = model(mel[None], cache_source[None, None])
    return audio[0], src[0, 0]
