"""Token2Wav cache policies at real dimensions: how far the "llama.cpp-omni" and "reference"
streams are from each other and from the offline (whole-utterance, not streamed) PyTorch output
of the same tokens. See docs/token2wav-streaming.md for the rules being compared.

    python benchmarks/t2w_policies.py [--model-dir DIR] [--windows 12] [--seed 0] [--out FILE]

The set's prompt_cache.gguf holds caches only (no prompt tokens or mel), so an offline run cannot
use it. This script builds a synthetic voice prompt instead: random prompt tokens, whose mel is
the model's own offline output for them; the PyTorch flow's setup_cache turns tokens + mel into
a prompt cache (minicpmo-utils 1.0.7's way, the prompt's first 3 tokens as look-ahead), written
as prompt_cache.gguf beside the set's other Token2Wav files. Both streams (our engine) and the
offline run then share that prompt. Noise is zero everywhere (temperature 0), and HiFT runs
without its random phase, so every difference comes from streaming itself: chunked attention
with 3 tokens of look-ahead, bounded caches, chunked vocoding with cross-fades.

Per window: relative RMS error (||a - b|| / ||b||) of the audio over the window's samples, and
of the mel (streamed by the PyTorch modules under each policy, which match our engine to 1e-4 x
RMS, see tests/modules/test_token2wav_stream_parity.py) against the offline mel. A second table repeats the
policy-vs-policy distance with the set's own prompt_cache.gguf. Without --model-dir a
real-dimension token2wav-gguf (random weights, ~740 MB) is written to
~/.cache/llama-omni/bench-token2wav. Needs scripts/install-reference.sh.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))

from common import write_result  # noqa: E402

from llama_omni_py._native import core  # noqa: E402
from llama_omni_py.config import Token2WavConfig  # noqa: E402
from llama_omni_py.modelset import generate as modelgen  # noqa: E402
from llama_omni_py.modelset import spec as ms  # noqa: E402
from llama_omni_py.modelset.gguf_writer import GgufWriter  # noqa: E402
from llama_omni_py.modules import token2wav  # noqa: E402

SILENCE, HOP, WINDOW, SAMPLES_PER_FRAME = 4218, 25, 28, 480
POLICIES = ("llama.cpp-omni", "reference")


def real_token2wav(cache: Path) -> Path:
    for f in ms.files_of("token2wav"):
        if not (cache / f.relpath).exists():
            modelgen.write_file(f, cache, ms.preset("real"), ms.build_vocab(False), seed=0)
    return cache / ms.T2W_DIR


def write_prompt_cache(path: Path, cache: dict, spk: torch.Tensor, steps: int) -> None:
    """The reference flow's cache dict as prompt_cache.gguf (the inverse of
    tests/support/reference/token2wav_stream.prompt_caches)."""
    ecnn = cache["estimator_cnn_cache"].permute(2, 0, 1, 4, 3)  # (2, steps, depth, 2, 2h)
    eatt = cache["estimator_att_cache"].permute(2, 0, 1, 3, 4, 5)  # (2, steps, depth, H, T, 2hd)
    arrays = {
        "prompt_cache.spk_cb": spk[0],
        "prompt_cache.conformer_cnn_cache": cache["conformer_cnn_cache"][0].T,
        "prompt_cache.conformer_att_cache": cache["conformer_att_cache"][:, 0],
        "prompt_cache.estimator_cnn_cache": ecnn.reshape(2, -1, *ecnn.shape[3:]),
        "prompt_cache.estimator_att_cache": eatt.reshape(2, -1, *eatt.shape[4:]),
    }
    arrays = {k: np.ascontiguousarray(v.numpy(), np.float32) for k, v in arrays.items()}
    w = GgufWriter(path)
    for key, vtype, value in ms.prompt_cache_metadata(replace(ms.T2W_REAL, cfm_steps=steps)):
        w.add(key, vtype, value)
    for name, a in arrays.items():
        w.declare(name, tuple(reversed(a.shape)), "f32")
    w.write(lambda name, ne, dt: [arrays[name].reshape(-1)])


def offline(flow, hift_ref, hift, tokens, ptok, pmel, spk, steps):
    """Whole-utterance mel (80, frames) and audio of `tokens` after the prompt."""
    tok = torch.tensor([tokens], dtype=torch.int32)
    with torch.inference_mode():
        mel = flow.inference(
            tok,
            torch.tensor([tok.shape[1]]),
            ptok,
            torch.tensor([ptok.shape[1]]),
            pmel,
            torch.tensor([pmel.shape[1]]),
            spk,
            steps,
        )
    audio, _ = hift_ref.deterministic_forward(hift, mel[0], torch.zeros(0))
    return mel[0].numpy(), audio.numpy()


def ours(t2w_dir, policy, tokens, steps):
    t = core.Token2Wav(
        str(t2w_dir),
        token2wav.to_native(Token2WavConfig(steps=steps, threads=2, temperature=0.0, cache_policy=policy), "cpu"),
    )
    return np.concatenate([t.push(np.asarray(tokens, np.int32)), t.push(np.zeros(0, np.int32), final=True)])


def streamed_mel(stream, tokens):
    """The PyTorch modules' streamed mel (80, frames) under one policy's rules."""
    buf, out = [SILENCE] * 3 + list(tokens), []
    while len(buf) >= WINDOW:
        out.append(stream.token2mel(np.array(buf[:WINDOW]), False))
        buf = buf[HOP:]
    out.append(stream.token2mel(np.array(buf), True))
    return torch.cat(out, dim=2)[0].numpy()


def windows(n_tokens):
    """Mel-frame ranges of the stream's windows (3 silence tokens first): 50 per full window."""
    n, out, start = 3 + n_tokens, [], 0
    while n >= WINDOW:
        out.append((start, start + 2 * HOP))
        start, n = start + 2 * HOP, n - HOP
    out.append((start, start + 2 * n))
    return out


def rel(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model-dir", help="module set or token2wav-gguf directory at real dimensions")
    ap.add_argument("--windows", type=int, default=12, help="full windows before the final one (>= 8)")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out")
    args = ap.parse_args()
    from reference import flow as flow_ref
    from reference import hift as hift_ref
    from reference.token2wav_stream import LlamaCppOmniStream, ReferenceStream, prompt_caches

    if args.model_dir:
        src = Path(args.model_dir)
        src = src / ms.T2W_DIR if (src / ms.T2W_DIR).is_dir() else src
    else:
        src = real_token2wav(Path.home() / ".cache/llama-omni/bench-token2wav")
    rng = np.random.default_rng(args.seed)
    tokens = rng.integers(0, 6561, HOP * args.windows + 7).tolist()  # final window: 10 tokens
    flow = flow_ref.build_flow(str(src), args.steps)
    flow.decoder.rand_noise.zero_()
    hift = hift_ref.build(str(src / "hifigan2.gguf"))
    dit = flow.decoder.estimator
    depth, heads = len(dit.blocks), dit.blocks[0].attn.num_heads
    set_cache, spk = prompt_caches(str(src / "prompt_cache.gguf"), args.steps, depth, heads)
    prompt_tokens = set_cache["conformer_att_cache"].shape[3] // 2

    # Synthetic voice prompt: tokens, and their offline mel (no prompt of its own) as the prompt mel.
    ptok = torch.tensor([rng.integers(0, 6561, prompt_tokens).tolist()], dtype=torch.int32)
    empty = torch.zeros(1, 0, dtype=torch.int32)
    with torch.inference_mode():
        pmel = flow.inference(
            ptok,
            torch.tensor([prompt_tokens]),
            empty,
            torch.tensor([0]),
            torch.zeros(1, 0, 80),
            torch.tensor([0]),
            spk,
            args.steps,
        ).transpose(1, 2)
        cache = flow.setup_cache(torch.cat([ptok, ptok[:, :3]], dim=1), pmel, spk, n_timesteps=args.steps)
    cache = {k: v.clone() for k, v in cache.items()}

    stream_tokens = [SILENCE] * 3 + tokens
    off_mel, off_audio = offline(flow, hift_ref, hift, stream_tokens, ptok, pmel, spk, args.steps)
    ranges = windows(len(tokens))
    result = {
        "windows": len(ranges),
        "tokens": len(tokens),
        "prompt_frames": 2 * prompt_tokens,
        "steps": args.steps,
        "synthetic_prompt": [],
        "set_prompt_cache": [],
    }
    with tempfile.TemporaryDirectory() as tmp:
        t2w = Path(tmp)
        for f in ("encoder", "flow_matching", "flow_extra", "hifigan2"):
            (t2w / f"{f}.gguf").symlink_to((src / f"{f}.gguf").resolve())
        write_prompt_cache(t2w / "prompt_cache.gguf", cache, spk, args.steps)
        audio = {p: ours(t2w, p, tokens, args.steps) for p in POLICIES}
        mels = {
            p: streamed_mel(cls(flow, hift, {k: v.clone() for k, v in cache.items()}, spk, args.steps), tokens)
            for p, cls in zip(POLICIES, (LlamaCppOmniStream, ReferenceStream))
        }
        set_audio = {p: ours(src, p, tokens, args.steps) for p in POLICIES}
    assert all(len(a) == len(off_audio) for a in audio.values()) and off_mel.shape == mels[POLICIES[0]].shape

    print(
        f"{len(tokens)} tokens, {len(ranges)} windows, prompt {2 * prompt_tokens} mel frames, "
        f"{args.steps} steps, noise 0. Relative RMS error ||a-b||/||b|| per window."
    )
    print(
        "synthetic prompt       | audio: omni-vs-ref omni-vs-offline ref-vs-offline | mel: omni-vs-ref "
        "omni-vs-offline ref-vs-offline"
    )
    for i, (a, b) in enumerate(ranges):
        s = slice(a * SAMPLES_PER_FRAME, b * SAMPLES_PER_FRAME)
        lo, re = audio["llama.cpp-omni"][s], audio["reference"][s]
        mo, mr, mf = mels["llama.cpp-omni"][:, a:b], mels["reference"][:, a:b], off_mel[:, a:b]
        row = {
            "window": i + 1,
            "mel_frames": [a, b],
            "audio": {
                "omni_vs_ref": rel(lo, re),
                "omni_vs_offline": rel(lo, off_audio[s]),
                "ref_vs_offline": rel(re, off_audio[s]),
            },
            "mel": {"omni_vs_ref": rel(mo, mr), "omni_vs_offline": rel(mo, mf), "ref_vs_offline": rel(mr, mf)},
        }
        result["synthetic_prompt"].append(row)
        print(
            f"window {i + 1:2d} [{a:4d},{b:4d}) |        "
            + " ".join(f"{v:14.3f}" for v in row["audio"].values())
            + "  |     "
            + " ".join(f"{v:14.3f}" for v in row["mel"].values())
        )
    print("set's prompt_cache.gguf | audio: omni-vs-ref")
    for i, (a, b) in enumerate(ranges):
        s = slice(a * SAMPLES_PER_FRAME, b * SAMPLES_PER_FRAME)
        d = rel(set_audio["llama.cpp-omni"][s], set_audio["reference"][s])
        result["set_prompt_cache"].append({"window": i + 1, "audio": {"omni_vs_ref": d}})
        print(f"window {i + 1:2d} [{a:4d},{b:4d}) | {d:14.3f}")
    write_result("t2w_policies", result, [src / f"{f}.gguf" for f in ms.T2W_FILES], args.out)


if __name__ == "__main__":
    main()
