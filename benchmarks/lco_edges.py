"""The edge cases of benchmarks/lco_compare.py: inputs where llama.cpp-omni's rules differ from
ours by more than arithmetic (docs/fidelity.md, "Edge cases"), each beside every rule that
applies:

* a pure tone (440 Hz), 1 s and 3 s, under both audio fidelities;
* a voice sample followed by a spoken question: its encoder carries the voice's history into the
  question; ours per clip (``audio_history="clip"``) and carried (``"carried"`` with
  ``audio_positions="chunk-count"``, its rule);
* streaming chunks of unequal size (1 s, 0.6 s, 1 s, 0.6 s): ``stream_positions`` consecutive
  (ours) and chunk-count (its rule);
* a JPEG (4:2:0 and 4:4:4) and a PNG of the same picture through its own image loader:
  ``jpeg_decoder`` stb_image and pillow;
* audio files at 44.1 kHz (16-bit stereo) and 8 kHz (16-bit mono): ``resampler`` linear (its
  decoder's) and band-limited.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from lco import distance, photo_like, speech_like

from llama_omni_py.content import Audio
from llama_omni_py.modules.apm import AudioEncoder
from llama_omni_py.modules.vpm import ImageEncoder
from llama_omni_py.orchestration.inputs import InputEncoder, Request
from llama_omni_py.vision import VisionConfig

TONES = (16000, 48000)  # samples at 16 kHz
CHUNKS = (16000, 9600, 16000, 9600)  # 1 s, 0.6 s, 1 s, 0.6 s
VOICE, QUESTION = 48000, 40000  # 3 s of voice sample, then a 2.5 s question
RATES = (44100, 8000)


def tone(n: int, rate: int = 16000, hz: float = 440.0) -> np.ndarray:
    return (0.5 * np.sin(2 * np.pi * hz * np.arange(n) / rate)).astype(np.float32)


def at_rate(seconds: float, rate: int, seed: int) -> np.ndarray:
    """speech_like content, generated at ``rate`` (a voiced tone sweep, harmonics up to 1 kHz)."""
    n = int(seconds * rate)
    t = np.arange(n) / rate
    rng = np.random.default_rng(seed)
    f0 = 140 + 40 * np.sin(2 * np.pi * 0.7 * t)
    x = sum(np.sin(2 * np.pi * k * np.cumsum(f0) / rate) / k for k in range(1, 8))
    return (0.2 * x * (1 + np.sin(2 * np.pi * 3 * t)) + 0.01 * rng.standard_normal(n)).astype(np.float32)


def _row(label: str, want: np.ndarray, ours: dict, source) -> dict:
    """One input's row: llama.cpp-omni's rows and each of our encoders' distance on ``source``."""
    row = {"input": label, "rows": want.shape[0]}
    for rule, enc in ours.items():
        row[rule] = distance(enc.encode(source), want)
    return row


def compare_tones(theirs, model_dir: Path, threads: int) -> list[dict]:
    ours = {f: AudioEncoder(model_dir, threads=threads, fidelity=f) for f in ("llama.cpp-omni", "reference")}
    return [_row(f"440 Hz tone, {n / 16000:.0f} s", theirs.audio(tone(n)), ours, tone(n)) for n in TONES]


def compare_history(theirs, model_dir: Path, threads: int) -> list[dict]:
    voice, question = speech_like(VOICE, seed=7), speech_like(QUESTION, seed=8)
    theirs.audio(voice)  # its prompt's voice sample: the encoder keeps its history
    want = theirs.audio(question, clear=False)
    row = {"input": f"voice {VOICE / 16000:.1f} s, then a {QUESTION / 16000:.1f} s question", "rows": want.shape[0]}
    rules = {
        "clip": {},
        "carried, consecutive": {"audio_history": "carried"},
        "carried, chunk-count": {"audio_history": "carried", "audio_positions": "chunk-count"},
    }
    for name, kw in rules.items():
        enc = InputEncoder(model_dir, "cpu", threads, "clamp", **kw)
        media = enc.encode(Request((Audio(question),), ref_audio=voice))
        row[name] = distance(media.user.parts[0][1], want)
    return [row]


def compare_chunks(theirs, model_dir: Path, threads: int) -> list[dict]:
    chunks = [speech_like(n, seed=200 + i) for i, n in enumerate(CHUNKS)]
    want = [theirs.audio(c, clear=(i == 0)) for i, c in enumerate(chunks)]
    rows = [
        {"input": f"chunk {i + 1}: {c.size / 16000:.1f} s", "rows": w.shape[0]}
        for i, (c, w) in enumerate(zip(chunks, want))
    ]
    for rule in ("consecutive", "chunk-count"):
        enc = AudioEncoder(model_dir, threads=threads, stream_positions=rule)
        for row, c, w in zip(rows, chunks, want):
            row[rule] = distance(enc.encode_chunk(c), w)
    return rows


def compare_images(theirs, model_dir: Path, threads: int, tmp: Path) -> list[dict]:
    from PIL import Image

    img = Image.fromarray(photo_like(960, 540, seed=11))
    files = {
        "JPEG 4:2:0, q 90": ("a.jpg", {"quality": 90}),
        "JPEG 4:4:4, q 95": ("b.jpg", {"quality": 95, "subsampling": 0}),
    }
    files["PNG"] = ("c.png", {})
    ours = {
        d: ImageEncoder(model_dir, threads=threads, vision=VisionConfig(jpeg_decoder=d))
        for d in ("stb_image", "pillow")
    }
    rows = []
    for label, (name, options) in files.items():
        path = tmp / name
        img.save(path, **options)
        rows.append(_row(f"960x540 {label}", theirs.image_file(path), ours, path))
    return rows


def compare_rates(theirs, model_dir: Path, threads: int, tmp: Path) -> list[dict]:
    import soundfile as sf

    ours = {r: AudioEncoder(model_dir, threads=threads, resampler=r) for r in ("linear", "band-limited")}
    rows = []
    for i, rate in enumerate(RATES):
        x = at_rate(2.0, rate, seed=30 + i)
        stereo = rate == 44100
        data = np.stack([x, 0.8 * x[::-1]], axis=1) if stereo else x
        path = tmp / f"rate-{rate}.wav"
        sf.write(path, data, rate, subtype="PCM_16")
        label = f"{rate / 1000:g} kHz 16-bit {'stereo' if stereo else 'mono'}, 2 s"
        rows.append(_row(label, theirs.audio_file(path), ours, path))
    return rows


def compare(theirs, model_dir: Path, threads: int, tmp: Path) -> dict:
    return {
        "tone": compare_tones(theirs, model_dir, threads),
        "history": compare_history(theirs, model_dir, threads),
        "chunks": compare_chunks(theirs, model_dir, threads),
        "jpeg": compare_images(theirs, model_dir, threads, tmp),
        "rates": compare_rates(theirs, model_dir, threads, tmp),
    }


COLUMNS = {
    "tone": ["rows", "llama.cpp-omni", "reference"],
    "history": ["rows", "clip", "carried, consecutive", "carried, chunk-count"],
    "chunks": ["rows", "consecutive", "chunk-count"],
    "jpeg": ["rows", "stb_image", "pillow"],
    "rates": ["rows", "linear", "band-limited"],
}
