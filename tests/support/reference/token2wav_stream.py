"""Streaming Token2Wav restated on the PyTorch reference modules, for the CPU.

ReferenceStream: stepaudio2's Token2wav.stream as minicpmo-utils 1.0.7 bounds its caches
(flow.inference_chunk windows; the estimator keeps the prompt's frames + the newest 100, the
conformer trims its token-rate and mel-rate layers each on its own scale), then HiFT with an
8-frame mel cache, a 3840-sample source cache and a Hamming cross-fade, the last 3840 samples
held back. LlamaCppOmniStream: the same modules under llama.cpp-omni's rules (see
docs/token2wav-streaming.md)."""

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
        return self.vocode(self.token2mel(tokens, last_chunk), last_chunk)

    def flow_chunk(self, tokens, last_chunk: bool):
        with torch.inference_mode():
            chunk_mel, c = self.flow.inference_chunk(
                torch.from_numpy(np.asarray(tokens, np.int64))[None],
                self.spk,
                self.cache,
                last_chunk=last_chunk,
                n_timesteps=self.steps,
            )
            return chunk_mel, {k: v.clone() for k, v in c.items()}

    def token2mel(self, tokens: np.ndarray, last_chunk: bool) -> torch.Tensor:
        chunk_mel, c = self.flow_chunk(tokens, last_chunk)
        p, pe = self.prompt_frames, self.prompt_frames_est
        if c["estimator_att_cache"].shape[4] > pe + RECENT:
            a = c["estimator_att_cache"]
            c["estimator_att_cache"] = torch.cat([a[..., :pe, :], a[..., -RECENT:, :]], dim=4)
        a = c["conformer_att_cache"]
        if a.shape[3] > p + RECENT:  # per scale: token-rate layers are tiled [c, c]
            depth = len(self.flow.encoder.encoders)
            tok = a[:depth, :, :, : a.shape[3] // 2]
            tok = torch.cat([tok[:, :, :, : p // 2], tok[:, :, :, tok.shape[3] - RECENT // 2 :]], dim=3)
            mel = torch.cat([a[depth:, :, :, :p], a[depth:, :, :, a.shape[3] - RECENT :]], dim=3)
            c["conformer_att_cache"] = torch.cat([tok.repeat(1, 1, 1, 2, 1), mel], dim=0)
        self.cache = c
        return chunk_mel

    def vocode(self, chunk_mel: torch.Tensor, last_chunk: bool) -> np.ndarray:
        mel = torch.cat([self.mel, chunk_mel], dim=2)
        speech, source = hift_ref.deterministic_forward(self.hift, mel[0], self.source[0, 0])
        speech, source = speech[None], source[None, None]
        if self.speech.shape[-1] > 0:
            n = SOURCE_CACHE
            speech = speech.clone()
            speech[:, :n] = speech[:, :n] * self.window[:n] + self.speech[:, -n:] * self.window[n:]
        self.mel, self.source, self.speech = (
            mel[..., -MEL_CACHE:],
            source[..., -SOURCE_CACHE:],
            speech[:, -SOURCE_CACHE:],
        )
        if not last_chunk:
            speech = speech[:, :-SOURCE_CACHE]
        # The reference also puts 3840 zeros before the first non-final chunk; llama.cpp-omni and
        # we do not emit them, so they are left out here.
        return speech[0].numpy()


class LlamaCppOmniStream(ReferenceStream):
    """llama.cpp-omni's streaming rules, literally: after each window it slices [delta, delta + L)
    (delta = the window's mel frames, L = the prompt's frames) out of the new estimator cache
    [chunk, old] and out of the new conformer cache (token-rate layers [A, A], A = [old half,
    chunk]; mel-rate [old, chunk]); a short final window is padded to 28 with token 4218 and its
    mel cropped to 2 frames per real token."""

    def token2mel(self, tokens: np.ndarray, last_chunk: bool) -> torch.Tensor:
        n = len(tokens)
        padded = list(tokens) + [4218] * (28 - n)
        chunk_mel, c = self.flow_chunk(padded, last_chunk)
        delta = chunk_mel.shape[2]
        p, pe = self.prompt_frames, self.prompt_frames_est
        c["estimator_att_cache"] = c["estimator_att_cache"][..., delta : delta + pe, :]
        c["conformer_att_cache"] = c["conformer_att_cache"][:, :, :, delta : delta + p, :]
        self.cache = c
        return chunk_mel[:, :, : 2 * n]


def stream_all(stream: ReferenceStream, tokens, silence: int = 4218) -> list:
    """Windows a whole token sequence as llama.cpp-omni does (3 silence tokens first, windows of
    28 sliding by 25, the rest as the last chunk); returns each chunk's audio."""
    buf = [silence] * 3 + list(tokens)
    out = []
    while len(buf) >= 28:
        out.append(stream.stream(np.array(buf[:28]), False))
        buf = buf[25:]
    out.append(stream.stream(np.array(buf), True))
    return out
