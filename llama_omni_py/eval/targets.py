"""Where a benchmark's requests go: our engine in process, or any OpenAI-compatible server.

Both answer ``ask(request) -> Answer`` for one :class:`McqRequest` (a video, its separate audio
track, the prompt text and the protocol's decoding), so one command scores two engines side by
side (docs/evaluation.md#targets).
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


class LocalTarget:
    """Our engine in this process: one session per protocol setting, on ``device``."""

    name = "local"

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
        fidelity = "llama.cpp-omni" if p.prompt_style.startswith("llama.cpp-omni") else "reference"
        # max_beams: a KV sequence per beam (docs/slots.md#beam-search)
        options = {"fidelity": fidelity, "video": video, "max_beams": p.num_beams}
        if self.threads:
            options["threads"] = self.threads
        if self.n_ctx:
            options["n_ctx"] = self.n_ctx
        reply = omni.ReplyConfig(max_new_tokens=p.max_new_tokens, seed=0)
        self._session = omni.OmniSession(self.model_dir, self.device, omni.EngineConfig(**options), reply=reply)
        self._key = key
        return self._session

    def ask(self, r: McqRequest) -> Answer:
        import llama_omni_py as omni

        p = r.protocol
        session = self._open(p)
        sampling = omni.LlmSampling(temperature=0.0, repeat_penalty=p.repetition_penalty)
        sampling = _with_beams(sampling, p)
        try:
            result = session.speak(
                content=[omni.Video(r.video, audio=r.audio if p.audio else None), r.prompt],
                speech=False,
                tts_template=p.tts_template,
                system_prompt=None if p.system else False,
                prompt_style=p.prompt_style,
                llm=sampling,
                max_new_tokens=p.max_new_tokens,
                seed=r.seed,
            )
        except OmniError as e:
            return Answer(ok=False, error=f"{type(e).__name__}: {e}")
        t = result.timings
        return Answer(
            result.text,
            timings={
                "wall_s": round(t.wall_s, 3),
                "prefill_ms": round(t.prefill_ms, 1),
                "prompt_tokens": t.prompt_tokens,
                "n_tokens": t.n_tokens,
                "video_frames": t.video_frames,
                "audio_segments": t.audio_segments,
                "apm_ms": round(t.apm_ms, 1),
                "vpm_ms": round(t.vpm_ms, 1),
            },
        )

    def close(self) -> None:
        if self._session is not None:
            self._session.close()
            self._session = None


def _with_beams(sampling, p: McqProtocol):
    """The protocol's beam search (LlmSampling.num_beams; 1: greedy decoding)."""
    from dataclasses import replace

    return replace(sampling, num_beams=p.num_beams) if p.num_beams > 1 else sampling


PACKS = ("video", "interleave")


class EndpointTarget:
    """An OpenAI-compatible chat completions endpoint (ours, or vLLM-Omni with its MiniCPM-o
    pack). ``pack``: "video" sends the MP4 as one ``video_url`` part (the server interleaves it;
    a separate audio track goes as an ``audio_url`` part after it); "interleave" extracts the
    frames and audio segments here, by the protocol's rules, and sends them as ``image_url`` (detail
    low) and ``audio_url`` parts in order, as vLLM-Omni's minicpm-interleave pack does."""

    name = "endpoint"

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

    def parts(self, r: McqRequest) -> list:
        p = r.protocol
        if self.pack == "video":
            out = [_data_url("video", "video/mp4", r.video.read_bytes())]
            if not p.audio:  # frames alone (our server's extension of video_url)
                out[0]["video_url"]["use_audio"] = False
            elif r.audio is not None:
                out.append(_data_url("audio", "audio/wav", r.audio.read_bytes()))
            return out + [{"type": "text", "text": r.prompt}]
        return _interleaved(r) + [{"type": "text", "text": r.prompt}]

    def ask(self, r: McqRequest) -> Answer:
        p = r.protocol
        body = {
            "model": self.model,
            "messages": [{"role": "user", "content": self.parts(r)}],
            "max_tokens": p.max_new_tokens,
            "temperature": 0.0,
            "seed": r.seed,
            **self.extra,
        }
        t0 = time.perf_counter()
        try:
            reply = self._call("/chat/completions", body)
            text = reply["choices"][0]["message"].get("content") or ""
        except urllib.error.HTTPError as e:
            detail = e.read().decode("utf-8", "replace")[:300]
            return Answer(ok=False, error=f"HTTP {e.code}: {detail}")
        except (urllib.error.URLError, OSError, ValueError, KeyError, IndexError) as e:
            return Answer(ok=False, error=f"{type(e).__name__}: {e}")
        usage = reply.get("usage") or {}
        return Answer(text, timings={"wall_s": round(time.perf_counter() - t0, 3), **usage})

    def close(self) -> None:
        pass


def _data_url(kind: str, mime: str, data: bytes) -> dict:
    return {"type": f"{kind}_url", f"{kind}_url": {"url": f"data:{mime};base64,{base64.b64encode(data).decode()}"}}


def _interleaved(r: McqRequest) -> list:
    """The video's frames (JPEG, the overview alone) and audio segments (WAV), in order."""
    import io

    import numpy as np
    import soundfile as sf
    from PIL import Image

    from .. import video as V

    p = r.protocol
    cfg = V.VideoConfig(max_frames=p.max_frames, frame_rule=p.frame_rule, audio=p.audio)
    clip = V.load_video(r.video, cfg, audio=r.audio if p.audio else None)
    out = []
    for step in clip.steps():
        for kind, x in step:
            buf = io.BytesIO()
            if kind == "audio":
                sf.write(buf, np.asarray(x, np.float32), 16000, format="WAV", subtype="FLOAT")
                out.append(_data_url("audio", "audio/wav", buf.getvalue()))
            else:
                Image.fromarray(x).save(buf, "JPEG", quality=95)
                part = _data_url("image", "image/jpeg", buf.getvalue())
                part["image_url"]["detail"] = "low"
                out.append(part)
    return out
