"""The pipeline part of benchmarks/lco_compare.py: one greedy request per class through
llama.cpp-omni's own pipeline (lco_drivers/pipeline_driver.cpp), then ours beside it:

* prompt: its LLM input (token ids, and embedding rows by kind) beside the prompt our engine
  builds for the same request (``fidelity="llama.cpp-omni"``), with the first difference shown;
* embeddings: its voice / audio / image rows beside our encoders' for the same input;
* reply: our LLM's greedy reply to *its* prompt, token for token;
* codes: our TTS's greedy codes from *its* chunks (token ids and hidden states as its LLM handed
  them to its TTS), code for code. Its greedy TTS is a plain argmax of the code logits, so ours
  runs with temperature 0 and no repetition penalty.

Its pipeline has no text input: the driver evaluates the question's tokens after the media, where
our engine puts them.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import lco
import numpy as np
from lco import distance, photo_like, speech_like

from llama_omni_py.config import LlmSampling, TtsSampling
from llama_omni_py.modelset import spec as ms
from llama_omni_py.modelset.layout import discover
from llama_omni_py.modules.apm import AudioEncoder
from llama_omni_py.modules.llm.model import LanguageModel
from llama_omni_py.modules.llm.prompt import EncodedMessage, Prompt, turn_based_prompt
from llama_omni_py.modules.tts import TtsModel
from llama_omni_py.modules.vpm import ImageEncoder

N_PREDICT = 20  # two chunks of 10 text tokens
CODE_LIMIT = 500  # codes per text chunk, both engines


@dataclass
class Request:
    name: str
    text: str = ""
    audio: np.ndarray | None = None
    ref_audio: np.ndarray | None = None
    image: np.ndarray | None = None


REQUESTS = (
    Request("text", text="What is the weather like today?"),
    Request("spoken question", audio=speech_like(40000, seed=1)),
    Request("voice cloning", text="Say hello.", ref_audio=speech_like(48000, seed=2)),
    Request("image", text="What is in the picture?", image=photo_like(960, 540, seed=3)),
)


@dataclass
class Theirs:
    segments: list = field(default_factory=list)  # ("tokens", ids) / ("embeddings", rows)
    reply: list = field(default_factory=list)
    chunks: list = field(default_factory=list)  # (token ids, hidden rows, codes) per finished chunk


def _wav(path: Path, samples: np.ndarray) -> str:
    import soundfile as sf

    sf.write(path, samples, 16000, subtype="FLOAT")
    return str(path)


def run_theirs(exe: Path, model_dir: Path, llm: Path, req: Request, out: Path, threads: int) -> Theirs:
    """Runs the driver until its reply is written and the TTS finished the reply's chunks (its
    speech stage never ends a reply cut at n_predict, so the driver is stopped then)."""
    out.mkdir(parents=True)
    voice = _wav(out / "voice.wav", req.ref_audio) if req.ref_audio is not None else "-"
    audio = _wav(out / "user.wav", req.audio) if req.audio is not None else "-"
    image = "-"
    if req.image is not None:
        from PIL import Image

        image = str(out / "user.png")
        Image.fromarray(req.image).save(image)
    text = "-"
    if req.text:
        text = str(out / "user.txt")
        Path(text).write_text(req.text)
    media_type = "2" if req.image is not None else "1"
    cmd = [str(exe), str(model_dir), str(llm), str(threads), str(out), media_type, voice, audio, image, text]
    cmd += [str(N_PREDICT), "600"]
    with open(out / "driver.log", "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 1200
            while proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.5)
                if _finished(out):
                    break
        finally:
            proc.kill()
            proc.wait()
    return _read(out)


def _reply(out: Path) -> list[int]:
    p = out / "reply.txt"
    return [int(t) for t in p.read_text().split()] if p.exists() else []


def _finished(out: Path) -> bool:
    """The reply is complete and the TTS has written the codes of each of its chunks."""
    if len(_reply(out)) < N_PREDICT:
        return False
    debug = out / "run" / "round_000" / "llm_debug"
    chunks = sorted(debug.glob("chunk_*")) if debug.exists() else []
    if not chunks:
        return False
    wav = out / "run" / "round_000" / "tts_wav"
    last = len(chunks) - 1
    return (wav / f"audio_tokens_chunk_{last}.txt").exists() and len(chunks) * 10 >= N_PREDICT


def _read(out: Path) -> Theirs:
    t = Theirs(reply=_reply(out))
    n_embd_files = 0
    for line in (out / "prompt.txt").read_text().splitlines():
        kind, _, rest = line.partition(" ")
        if kind == "T":
            t.segments.append(("tokens", [int(x) for x in rest.split()]))
        elif kind == "E":
            rows = np.fromfile(out / f"embd_{n_embd_files}.f32", np.float32).reshape(int(rest), -1)
            t.segments.append(("embeddings", rows))
            n_embd_files += 1
    run = out / "run" / "round_000"
    for k in range(1000):
        d, codes = run / "llm_debug" / f"chunk_{k}", run / "tts_wav" / f"audio_tokens_chunk_{k}.bin"
        if not (d / "llm_hidden_states.bin").exists() or not codes.exists():
            break
        ids = [int(x) for x in (d / "llm_token_ids.txt").read_text().split()]
        raw = np.fromfile(d / "llm_hidden_states.bin", np.int32)
        n, width = int(raw[0]), int(raw[1])
        hidden = raw[2:].view(np.float32).reshape(n, width)
        t.chunks.append((ids, hidden, np.fromfile(codes, np.int32).tolist()))
    return t


def _flat(segments) -> list:
    """Positions as comparable items: token ids, and ("emb", block index) per embedding row."""
    out, block = [], 0
    for kind, part in segments:
        if kind == "tokens":
            out += [int(x) for x in part]
        else:
            out += [("emb", block)] * len(part)
            block += 1
    return out


def _first_difference(a: list, b: list) -> int | None:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def _show(model, items: list, at: int) -> str:
    """The text around position ``at`` (embedding rows as [E])."""
    window = items[max(at - 8, 0) : at + 8]
    parts, run = [], []
    for x in window:
        if isinstance(x, tuple):
            if run:
                parts.append(model.detokenize(run))
                run = []
            parts.append("[E]")
        else:
            run.append(x)
    if run:
        parts.append(model.detokenize(run))
    return repr("".join(parts))


class Ours:
    def __init__(self, model_dir: Path, threads: int):
        s = discover(model_dir)
        self.llm = LanguageModel(s.llm, "cpu", 4096, threads, prompt_cache=False)
        self.tts = TtsModel(model_dir / ms.TTS_FILE, model_dir / ms.PROJECTOR_FILE, "cpu", threads)
        self.apm = AudioEncoder(model_dir, threads=threads, fidelity="llama.cpp-omni")
        self.vpm = ImageEncoder(model_dir, threads=threads)

    def prompt(self, req: Request) -> Prompt:
        voice = self.apm.encode(req.ref_audio) if req.ref_audio is not None else None
        audio = [("audio", self.apm.encode(req.audio))] if req.audio is not None else []
        image = [("frame", self.vpm.encode(req.image))] if req.image is not None else []  # its overview block
        text = [("text", req.text)] if req.text else []
        return turn_based_prompt(self.llm.model, reference_audio=voice, user=EncodedMessage((*image, *audio, *text)))

    def reply(self, segments: list) -> list[int]:
        """Our greedy reply to their prompt, up to their length, the end token included."""
        greedy = LlmSampling(temperature=0.0, top_k=0, top_p=1.0)
        out: list[int] = []
        for chunk in self.llm.chunks(Prompt(segments), greedy, 0, N_PREDICT):
            out += chunk.tokens  # speaking tokens only; compared below against theirs filtered alike
        return out

    def codes(self, chunks: list) -> list[list[int]]:
        """Free-running greedy codes of their chunks, one after the other as a reply."""
        sampler = self.tts.sampler(TtsSampling(temperature=0.0, repetition_penalty=1.0), 0)
        self.tts.start_turn()
        return [self.tts.speak(ids, hidden, sampler, CODE_LIMIT) for ids, hidden, _ in chunks]

    def forced(self, chunks: list) -> dict:
        """Each of their codes against our argmax after *their* history (teacher forcing): how
        many agree, and for those that do not, how close our top two logits were (a flip of a
        near tie is rounding, not a different rule)."""
        t = self.tts.tts
        t.clear()
        agree, total, gaps = 0, 0, []
        for ids, hidden, codes in chunks:
            logits = t.forward(self.tts.conditions(ids, hidden))
            for c in codes:
                top = int(np.argmax(logits))
                total += 1
                if top == c:
                    agree += 1
                else:
                    spread = float(np.std(logits))
                    gaps.append(float(logits[top] - logits[c]) / spread)
                logits = t.forward(np.asarray(t.code_embedding(c), np.float32).reshape(1, -1))
        return {"codes": total, "agree": agree, "max_gap_over_std": max(gaps) if gaps else 0.0}


def compare(args, tmp: Path) -> list[dict]:
    exe = lco.build_driver("pipeline_driver", args.lco_src, args.lco_build)
    model_dir = args.pipeline_model_dir
    ours = Ours(model_dir, args.threads)
    rows = []
    for i, req in enumerate(REQUESTS):
        out = tmp / f"pipeline-{i}"
        if (out / "prompt.txt").exists() and _finished(out):
            theirs = _read(out)
        else:
            if out.exists():
                shutil.rmtree(out)
            theirs = run_theirs(exe, model_dir, discover(model_dir).llm, req, out, args.threads)
        mine = ours.prompt(req)
        a, b = _flat(theirs.segments), _flat(mine.segments)
        at = _first_difference(a, b)
        row = {
            "request": req.name,
            "prompt_positions": [len(a), len(b)],
            "prompt_equal": at is None,
            "first_difference": None
            if at is None
            else {"at": at, "theirs": _show(ours.llm, a, at), "ours": _show(ours.llm, b, at)},
        }
        blocks = [p for k, p in theirs.segments if k == "embeddings"]
        mine_blocks = [p for k, p in mine.segments if k == "embeddings"]
        row["embeddings"] = [distance(m, t) for m, t in zip(mine_blocks, blocks)]
        speaking = [t for t in theirs.reply if ours.llm.special.speaks(t)]
        got = ours.reply(theirs.segments)
        row["reply"] = {"theirs": len(speaking), "equal_prefix": _common_prefix(got, speaking)}
        codes = ours.codes(theirs.chunks)
        row["codes"] = [
            {"theirs": len(c), "equal_prefix": _common_prefix(g, c)} for g, (_, _, c) in zip(codes, theirs.chunks)
        ]
        row["codes_forced"] = ours.forced(theirs.chunks)
        rows.append(row)
    return rows


def _common_prefix(a: list, b: list) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def render(rows: list[dict]) -> str:
    out = ["Pipeline (greedy), ours beside llama.cpp-omni:\n"]
    out.append(
        "| request | prompt positions (theirs, ours) | prompt | embeddings max/RMS | reply tokens equal "
        "| codes equal, free-running (per chunk) | codes equal after their history (largest miss / std) |"
    )
    out.append("|---|---|---|---|---|---|---|")
    for r in rows:
        diff = "equal" if r["prompt_equal"] else f"differ at {r['first_difference']['at']}"
        emb = ", ".join("shape differs" if d is None else f"{d:.1e}" for d in r["embeddings"]) or "-"
        reply = f"{r['reply']['equal_prefix']} of {r['reply']['theirs']}"
        codes = ", ".join(f"{c['equal_prefix']} of {c['theirs']}" for c in r["codes"]) or "-"
        positions = f"{r['prompt_positions'][0]}, {r['prompt_positions'][1]}"
        f = r["codes_forced"]
        forced = f"{f['agree']} of {f['codes']} ({f['max_gap_over_std']:.1e})"
        out.append(f"| {r['request']} | {positions} | {diff} | {emb} | {reply} | {codes} | {forced} |")
    for r in rows:
        if not r["prompt_equal"]:
            d = r["first_difference"]
            out.append(f"\n{r['request']}: theirs {d['theirs']}\n{' ' * len(r['request'])}  ours   {d['ours']}")
    return "\n".join(out) + "\n"
