"""Streaming conformer encoder parity (ggml graph and native CPU code) with the reference
UpsampleConformerEncoderV2."""

import numpy as np
import pytest
import torch  # reference dependency, installed by scripts/install-reference.sh
from reference import flow as ref

from llama_omni_py._native import core
from llama_omni_py.errors import InvalidArgumentError
from llama_omni_py.modelset import generate as modelgen
from llama_omni_py.modelset import spec as ms

TOL = 1e-4


def _check(got, want, what):
    want = np.asarray(want)
    assert got.shape == want.shape, what
    rms = np.sqrt(np.mean(want.astype(np.float64) ** 2))
    err = np.abs(got - want).max()
    assert err <= TOL * rms, f"{what}: max|diff| {err:.3g} > {TOL} x RMS {rms:.3g}"


def _stream(model, enc, chunks):
    """Runs both encoders over the same chunks (last one final), comparing every output."""
    cache_t = cache_o = None
    for i, xs in enumerate(chunks):
        last = i == len(chunks) - 1
        with torch.inference_mode():
            h, cnn, att = model.forward_chunk(
                torch.from_numpy(xs)[None],
                last_chunk=last,
                cnn_cache=cache_t[0] if cache_t else None,
                att_cache=cache_t[1] if cache_t else None,
            )
        oh, ocnn, oatt = enc.forward_chunk(xs, last, *(cache_o or (None, None)))
        _check(oh, h[0].numpy(), f"chunk {i} output")
        _check(ocnn, cnn[0].numpy().T, f"chunk {i} cnn cache")  # ours is (frames, channels)
        _check(oatt, att[:, 0].numpy(), f"chunk {i} att cache")
        cache_t, cache_o = (cnn, att), (ocnn, oatt)


@pytest.mark.parametrize("token2mel", ["graph", "native"])
def test_streaming_chunks_match_reference(tiny_dir, token2mel):
    path = str(tiny_dir / "token2wav-gguf" / "encoder.gguf")
    model, enc = ref.build_encoder(path), core.internal.ConformerEncoder(path, "cpu", 2, token2mel=token2mel)
    assert enc.token2mel == token2mel
    assert (enc.dims.d, enc.dims.blocks, enc.dims.up_blocks) == (64, 2, 2)
    rng = np.random.default_rng(0)
    chunks = [rng.standard_normal((n, 64)).astype(np.float32) for n in (28, 28, 28, 11)]
    _stream(model, enc, chunks)


def test_native_token2mel_on_every_kernel_set(tiny_dir, cpu_isa):
    path = str(tiny_dir / "token2wav-gguf" / "encoder.gguf")
    model, enc = ref.build_encoder(path), core.internal.ConformerEncoder(path, "cpu", 2, token2mel="native")
    rng = np.random.default_rng(1)
    _stream(model, enc, [rng.standard_normal((n, 64)).astype(np.float32) for n in (28, 28, 5)])


def test_rel_position_table_matches_reference():
    emb = __import__("reference.stepaudio2_loader", fromlist=["load"]).load(
        "stepaudio2.cosyvoice2.transformer.embedding"
    )
    pe = emb.EspnetRelPositionalEncoding(64, 0.0)
    want = pe.position_encoding(offset=None, size=37)[0].numpy()
    got = np.asarray(core.internal.rel_position_table(64, 37)).reshape(-1, 64)
    np.testing.assert_allclose(got, want, atol=2e-6)


def test_bad_input(tiny_dir):
    enc = core.internal.ConformerEncoder(str(tiny_dir / "token2wav-gguf" / "encoder.gguf"), "cpu", 1)
    with pytest.raises(InvalidArgumentError):
        enc.forward_chunk(np.zeros((3, 64), np.float32), False)  # only the look-ahead
    with pytest.raises(InvalidArgumentError):
        enc.forward_chunk(np.zeros((28, 32), np.float32), False)
    with pytest.raises(InvalidArgumentError):
        enc.forward_chunk(np.zeros((28, 64), np.float32), False, None, np.zeros((4, 2, 3, 64), np.float32))


@pytest.mark.slow
def test_real_dimensions(tmp_path):
    f = next(f for f in ms.FILES if f.key == "token2wav.encoder")
    modelgen.write_file(f, tmp_path, ms.preset("real"), ms.build_vocab(False), seed=0)
    path = str(tmp_path / f.relpath)
    model = ref.build_encoder(path)
    for token2mel in ("graph", "native"):
        enc = core.internal.ConformerEncoder(path, "cpu", 2, token2mel=token2mel)
        assert (enc.dims.d, enc.dims.heads, enc.dims.blocks, enc.dims.up_blocks) == (512, 8, 6, 4)
        rng = np.random.default_rng(1)
        _stream(model, enc, [rng.standard_normal((n, 512)).astype(np.float32) for n in (28, 28, 7)])
