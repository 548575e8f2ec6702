"""Where a benchmark's requests go: our engine in process, or any OpenAI-compatible server.

Both answer ``ask(request) -> Answer`` for one :class:`McqRequest` (a video, its separate audio
track, the prompt text and the protocol's decoding), so one command scores two engines side by
side (docs/evaluation.md#targets). Each says what its requests carry
(``request_settings(protocol, seed)``: sampling, media, prompt layout, and what of the protocol it
could not send), and each Answer holds what was sent for that item (``sent``: the prompt as laid
out, or the request's parts with their media described).
"""

from __future__ import annotations

import base64
import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import InvalidArgumentError, OmniError
from .protocols import McqProtocol


@dataclass(frozen=True)
class McqRequest:
    video: Path
    audio: Path | None
    prompt: str
    protocol: McqProtocol
    seed: int = 0


@dataclass
class Answer:
    """A reply's raw text, or the error that stopped the request (``ok`` False: it failed, the
    item counts in the all-items denominator, not in the successful-requests one)."""

    text: str = ""
    ok: bool = True
    error: str | None = None
    timings: dict = field(default_factory=dict)
    sent: dict | None = None  # what went out: the prompt as laid out, or the request's parts


class LocalTarget:
    """Our engine in this process: one session per protocol setting, on ``device``."""

    name = "local"
    # what a record's timings hold of the prompt: the engine's own counts
    COUNTED_BY = "the engine, as it built each prompt"
    COUNTS = {
        "prompt_tokens": "prompt_tokens",
        "video_frames": "video_frames",
        "audio_segments": "audio_segments",
        "image_tokens": "vision_tokens",
        "audio_tokens": "audio_tokens",
    }

    def __init__(self, model_dir, device: str = "auto", threads: int | None = None, n_ctx: int | None = None):
        self.model_dir, self.device, self.threads, self.n_ctx = model_dir, device, threads, n_ctx
        self._session = None
        self._key = None

    def describe(self) -> dict:
        s = self._session
        return {"kind": "local", "model_dir": str(self.model_dir), "device": s.device if s else self.device}

    def _open(self, p: McqProtocol):
        """A session whose configuration is the protocol's (reopened only when it changes)."""
        import llama_omni_py as omni

        key = (p.name, p.max_frames, p.frame_rule, p.segments, p.audio)
        if self._session is not None and key == self._key:
            return self._session
        self.close()
        video = omni.VideoConfig(max_frames=p.max_frames, frame_rule=p.frame_rule, audio=p.audio, segments=p.segments)
        # max_beams: a KV sequence per beam (docs/slots.md#beam-search)
        options = {"fidelity": _fidelity(p), "video": video, "max_beams": p.num_beams}
        if self.threads:
            options["threads"] = self.threads
        if self.n_ctx:
            options["n_ctx"] = self.n_ctx
        reply = omni.ReplyConfig(max_new_tokens=p.max_new_tokens, seed=0)
        self._session = omni.OmniSession(self.model_dir, self.device, omni.EngineConfig(**options), reply=reply)
        self._key = key
        return self._session

    @staticmethod
    def _sampling(p: McqProtocol):
        import llama_omni_py as omni

        return _with_beams(omni.LlmSampling(temperature=0.0, repeat_penalty=p.repetition_penalty), p)

    def request_settings(self, p: McqProtocol, seed: int) -> dict:
        """What every request of a run by ``p`` carries: read off the objects ``ask`` builds."""
        s = self._sampling(p)
        sampling = {
            "temperature": s.temperature,
            "num_beams": s.num_beams,
            "repetition_penalty": s.repeat_penalty,
            "max_new_tokens": p.max_new_tokens,
            "seed": seed,
        }
        if s.beam_search:
            sampling.update(length_penalty=s.length_penalty, early_stopping=s.early_stopping)
        elif s.repeat_penalty != 1.0:
            sampling["repeat_last_n"] = s.repeat_last_n
        return {
            "sent_to": "the engine in this process",
            "sampling": sampling,
            "media": {
                "pack": "engine",
                "max_frames": p.max_frames,
                "frame_rule": p.frame_rule,
                "audio": _audio_rule(p),
                "segments": p.segments,
            },
            "layout": {
                "by": "this harness, by the protocol",
                "prompt_style": p.prompt_style,
                "system_turn": p.system,
                "tts_template": p.tts_template,
                "fidelity": _fidelity(p),
            },
            "not_sent": {},
        }

    def ask(self, r: McqRequest) -> Answer:
        """The prompt is built here, as the engine would build it, recorded, and then run as it
        is (``speak(prompt=...)``): the record is the prompt the model read."""
        import llama_omni_py as omni
        from llama_omni_py.orchestration.turn_based import fitting_prompt

        p = r.protocol
        t0 = time.perf_counter()
        session = self._open(p)
        sampling = self._sampling(p)
        options = dict(speech=False, tts_template=p.tts_template, llm=sampling, max_new_tokens=p.max_new_tokens)
        sent = None
        try:
            request = session.request(
                content=[omni.Video(r.video, audio=r.audio if p.audio else None), r.prompt],
                system_prompt=None if p.system else False,
                prompt_style=p.prompt_style,
                seed=r.seed,
                **options,
            )
            media = session.stages.inputs.encode(request)
            prompt, _ = fitting_prompt(session.stages, request, media, p.max_new_tokens, p.prompt_style)
            sent = prompt_record(prompt, session.llm.detokenize)
            result = session.speak(prompt=prompt, seed=r.seed, **options)
        except OmniError as e:
            return Answer(ok=False, error=f"{type(e).__name__}: {e}", sent=sent)
        t, m = result.timings, media.stats
        return Answer(
            result.text,
            timings={
                "wall_s": round(time.perf_counter() - t0, 3),
                "prefill_ms": round(t.prefill_ms, 1),
                "prompt_tokens": t.prompt_tokens,
                "n_tokens": t.n_tokens,
                "video_frames": m.video_frames,
                "audio_segments": m.audio_segments,
                "vision_tokens": m.vision_tokens,
                "audio_tokens": m.audio_tokens,
                "apm_ms": round(m.apm_ms, 1),
                "vpm_ms": round(m.vpm_ms, 1),
            },
            sent=sent,
        )

    def close(self) -> None:
        if self._session is not None:
            self._session.close()
            self._session = None


def _with_beams(sampling, p: McqProtocol):
    """The protocol's beam search (LlmSampling.num_beams; 1: greedy decoding)."""
    from dataclasses import replace

    return replace(sampling, num_beams=p.num_beams) if p.num_beams > 1 else sampling


def _fidelity(p: McqProtocol) -> str:
    """The engine rules a protocol runs under locally (EngineConfig.fidelity)."""
    return "llama.cpp-omni" if p.prompt_style.startswith("llama.cpp-omni") else "reference"


def _audio_rule(p: McqProtocol) -> str:
    """Which audio goes with a video's frames under ``p``."""
    if not p.audio:
        return "none: frames only"
    return "the separate track when the item has one (in place of the video's own), else the video's own"


def prompt_record(prompt, detokenize) -> dict:
    """A prompt as the model reads it: its text with every embedding block written as
    ``[N audio rows]`` or ``[N image rows]`` where it sits, its positions, and the rows of each
    kind (a block right after ``<|audio_start|>`` is audio, any other an image or video frame)."""
    text, rows = [], {"audio": 0, "image": 0}
    for kind, x in prompt.segments:
        if kind == "tokens":
            text.append(detokenize(list(x)))
            continue
        what = "audio" if text and text[-1].endswith("<|audio_start|>") else "image"
        rows[what] += int(x.shape[0])
        text.append(f"[{int(x.shape[0])} {what} rows]")
    return {"prompt": "".join(text), "positions": prompt.token_count(), "rows": rows}


PACKS = ("video", "interleave")


class EndpointTarget:
    """An OpenAI-compatible chat completions endpoint (ours, or vLLM-Omni with its MiniCPM-o
    pack). ``pack``: "video" sends the video as one ``video_url`` part, which the server
    interleaves; an item's separate audio track rides in it as its audio track, in place of the
    video's own (the model hears each second once, as the local run's ``omni.Video(path,
    audio=track)``). "interleave" extracts the frames and audio segments here, by the protocol's
    rules, and sends them as ``image_url`` (detail low) and ``audio_url`` parts in order, as
    vLLM-Omni's minicpm-interleave pack does."""

    name = "endpoint"
    # what a record's timings hold of the prompt: the server's usage, as it reported it
    COUNTED_BY = "the server, in each reply's usage"
    COUNTS = {
        "prompt_tokens": "prompt_tokens",
        "image_tokens": "prompt_tokens_details.image_tokens",
        "audio_tokens": "prompt_tokens_details.audio_tokens",
        "completion_tokens": "completion_tokens",
    }

    def __init__(
        self,
        url: str,
        model: str | None = None,
        api_key: str | None = None,
        pack: str = "video",
        extra_body: dict | None = None,
        timeout: float = 600.0,
    ):
        if pack not in PACKS:
            raise InvalidArgumentError(f"--pack must be one of {', '.join(PACKS)}, got {pack!r}")
        self.base = url.rstrip("/")
        if not self.base.endswith("/v1"):
            self.base += "/v1"
        self.api_key, self.pack, self.extra, self.timeout = api_key, pack, dict(extra_body or {}), timeout
        self.model = model or self._first_model()

    def describe(self) -> dict:
        return {"kind": "endpoint", "url": self.base, "model": self.model, "pack": self.pack, "extra_body": self.extra}

    def _call(self, path: str, body: dict | None = None) -> dict:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method="POST" if body is not None else "GET")
        req.add_header("Content-Type", "application/json")
        if self.api_key:
            req.add_header("Authorization", f"Bearer {self.api_key}")
        with urllib.request.urlopen(req, timeout=self.timeout) as resp:
            return json.loads(resp.read().decode("utf-8"))

    def _first_model(self) -> str:
        try:
            models = self._call("/models").get("data") or []
        except (urllib.error.URLError, OSError, ValueError) as e:
            raise InvalidArgumentError(f"cannot reach {self.base}/models: {e}") from None
        if not models:
            raise InvalidArgumentError(f"{self.base}/models lists no model: pass --endpoint-model")
        return models[0]["id"]

    def body(self, p: McqProtocol, seed: int) -> dict:
        """Every field of a request besides its messages (``--extra-body`` last: it may override)."""
        return {"model": self.model, "max_tokens": p.max_new_tokens, "temperature": 0.0, "seed": seed, **self.extra}

    def request_settings(self, p: McqProtocol, seed: int) -> dict:
        """What every request of a run by ``p`` carries, read off the request body and the pack;
        the protocol's settings no field of the request carries are listed under ``not_sent``, with
        why (the server decides them)."""
        body = self.body(p, seed)
        tokens = body.get("max_completion_tokens", body.get("max_tokens"))
        sampling = {"temperature": body.get("temperature"), "max_new_tokens": tokens, "seed": body.get("seed")}
        sampling.update({k: body[k] for k in SAMPLING_FIELDS if k in body})
        not_sent = {}

        def unsent(key: str, value, why: str) -> None:
            not_sent[key] = {"protocol": value, "why": why}

        if p.num_beams > 1 and not BEAM_FIELDS & set(body):
            unsent(
                "num_beams",
                p.num_beams,
                "the OpenAI chat API has no beam search: the requests decode greedily (temperature 0)",
            )
        if p.repetition_penalty != 1.0 and "repetition_penalty" not in body:
            unsent(
                "repetition_penalty",
                p.repetition_penalty,
                "the OpenAI chat API has no repetition penalty (its frequency and presence penalties are "
                "other rules): the server's own applies",
            )
        if self.pack == "video":
            media = {"pack": "video", "audio": _audio_rule(p)}
            if p.audio:
                media["audio_track"] = "a separate track goes as the video's audio track (QuickTime, float PCM)"
            else:
                media["use_audio"] = False
            for key in ("max_frames", "frame_rule", "segments"):
                unsent(key, getattr(p, key), "the server cuts the video into frames and segments by its own rules")
        else:
            media = {
                "pack": "interleave",
                "max_frames": p.max_frames,
                "frame_rule": p.frame_rule,
                "audio": _audio_rule(p),
                "image_detail": "low",
            }
            unsent("segments", p.segments, "each segment is its own audio_url part: the server encodes it")
        mm = body.get("mm_processor_kwargs")
        if isinstance(mm, dict):  # what --extra-body asks of the server's processor is sent
            for key, value in mm.items():
                media[key] = value
                not_sent.pop(key, None)
        unsent("prompt_style", p.prompt_style, "the server's chat template lays the prompt out")
        unsent("system_turn", p.system, "no system message is sent: the server's chat template decides")
        unsent("tts_template", p.tts_template, "the server's chat template writes the assistant turn")
        unsent("fidelity", _fidelity(p), "the server's engine runs under its own rules")
        return {
            "sent_to": self.base + "/chat/completions",
            "body": body,
            "sampling": sampling,
            "media": media,
            "layout": {"by": "the server's chat template", "parts": _PACK_PARTS[self.pack]},
            "not_sent": not_sent,
        }

    def parts(self, r: McqRequest) -> list:
        return [part for part, _ in self._pack(r)]

    def _pack(self, r: McqRequest) -> list:
        """The user message's parts, each with its description for the record."""
        p = r.protocol
        text = {"type": "text", "text": r.prompt}
        if self.pack == "interleave":
            return _interleaved(r) + [(text, text)]
        about = {"type": "video_url", "source": str(r.video)}
        if not p.audio:  # frames alone (our server's extension of video_url)
            data = r.video.read_bytes()
            part = _data_url("video", "video/mp4", data)
            part["video_url"]["use_audio"] = False
            about.update(use_audio=False)
        elif r.audio is not None:
            data, seconds = with_audio_track(r.video, r.audio)
            part = _data_url("video", "video/quicktime", data)
            about["audio_track"] = {"source": str(r.audio), "seconds": round(seconds, 3)}
        else:
            data = r.video.read_bytes()
            part = _data_url("video", "video/mp4", data)
            about["audio_track"] = "the video's own"
        about["bytes"] = len(data)
        return [(part, about), (text, text)]

    def ask(self, r: McqRequest) -> Answer:
        body = self.body(r.protocol, r.seed)
        try:
            packed = self._pack(r)
        except OmniError as e:
            return Answer(ok=False, error=f"{type(e).__name__}: {e}")
        sent = {"content": [about for _, about in packed]}
        body["messages"] = [{"role": "user", "content": [part for part, _ in packed]}]
        t0 = time.perf_counter()
        try:
            reply = self._call("/chat/completions", body)
            text = reply["choices"][0]["message"].get("content") or ""
        except urllib.error.HTTPError as e:
            detail = e.read().decode("utf-8", "replace")[:300]
            return Answer(ok=False, error=f"HTTP {e.code}: {detail}", sent=sent)
        except (urllib.error.URLError, OSError, ValueError, KeyError, IndexError) as e:
            return Answer(ok=False, error=f"{type(e).__name__}: {e}", sent=sent)
        usage = reply.get("usage") or {}
        return Answer(text, timings={"wall_s": round(time.perf_counter() - t0, 3), **usage}, sent=sent)

    def close(self) -> None:
        pass


# Request fields that change the decoding, recorded when --extra-body sends them.
SAMPLING_FIELDS = (
    "top_p",
    "top_k",
    "min_p",
    "repetition_penalty",
    "frequency_penalty",
    "presence_penalty",
    "use_beam_search",
    "num_beams",
    "best_of",
    "length_penalty",
    "n",
)
BEAM_FIELDS = {"use_beam_search", "num_beams", "best_of"}
_PACK_PARTS = {
    "video": "one video_url part, then the prompt text",
    "interleave": "image_url (detail low) and audio_url parts, a frame and its second of audio in turn, then the "
    "prompt text",
}


def with_audio_track(video: Path, audio: Path) -> tuple[bytes, float]:
    """The video with ``audio`` as its only audio track, and the track's seconds. The video stream
    is copied as it is; the track is the samples the local run reads (16 kHz mono float,
    ``media.load_audio``), stored as 32-bit float PCM in a QuickTime file, so that a server
    decodes the very same samples."""
    import tempfile

    from ..media import FFMPEG_TIMEOUT, demuxer_args, load_audio, run_ffmpeg

    samples = load_audio(audio, None)
    with tempfile.TemporaryDirectory(prefix="llama-omni-eval-") as folder:
        out = Path(folder) / "video.mov"
        args = ["-nostdin", "-v", "error", "-y", *demuxer_args(str(video)), "-i", str(video)]
        args += ["-f", "f32le", "-ar", "16000", "-ac", "1", "-i", "pipe:0", "-map", "0:v:0", "-map", "1:a:0"]
        args += ["-c:v", "copy", "-c:a", "pcm_f32le", "-f", "mov", str(out)]
        run_ffmpeg(args, samples.astype("<f4").tobytes(), timeout=FFMPEG_TIMEOUT + samples.size / 16000)
        return out.read_bytes(), samples.size / 16000


def _data_url(kind: str, mime: str, data: bytes) -> dict:
    return {"type": f"{kind}_url", f"{kind}_url": {"url": f"data:{mime};base64,{base64.b64encode(data).decode()}"}}


def _interleaved(r: McqRequest) -> list:
    """The video's frames (JPEG, the overview alone) and audio segments (WAV), in order, each with
    its description for the record."""
    import io

    import numpy as np
    import soundfile as sf
    from PIL import Image

    from .. import video as V

    p = r.protocol
    cfg = V.VideoConfig(max_frames=p.max_frames, frame_rule=p.frame_rule, audio=p.audio)
    track = r.audio if p.audio else None
    clip = V.load_video(r.video, cfg, audio=track)
    heard = str(track if track is not None else r.video)
    out = []
    for i, step in enumerate(clip.steps()):
        at = round(float(clip.plan.timestamps[i]), 3)
        for kind, x in step:
            buf = io.BytesIO()
            if kind == "audio":
                sf.write(buf, np.asarray(x, np.float32), 16000, format="WAV", subtype="FLOAT")
                about = {"type": "audio_url", "source": heard, "segment": i, "seconds": round(len(x) / 16000, 4)}
                out.append((_data_url("audio", "audio/wav", buf.getvalue()), {**about, "bytes": buf.tell()}))
            else:
                Image.fromarray(x).save(buf, "JPEG", quality=95)
                part = _data_url("image", "image/jpeg", buf.getvalue())
                part["image_url"]["detail"] = "low"
                h, w = x.shape[:2]
                about = {"type": "image_url", "source": str(r.video), "frame": i, "at_s": at, "size": [w, h]}
                out.append((part, {**about, "detail": "low", "bytes": buf.tell()}))
    return out
