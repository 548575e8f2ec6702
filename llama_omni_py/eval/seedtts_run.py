"""``llama-omni eval seed-tts``: each meta-list line synthesised to ``{out}/{utt}.wav`` by a named
recipe, then scored (docs/evaluation.md#seed-tts).

* ``zero-shot`` -- MiniCPM-o 4.5's model card: the system turn "模仿音频样本的音色并生成新的内容。",
  the prompt wav, "请用这种声音风格来为用户提供帮助。 直接作答，不要有冗余内容" (joined by newlines);
  the user turn "请朗读以下内容。 " + the text; sampled at temperature 0.1, at most 512 tokens.
* ``llama.cpp-omni`` -- its TTS evaluation (omni-tts-eval): "Please imitate the reference voice" with
  the prompt wav's audio embedding as the system turn, "读出下列文本内容。{text}" as the user's,
  ``<think>\\n</think>\\n<|tts_bos|>``, then the text itself forced as the reply, so the TTS speaks
  it from the LLM's hidden states; TTS sampling temperature 0.3, top-p 0.85, top-k 25, repetition
  penalty 1.05, seed 42.

The Token2Wav voice is the module set's (``prompt_cache.gguf``): the engine builds no voice prompt
from a wav, so the speaker similarity measures how close that fixed voice is to each prompt.

A line's speech is capped relative to its text (:func:`speech_cap_s`): 20 speech codes (0.8 s)
per text token, CosyVoice2's ``max_token_text_ratio`` (minicpmo-utils' ``stepaudio2/flashcosyvoice``:
``max_tokens = len(text_ids) * max_token_text_ratio``), and at least 2 s. The request is cancelled
once its audio reaches the cap, the audio is cut there, and the record says ``capped``.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..constants import CODES_PER_SECOND, OUTPUT_SAMPLE_RATE
from ..errors import InvalidArgumentError, OmniError
from .datasets import limited, seed_tts
from .records import Progress, RecordStore

ZERO_SHOT_SYSTEM = "请用这种声音风格来为用户提供帮助。 直接作答，不要有冗余内容"
ZERO_SHOT_USER = "请朗读以下内容。"
LCO_SYSTEM = "Please imitate the reference voice"
LCO_USER = "读出下列文本内容。"

# The speech cap: CosyVoice2's ratio of speech codes to text tokens (its max_token_text_ratio),
# with a floor for the shortest lines.
CODES_PER_TEXT_TOKEN = 20
MIN_SPEECH_S = 2.0
SPEECH_CAP_RULE = (
    f"{CODES_PER_TEXT_TOKEN} speech codes ({CODES_PER_TEXT_TOKEN / CODES_PER_SECOND:g} s) per text token "
    f"of the line, at least {MIN_SPEECH_S:g} s"
)


def speech_cap_s(text_tokens: int) -> float:
    """The most audio, in seconds, a line of ``text_tokens`` tokens is synthesised into."""
    return max(MIN_SPEECH_S, CODES_PER_TEXT_TOKEN * text_tokens / CODES_PER_SECOND)


def _lco_prompt(session, voice, text: str):
    """omni-tts-eval's prompt, token for token: its system text and the voice's embedding, the
    user's instruction and text, the thinking block with single newlines, <|tts_bos|>."""
    from ..modules.llm.prompt import Prompt

    model = session.llm.model
    tok = lambda s, special=True: ("tokens", list(model.tokenize(s, special)))  # noqa: E731
    return Prompt(
        [
            tok(f"<|im_start|>system\n{LCO_SYSTEM}<|audio_start|>"),
            ("embeddings", voice.embeddings),
            tok("<|audio_end|><|im_end|>\n<|im_start|>user\n"),
            tok(LCO_USER + text, False),
            tok("<|im_end|>\n<|im_start|>assistant\n<think>\n</think>\n<|tts_bos|>"),
        ]
    )


def collect_capped(chunks, cap_samples: int):
    """``(SpeakResult, capped)`` from a reply's stream, its audio cut at ``cap_samples``: once audio
    past the cap arrives the stream is closed, which cancels the request. A capped reply has no
    final chunk, so its timings are empty."""
    import numpy as np

    from ..results import SpeakResult, Timings

    texts, parts, n, timings, capped = [], [], 0, Timings(), False
    try:
        for chunk in chunks:
            texts.append(chunk.text_delta)
            if chunk.timings is not None:
                timings = chunk.timings
            if chunk.audio.size:
                keep = min(int(chunk.audio.size), cap_samples - n)
                parts.append(chunk.audio[:keep])
                n += keep
                if keep < chunk.audio.size:
                    capped = True
                    break
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            close()
    wav = np.concatenate(parts) if parts else np.zeros(0, np.float32)
    return SpeakResult("".join(texts), wav, OUTPUT_SAMPLE_RATE, timings), capped


def synthesise(session, item, variant: str, seed: int, cap_s: float):
    """One utterance's reply, at most ``cap_s`` seconds of it: ``(SpeakResult, capped)``."""
    cap = round(cap_s * OUTPUT_SAMPLE_RATE)
    return collect_capped(session.stream(**request_options(session, item, variant, seed)), cap)


def request_options(session, item, variant: str, seed: int) -> dict:
    """The ``stream()`` options of the recipe ``variant`` for one utterance."""
    import llama_omni_py as omni

    if variant == "zero-shot":
        return dict(
            text=f"{ZERO_SHOT_USER} {item.text}",
            ref_audio=str(item.prompt_wav),
            system_prompt=ZERO_SHOT_SYSTEM,
            prompt_style="reference",
            llm=omni.LlmSampling(temperature=0.1, top_p=0.8, top_k=100, repeat_penalty=1.02),
            max_new_tokens=512,
            seed=seed,
        )
    voice = session.encode_audio(str(item.prompt_wav))
    return dict(prompt=_lco_prompt(session, voice, item.text), reply_text=item.text, seed=seed)


def session_configs(variant: str, threads: int | None):
    """(EngineConfig, ReplyConfig) of the recipe ``variant``."""
    import llama_omni_py as omni

    engine, reply = {"threads": threads}, {"max_new_tokens": 512}
    if variant == "llama.cpp-omni":
        reply["tts"] = omni.TtsSampling(temperature=0.3, top_p=0.85, top_k=25, repetition_penalty=1.05)
    else:
        engine["fidelity"] = "reference"
    return omni.EngineConfig(**engine), omni.ReplyConfig(**reply)


class LocalVoice:
    """Our engine in process: one session with the recipe's configuration."""

    def __init__(self, args):
        import llama_omni_py as omni

        self.variant = args.variant
        self.seed = 42 if args.variant == "llama.cpp-omni" and args.seed == 0 else args.seed
        engine, reply = session_configs(args.variant, args.threads)
        self.session = omni.OmniSession(args.model_dir, args.device, engine, reply=reply)

    def say(self, item, wav: Path) -> dict:
        import time

        text_tokens = len(self.session.llm.model.tokenize(item.text, False))
        cap_s = speech_cap_s(text_tokens)
        t0 = time.perf_counter()
        result, capped = synthesise(self.session, item, self.variant, self.seed, cap_s)
        result.save(wav)
        t = result.timings
        if capped:  # cancelled at the cap: no final timings
            timings = {"wall_s": round(time.perf_counter() - t0, 3), "wall_rtf": None, "n_tts_tokens": None}
        else:
            timings = {"wall_s": t.wall_s, "wall_rtf": t.wall_rtf, "n_tts_tokens": t.n_tts_tokens}
        return {
            "samples": int(result.audio.size),
            "reply": result.text,
            "audio_s": round(result.audio.size / OUTPUT_SAMPLE_RATE, 3),
            "text_tokens": text_tokens,
            "speech_cap_s": cap_s,
            "capped": capped,
            "timings": timings,
        }

    def close(self) -> None:
        self.session.close()


class EndpointVoice:
    """An OpenAI-compatible server with audio out: the zero-shot recipe's turns, the prompt wav as
    an ``input_audio`` part of the user turn (the API's system turn carries text only)."""

    def __init__(self, args):
        from .targets import EndpointTarget

        if args.variant != "zero-shot":
            raise InvalidArgumentError("an endpoint takes the zero-shot recipe (teacher forcing needs the engine)")
        self.http = EndpointTarget(args.endpoint, args.endpoint_model, args.api_key)
        self.seed = args.seed

    def say(self, item, wav: Path) -> dict:
        import base64
        import io
        import time

        import soundfile as sf

        body = {
            "model": self.http.model,
            "modalities": ["text", "audio"],
            "audio": {"voice": "default", "format": "wav"},
            "messages": [
                {"role": "system", "content": ZERO_SHOT_SYSTEM},
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "input_audio",
                            "input_audio": {
                                "data": base64.b64encode(item.prompt_wav.read_bytes()).decode(),
                                "format": "wav",
                            },
                        },
                        {"type": "text", "text": f"{ZERO_SHOT_USER} {item.text}"},
                    ],
                },
            ],
            "max_tokens": 512,
            "temperature": 0.1,
            "seed": self.seed,
        }
        t0 = time.perf_counter()
        message = self.http._call("/chat/completions", body)["choices"][0]["message"]
        audio = message.get("audio") or {}
        data = base64.b64decode(audio.get("data") or "")
        wav.write_bytes(data)
        samples = sf.info(io.BytesIO(data)).frames if data else 0
        timings = {"wall_s": round(time.perf_counter() - t0, 3)}
        return {"samples": samples, "reply": audio.get("transcript", ""), "timings": timings}

    def close(self) -> None:
        pass


def synthesise_all(items, args, out: Path) -> RecordStore:
    """Every item without a record yet, to ``{out}/{utt}.wav``; a failure is recorded, not fatal."""
    import urllib.error

    store = RecordStore(out)
    todo = [it for it in items if not store.done(it.id)]
    if not todo:
        return store
    progress = Progress(len(items), len(items) - len(todo), "Seed-TTS")
    voice = EndpointVoice(args) if getattr(args, "endpoint", None) else LocalVoice(args)
    try:
        for item in todo:
            rec = {"id": item.id, "text": item.text, "prompt_wav": str(item.prompt_wav), "missing": item.missing}
            if item.missing:
                rec.update(ok=False, error=f"missing prompt wav: {item.missing}")
            else:
                wav = out / f"{item.id}.wav"
                try:
                    said = voice.say(item, wav)
                    rec.update(ok=said.pop("samples") > 0, wav=str(wav), **said)
                    if not rec["ok"]:
                        rec["error"] = "no audio"
                except (OmniError, urllib.error.URLError, OSError, ValueError, KeyError, IndexError) as e:
                    rec.update(ok=False, error=f"{type(e).__name__}: {e}")
            store.add(rec)
            progress.step()
    finally:
        progress.close()
        voice.close()
    return store


def language_of(meta: Path, given: str | None) -> str:
    if given:
        return given
    parts = {p.lower() for p in meta.resolve().parts}
    if "zh" in parts:
        return "zh"
    if "en" in parts:
        return "en"
    raise InvalidArgumentError(f"{meta}: say --language zh or en (the list is not under a zh/ or en/ folder)")


def speech_cap_summary(items, store: RecordStore, local: bool) -> dict:
    """The cap's rule and the lines that reached it (from the run's records), with a report line."""
    capped = sorted(it.id for it in items if (store.records.get(it.id) or {}).get("capped"))
    if not local:
        line = "An endpoint's audio is scored as the server returns it: no speech cap is applied."
        return {"rule": None, "n_capped": 0, "capped": [], "line": line}
    line = f"{len(capped)} of {len(items)} lines reached the speech cap ({SPEECH_CAP_RULE}) and were cut there."
    return {
        "rule": SPEECH_CAP_RULE,
        "codes_per_text_token": CODES_PER_TEXT_TOKEN,
        "min_s": MIN_SPEECH_S,
        "n_capped": len(capped),
        "capped": capped,
        "line": line,
    }


def run_seed_tts(args, out: Path) -> int:
    from . import summary as S
    from .seedtts_score import report

    meta = Path(args.meta)
    items = limited(seed_tts(meta), args.limit)
    if args.sample_ratio is not None:
        raise InvalidArgumentError("--sample-ratio is for the video benchmarks; use --limit for Seed-TTS")
    if args.endpoint and args.model_dir:
        raise InvalidArgumentError("give --model or --endpoint, not both")
    language = language_of(meta, args.language)
    out.mkdir(parents=True, exist_ok=True)
    if not args.no_synthesis:
        synthesise_all(items, args, out)
    cap = speech_cap_summary(items, RecordStore(out), local=not args.endpoint)
    scores = report(items, out, language, asr=args.asr, sv=args.sv, sv_wavlm=args.sv_wavlm, proxy_sv=args.proxy_sv)
    scores["markdown"] += "\n## Speech cap\n\n" + cap.pop("line") + "\n"
    result = {
        "benchmark": "seed-tts",
        "variant": args.variant,
        "language": language,
        "meta": str(meta.resolve()),
        "model_files": S.model_files(args.model_dir),
        "engine": S.engine(),
        "speech_cap": cap,
        **scores,
    }
    S.write(out, result, scores.get("markdown", ""))
    print(json.dumps({k: v for k, v in scores.items() if k != "markdown"}, default=str)[:400])
    return 0
