"""The reference streaming Token2Wav (minicpmo 0.1.2 stepaudio2 Token2wav.stream, restated here
for the CPU): flow.inference_chunk windows with its cache bounding, then HiFT with an 8-frame mel
cache, a 3840-sample source cache and a Hamming cross-fade; the last 3840 samples held back."""

from __future__ import annotations

import numpy as np
import torch

from llama_omni_py._native import core

from . import hift as hift_ref

MEL_CACHE, SOURCE_CACHE, RECENT = 8, 3840, 100


def prompt_caches(prompt_cache_gguf: str, steps: int, depth: int, heads: int):
    """Our prompt_cache.gguf as the reference flow's cache dict (torch layouts) + speaker vector."""
    g = core.GgufFile(prompt_cache_gguf)
    spk = torch.from_numpy(np.array(g.read("prompt_cache.spk_cb")))[None]
    cnn = np.array(g.read("prompt_cache.conformer_cnn_cache"))  # (6, d)
    att = np.array(g.read("prompt_cache.conformer_att_cache"))  # (L, H, T, 2dk)
    ecnn = np.array(g.read("prompt_cache.estimator_cnn_cache"))  # (2, steps*depth, 2, 2h)
    eatt = np.array(g.read("prompt_cache.estimator_att_cache"))  # (2, steps*depth*H, T, 2hd)
    two_h, te, e = ecnn.shape[3], eatt.shape[2], eatt.shape[3]
    cache = {
        "conformer_cnn_cache": torch.from_numpy(np.ascontiguousarray(cnn.T))[None],
        "conformer_att_cache": torch.from_numpy(att)[:, None],
        "estimator_cnn_cache": torch.from_numpy(
            np.ascontiguousarray(ecnn.reshape(2, steps, depth, 2, two_h).transpose(1, 2, 0, 4, 3))
        ),
        "estimator_att_cache": torch.from_numpy(
            np.ascontiguousarray(eatt.reshape(2, steps, depth, heads, te, e).transpose(1, 2, 0, 3, 4, 5))
        ),
    }
    return cache, spk


class ReferenceStream:
    def __init__(self, flow, hift, cache: dict, spk: torch.Tensor, steps: int):
        self.flow, self.hift, self.cache, self.spk, self.steps = flow, hift, cache, spk, steps
        self.prompt_frames = cache["conformer_att_cache"].shape[3]
        self.prompt_frames_est = cache["estimator_att_cache"].shape[4]
        self.window = torch.from_numpy(np.hamming(2 * SOURCE_CACHE).astype(np.float32))
        self.mel = torch.zeros(1, 80, 0)
        self.source = torch.zeros(1, 1, 0)
        self.speech = torch.zeros(1, 0)

    def stream(self, tokens: np.ndarray, last_chunk: bool) -> np.ndarray:
        with torch.inference_mode():
            chunk_mel, c = self.flow.inference_chunk(
                torch.from_numpy(tokens.astype(np.int64))[None],
                self.spk,
                self.cache,
                last_chunk=last_chunk,
                n_timesteps=self.steps,
            )
            c = {k: v.clone() for k, v in c.items()}
        p, pe = self.prompt_frames, self.prompt_frames_est
        if c["estimator_att_cache"].shape[4] > pe + RECENT:
            a = c["estimator_att_cache"]
            c["estimator_att_cache"] = torch.cat([a[..., :pe, :], a[..., -RECENT:, :]], dim=4)
        if c["conformer_att_cache"].shape[3] > p + RECENT:
            a = c["conformer_att_cache"]
            c["conformer_att_cache"] = torch.cat([a[:, :, :, :p, :], a[:, :, :, -RECENT:, :]], dim=3)
        self.cache = c
        mel = torch.cat([self.mel, chunk_mel], dim=2)
        speech, source = hift_ref.deterministic_forward(self.hift, mel[0], self.source[0, 0])
        speech, source = speech[None], source[None, None]
        if self.speech.shape[-1] > 0:
            n = SOURCE_CACHE
            speech = speech.clone()
            speech[:, :n] = speech[:, :n] * self.window[:n] + self.speech[:, -n:] * self.window[n:]
        first = self.speech.shape[-1] == 0
        self.mel, self.source, self.speech = (
            mel[..., -MEL_CACHE:],
            source[..., -SOURCE_CACHE:],
            speech[:, -SOURCE_CACHE:],
        )
        if not last_chunk:
            speech = speech[:, :-SOURCE_CACHE]
            if first:  # the reference pads the first chunk with 3840 zeros; llama.cpp-omni does not
                speech = torch.cat([torch.zeros(1, SOURCE_CACHE), speech], dim=1)
        return speech[0].numpy()


def stream_all(stream: ReferenceStream, tokens, silence: int = 4218) -> list:
    """Windows a whole token sequence as llama.cpp-omni does (3 silence tokens first, windows of
    28 sliding by 25, the rest as the last chunk); returns each chunk's audio, the first without
    the reference's 3840-sample zero pad (which llama.cpp-omni and we do not emit)."""
    buf = [silence] * 3 + list(tokens)
    out = []
    while len(buf) >= 28:
        out.append(stream.stream(np.array(buf[:28]), False))
        buf = buf[25:]
    out.append(stream.stream(np.array(buf), True))
    out[0] = out[0][SOURCE_CACHE:]
    return out
