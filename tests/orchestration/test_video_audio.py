"""A video's audio segments: the rows the reference gives each, and their embeddings when merged
(the reference's merge_audio_from_same_content) or encoded one by one, against a PyTorch
restatement of MiniCPM-o 4.5's audio_feature_extract + get_audio_embedding on the same weights."""

import math

import numpy as np
import pytest
from reference import apm as ref

from llama_omni_py.modelset import spec as ms
from llama_omni_py.modules.apm import AudioEncoder
from llama_omni_py.video import audio_rows

CHUNK = 480000  # the reference's 30 s feature chunk


def _speech(n, seed):
    rng = np.random.default_rng(seed)
    t = np.arange(n) / 16000
    return (0.3 * np.sin(2 * np.pi * (200 + 50 * seed) * t) + 0.05 * rng.standard_normal(n)).astype(np.float32)


@pytest.mark.parametrize(
    "samples, rows",
    [(16000, 10), (4800, 3), (1600, 1), (1281, 1), (1280, 0), (1, 0), (0, 0), (8000, 5), (480000, 300), (49600, 31)],
)
def test_rows_per_segment_follow_the_processor(samples, rows):
    # get_audio_placeholder: ceil(n/160) -> (f-1)//2+1 -> (c-5)//5+1
    assert audio_rows(samples) == rows


def _reference_rows(r: ref.ReferenceApm, clips: list, merge: bool, chunk_seconds) -> list:
    """The reference, restated: clips joined when merging, cut into 30 s chunks, each chunk's mel
    computed on the chunk zero-padded to 30 s and cut to ceil(n/160) frames, all chunks in one
    padded batch, then the rows handed back to the clips in order."""
    groups = [np.concatenate(clips)] if merge else clips
    chunks = [g[i : i + CHUNK] for g in groups for i in range(0, g.size, CHUNK)]
    mels = []
    for c in chunks:
        frames = math.ceil(c.size / 160)
        mels.append(r.log_mel(np.pad(c, (0, CHUNK - c.size)))[:, :frames])
    block = int(chunk_seconds * 50) if chunk_seconds else 0
    pooled = np.concatenate(r.encode_batch(mels, block))
    out, at = [], 0
    for c in clips:
        out.append(pooled[at : at + audio_rows(c.size)])
        at += audio_rows(c.size)
    return out


@pytest.fixture(scope="module")
def encoders(tiny_dir):
    path = str(tiny_dir / ms.APM_FILE)
    ours = AudioEncoder(tiny_dir, "cpu", 2, exact=True, fidelity="reference")
    return ours, ref.ReferenceApm(path)


@pytest.mark.parametrize(
    "lengths, merge, chunk_seconds",
    [
        # a 7.5 s video: seven 1 s segments and a half one
        ([16000] * 7 + [8000], True, 1.0),
        # 33.05 s: two 30 s chunks, the second 3.05 s (an odd frame count in a padded batch)
        ([16000] * 33 + [800], True, 1.0),
        # the long branch: 3.1-3.2 s segments, full attention
        ([49600, 51200, 51200, 1600], True, None),
        # each segment on its own (no merge), one of them too short for a row
        ([16000, 12000, 1000, 4800], False, 1.0),
    ],
)
def test_segments_match_the_reference(encoders, lengths, merge, chunk_seconds):
    ours, r = encoders
    clips = [_speech(n, seed=i) for i, n in enumerate(lengths)]
    got = ours.encode_as_reference(clips, merge, chunk_seconds)
    want = _reference_rows(r, clips, merge, chunk_seconds)
    assert [g.shape[0] for g in got] == [audio_rows(n) for n in lengths]
    scale = max(np.abs(w).max() for w in want if w.size)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        if w.size:
            assert np.abs(g - w).max() <= 1e-3 * scale


def test_merging_and_chunked_attention_change_the_rows(encoders):
    # The rules are not the same computation: merged segments are normalised and attended together.
    ours, _ = encoders
    clips = [_speech(16000, seed=i) for i in range(3)]
    merged = np.concatenate(ours.encode_as_reference(clips, True, 1.0))
    alone = np.concatenate(ours.encode_as_reference(clips, False, 1.0))
    full = np.concatenate(ours.encode_as_reference(clips, True, None))
    assert merged.shape == alone.shape == full.shape == (30, ours.apm.dims.llm_embd)
    scale = np.abs(merged).max()
    assert np.abs(merged - alone).max() > 1e-3 * scale
    assert np.abs(merged - full).max() > 1e-3 * scale
