"""Every module graph on an accelerator against the same graph on the CPU (tiny set), and
determinism on the accelerator: the same seed gives the same audio twice.

Collected only when ``OMNI_TEST_DEVICE`` names a device (``cuda:0``, ``cann:0``); otherwise the
tests are deselected, never skipped (conftest.py). ``OMNI_TEST_DEVICE=cpu`` compares the CPU
with itself, which checks the test path on a machine without an accelerator:

    OMNI_TEST_DEVICE=cuda:0 pytest tests/modules/test_device_parity.py

``OMNI_PARITY_REPORT=FILE`` writes every comparison's measured error as JSON, so a run on a
lent machine brings the numbers back even when a tolerance fails.

Error measure: relative L2, ||device - cpu|| / ||cpu||, and max |device - cpu| / RMS(cpu)
recorded beside it. Tolerances:

* F16 weights (LLM, TTS, APM, VPM): 2e-2. The CPU multiplies F16 weights with F32 sums; CUDA's
  cuBLAS/MMQ paths may round activations to F16 and accumulate in F16.
* F32 Token2Wav graphs (conformer, DiT, Token2Mel): 1e-2, room for TF32 tensor-core products.
* The whole Token2Wav stream's audio: 5e-2. The vocoder runs on the CPU in both runs, but its
  sine source integrates f0 into a phase of up to ~1e4 rad, which magnifies tiny mel
  differences (docs: Token2Wav parity).

A wrong kernel, layout or cache index gives errors of order 1, far above all three.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

import llama_omni_py as omni
from llama_omni_py._native import core
from llama_omni_py.modelset import spec as ms

DEVICE = os.environ.get("OMNI_TEST_DEVICE", "").strip()
THREADS = max(1, min(8, len(os.sched_getaffinity(0))))
F16_TOL, F32_TOL, AUDIO_TOL = 2e-2, 1e-2, 5e-2

pytestmark = pytest.mark.device

_RESULTS: list[dict] = []


@pytest.fixture(scope="module", autouse=True)
def parity_report():
    yield _RESULTS
    path = os.environ.get("OMNI_PARITY_REPORT")
    if path:
        Path(path).write_text(json.dumps({"device": DEVICE, "comparisons": _RESULTS}, indent=2))


@pytest.fixture(scope="module")
def dev() -> str:
    assert DEVICE, "OMNI_TEST_DEVICE is not set (these tests are deselected without it)"
    resolved = omni.resolve_device(DEVICE)  # a backend this build lacks raises, never a silent CPU
    assert resolved in omni.backends()
    return resolved


def _compare(what: str, got, want, tol: float) -> None:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape, f"{what}: shape {got.shape} on the device, {want.shape} on the CPU"
    finite = bool(np.isfinite(got).all())
    norm = float(np.linalg.norm(want))
    rel = float(np.linalg.norm(got - want) / norm) if norm > 0 else float(np.abs(got).max())
    rms = float(np.sqrt(np.mean(want**2))) or 1.0
    entry = {
        "what": what,
        "device": DEVICE,
        "shape": list(want.shape),
        "rel_l2": rel,
        "max_abs_over_rms": float(np.abs(got - want).max() / rms),
        "tolerance": tol,
        "finite": finite,
    }
    entry["ok"] = finite and rel <= tol
    _RESULTS.append(entry)
    assert finite, f"{what}: non-finite values on {DEVICE}"
    assert rel <= tol, f"{what}: relative L2 error {rel:.3g} > {tol} ({DEVICE} vs cpu)"


def _audio(seconds: float, seed: int = 0) -> np.ndarray:
    t = np.arange(int(seconds * 16000)) / 16000
    noise = np.random.default_rng(seed).standard_normal(t.size)
    return (0.3 * np.sin(2 * np.pi * 440 * t) + 0.05 * noise).astype(np.float32)


def test_apm_encode(tiny_dir, dev):
    path = str(tiny_dir / ms.APM_FILE)
    cpu, acc = core.Apm(path, "cpu", THREADS), core.Apm(path, dev, THREADS)
    mel = cpu.log_mel(_audio(3.0))
    _compare("apm.encode_mel", acc.encode_mel(mel), cpu.encode_mel(mel), F16_TOL)
    # streaming mode: per-layer K/V caches on the device, two pieces
    for a in (cpu, acc):
        a.reset_stream()
    pieces = [mel[:, :100], mel[:, 100:200]]
    got = np.concatenate([acc.encode_mel_streaming(p) for p in pieces])
    want = np.concatenate([cpu.encode_mel_streaming(p) for p in pieces])
    _compare("apm.encode_mel_streaming", got, want, F16_TOL)


@pytest.mark.parametrize("height,width", [(448, 448), (98, 336)])
def test_vpm_encode(tiny_dir, dev, height, width):
    path = str(tiny_dir / ms.VPM_FILE)
    pixels = np.random.default_rng(height * width).standard_normal((3, height, width)).astype(np.float32)
    want = core.Vpm(path, "cpu", THREADS, False).encode(pixels)
    got = core.Vpm(path, dev, THREADS, False).encode(pixels)
    _compare(f"vpm.encode {height}x{width}", got, want, F16_TOL)


def test_tts_projector_and_step_logits(tiny_dir, dev):
    paths = str(tiny_dir / ms.TTS_FILE), str(tiny_dir / ms.PROJECTOR_FILE)
    cpu, acc = core.Tts(*paths, "cpu", THREADS, 512, False), core.Tts(*paths, dev, THREADS, 512, False)
    rng = np.random.default_rng(0)
    toks = [5, 17, 300, 42, 99, 7, 8, 9, 10, 11]
    hid = rng.standard_normal((len(toks), cpu.dims.llm_embd)).astype(np.float32)
    cond_cpu, cond_acc = cpu.conditions(toks, hid, False), acc.conditions(toks, hid, False)
    _compare("tts.conditions (projector + emb_text)", cond_acc, cond_cpu, F16_TOL)
    _compare("tts.forward prefill logits", acc.forward(cond_cpu), cpu.forward(cond_cpu), F16_TOL)
    for i, code in enumerate((3, 100, 42)):  # incremental steps over the KV cache on the device
        row = cpu.code_embedding(code)
        _compare(f"tts.forward step {i} logits", acc.forward(row), cpu.forward(row), F16_TOL)


def test_token2mel_conformer_chunk(tiny_dir, dev):
    path = str(tiny_dir / ms.T2W_DIR / "encoder.gguf")
    cpu, acc = core.internal.ConformerEncoder(path, "cpu", THREADS), core.internal.ConformerEncoder(path, dev, THREADS)
    rng = np.random.default_rng(1)
    d = cpu.dims
    caches_cpu = caches_acc = (None, None)
    for i, n in enumerate((28, 28, 11)):
        xs = rng.standard_normal((n, d.d)).astype(np.float32)  # token embeddings, width d
        last = i == 2
        h_cpu, *caches_cpu = cpu.forward_chunk(xs, last, *caches_cpu)
        h_acc, *caches_acc = acc.forward_chunk(xs, last, *caches_acc)
        _compare(f"conformer chunk {i}", h_acc, h_cpu, F32_TOL)
        _compare(f"conformer chunk {i} att cache", caches_acc[1], caches_cpu[1], F32_TOL)


def test_token2mel_dit_step(tiny_dir, dev):
    path = str(tiny_dir / ms.T2W_DIR / "flow_matching.gguf")
    cpu, acc = core.internal.DitEstimator(path, "cpu", THREADS), core.internal.DitEstimator(path, dev, THREADS)
    assert acc.device.id == dev
    rng = np.random.default_rng(2)
    x, mu, cond = (rng.standard_normal((2, 80, 50)).astype(np.float32) for _ in range(3))  # CFG batch of 2
    spks = rng.standard_normal((2, 80)).astype(np.float32)
    t = rng.random(2).astype(np.float32)
    _compare("dit.forward (CFG batch)", acc.forward(x, mu, t, spks, cond), cpu.forward(x, mu, t, spks, cond), F32_TOL)
    out_cpu, *cache_cpu = cpu.forward_chunk(x, mu, t, spks, cond)
    out_acc, *cache_acc = acc.forward_chunk(x, mu, t, spks, cond)
    _compare("dit.forward_chunk", out_acc, out_cpu, F32_TOL)
    x2 = rng.standard_normal((2, 80, 28)).astype(np.float32)
    mu2, cond2 = (rng.standard_normal((2, 80, 28)).astype(np.float32) for _ in range(2))
    got = acc.forward_chunk(x2, mu2, t, spks, cond2, *cache_cpu)[0]  # same cache in, so one step compared
    want = cpu.forward_chunk(x2, mu2, t, spks, cond2, *cache_cpu)[0]
    _compare("dit.forward_chunk with caches", got, want, F32_TOL)


def test_token2mel_windows(tiny_dir, dev):
    t2w_dir = str(tiny_dir / ms.T2W_DIR)
    cpu, acc = core.internal.Token2Mel(t2w_dir, "cpu", THREADS, 5), core.internal.Token2Mel(t2w_dir, dev, THREADS, 5)
    assert acc.device.id == dev
    rng = np.random.default_rng(3)
    spk = rng.standard_normal(192).astype(np.float32)
    c_cpu, c_acc = core.internal.Token2MelCache(seed=42), core.internal.Token2MelCache(seed=42)
    for i in range(3):
        tok = rng.integers(0, 6561, 28).astype(np.int32)
        _compare(f"token2mel window {i}", acc.chunk(tok, False, spk, c_acc), cpu.chunk(tok, False, spk, c_cpu), F32_TOL)


def _stream(tiny_dir, device: str, tokens: np.ndarray) -> np.ndarray:
    with omni.Token2Wav(tiny_dir, device=device, threads=THREADS) as t2w:
        parts = [t2w.push(tokens[i : i + 25]) for i in range(0, tokens.size, 25)]
        parts.append(t2w.push([], final=True))
    return np.concatenate(parts)


def test_token2wav_stream(tiny_dir, dev):
    tokens = np.random.default_rng(4).integers(0, 6561, 150).astype(np.int32)  # 6 windows + final flush
    want = _stream(tiny_dir, "cpu", tokens)
    got = _stream(tiny_dir, dev, tokens)
    assert want.size >= 5 * 24000
    _compare("token2wav stream audio", got, want, AUDIO_TOL)


def test_llm_logits(tiny_dir, dev):
    path = str(tiny_dir / ms.LLM_FILE)
    cpu_model, acc_model = core.LlmModel(path, "cpu"), core.LlmModel(path, dev)
    assert acc_model.info.device == dev
    toks = cpu_model.tokenize("hello there, how are you today?", True)
    out = {}
    for name, model in (("cpu", cpu_model), ("dev", acc_model)):
        llm = core.Llm(model, n_ctx=128, n_batch=64, threads=THREADS)
        llm.eval_tokens(toks, all_outputs=True)
        out[name] = {
            "logits": np.stack([llm.logits(i) for i in range(len(toks))]),
            "hidden": np.stack([llm.hidden(i) for i in range(len(toks))]),
        }
        _, step_hidden = llm.decode_step(toks[1])  # the same token on both: one step over the KV cache
        out[name].update(step_logits=llm.logits(), step_hidden=step_hidden)
    for key in ("logits", "hidden", "step_logits", "step_hidden"):
        _compare(f"llm {key}", out["dev"][key], out["cpu"][key], F16_TOL)


def test_token2wav_is_deterministic_on_the_device(tiny_dir, dev):
    tokens = np.random.default_rng(5).integers(0, 6561, 100).astype(np.int32)
    a, b = _stream(tiny_dir, dev, tokens), _stream(tiny_dir, dev, tokens)
    assert a.size > 0 and np.array_equal(a, b), f"max |a - b| = {np.abs(a - b).max():.3g}"


def test_speak_is_deterministic_on_the_device(tiny_dir, dev):
    # two runs: a fresh session each (a second reply in one session may reuse the first one's
    # prompt prefix from the KV cache, which is a different computation)
    cfg = omni.EngineConfig(threads=THREADS)
    reply = omni.ReplyConfig(max_new_tokens=30, max_audio_per_chunk=25)
    replies = []
    for _ in range(2):
        with omni.OmniSession(tiny_dir, dev, cfg, reply=reply) as s:
            assert s.device == dev
            replies.append(s.speak("hello there, how are you today?", seed=7))
    a, b = replies
    assert a.audio.size > 0
    assert a.text == b.text and np.array_equal(a.audio, b.audio)
