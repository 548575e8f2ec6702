"""What an eval run sent, and that it says so: the settings each target's requests carry (and the
protocol's settings an endpoint cannot take), the prompt or request parts kept per item, a
``--model`` run and an ``--endpoint`` run of the same items compared field by field, and a video
with a separate audio track heard once: the very samples the local run hears, 10 audio rows a
second on both sides."""

import base64
import json
import re

import numpy as np
import pytest
import soundfile as sf
from eval_data import daily_omni
from server_client import running_gateway
from speech import say
from video_files import video

from llama_omni_py import video as V
from llama_omni_py.cli import main
from llama_omni_py.eval.protocols import protocol
from llama_omni_py.eval.targets import EndpointTarget, McqRequest

SECTIONS = ("sampling", "media", "layout")
# settings that only mean something with another: unsent when it is
GOES_WITH = {"length_penalty": "num_beams", "early_stopping": "num_beams", "repeat_last_n": "repetition_penalty"}


def _json(path):
    return json.loads(path.read_text())


def _records(out):
    return [json.loads(x) for x in (out / "records.jsonl").read_text().splitlines()]


def _endpoint(pack="video", extra=None):
    return EndpointTarget("http://127.0.0.1:9", model="m", pack=pack, extra_body=extra)  # nothing is called


def test_an_endpoint_says_what_it_cannot_send():
    evalkit = protocol("evalkit", "daily-omni")
    s = _endpoint().request_settings(evalkit, 7)
    assert s["body"] == {"model": "m", "max_tokens": 128, "temperature": 0.0, "seed": 7}
    assert s["sampling"] == {"temperature": 0.0, "max_new_tokens": 128, "seed": 7}
    assert s["not_sent"]["num_beams"]["protocol"] == 3 and "beam search" in s["not_sent"]["num_beams"]["why"]
    assert s["not_sent"]["repetition_penalty"]["protocol"] == 1.2
    assert {"max_frames", "frame_rule", "segments", "tts_template", "system_turn"} <= set(s["not_sent"])
    # what --extra-body sends is sent: recorded as such, and no longer listed as not sent
    s = _endpoint(extra={"repetition_penalty": 1.2, "temperature": 0.5}).request_settings(evalkit, 0)
    assert s["sampling"]["repetition_penalty"] == 1.2 and s["sampling"]["temperature"] == 0.5
    assert "repetition_penalty" not in s["not_sent"] and "num_beams" in s["not_sent"]
    # greedy protocols lose no decoding; the interleave pack sends the frame rule and count
    s = _endpoint("interleave").request_settings(protocol("vllm-omni", "daily-omni"), 0)
    assert not {"num_beams", "repetition_penalty", "max_frames", "frame_rule"} & set(s["not_sent"])
    assert s["media"]["max_frames"] == 64 and s["media"]["frame_rule"] == "minicpmo-utils"


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    """A 3 s video whose own track is one speech, and a separate 3 s track with another."""
    d = tmp_path_factory.mktemp("clip")
    own = say("the video's own track")[: 3 * 16000]
    mp4 = video(d / "v.mp4", 3.0, speech=own)
    track = say("the separate track")[: 3 * 16000]
    sf.write(d / "track.wav", np.pad(track, (0, 3 * 16000 - track.size)), 16000)
    return mp4, d / "track.wav"


def _sent_video(part) -> bytes:
    return base64.b64decode(part["video_url"]["url"].split(",", 1)[1])


def test_the_video_pack_sends_the_separate_track_as_the_videos_own(clip, tmp_path):
    mp4, wav = clip
    p = protocol("evalkit", "daily-omni")
    packed = _endpoint()._pack(McqRequest(mp4, wav, "Which?", p))
    (part, about), (text, _) = packed
    assert [x["type"] for x, _ in packed] == ["video_url", "text"] and text["text"] == "Which?"  # no audio part
    assert about["audio_track"] == {"source": str(wav), "seconds": 3.0}
    sent = tmp_path / "sent.mov"
    sent.write_bytes(_sent_video(part))
    assert about["bytes"] == sent.stat().st_size
    cfg = V.VideoConfig(max_frames=p.max_frames, frame_rule=p.frame_rule)
    local = V.load_video(mp4, cfg, audio=wav)  # what the local run hears: the track in place of the own
    served = V.load_video(sent, cfg)
    assert len(served.segments) == len(local.segments) == 3
    assert all(np.array_equal(a, b) for a, b in zip(served.segments, local.segments))  # the very samples
    assert all(np.array_equal(a, b) for a, b in zip(served.frames, local.frames))
    assert sum(s.size for s in served.segments) == 3 * 16000  # each second once


def test_the_interleave_pack_describes_each_part(clip):
    mp4, wav = clip
    packed = _endpoint("interleave")._pack(McqRequest(mp4, wav, "Which?", protocol("vllm-omni", "daily-omni")))
    kinds = [about["type"] for _, about in packed]
    assert kinds == ["image_url", "audio_url"] * 3 + ["text"]
    frames = [a for _, a in packed if a["type"] == "image_url"]
    audio = [a for _, a in packed if a["type"] == "audio_url"]
    assert [f["frame"] for f in frames] == [0, 1, 2] and all(f["detail"] == "low" for f in frames)
    assert all(a["source"] == str(wav) for a in audio) and sum(a["seconds"] for a in audio) == 3.0


def _sections_agree(local: dict, endpoint: dict) -> list[str]:
    """Each setting of the local run's requests: the endpoint sent the same, or it says it did
    not send it and names the protocol's value, which must be what the local run sent. Returns
    the settings that differ, with both sides."""
    differ = []
    for section in SECTIONS:
        for key, value in local[section].items():
            if key in ("pack", "by"):
                continue
            if key in endpoint[section]:
                if endpoint[section][key] != value:
                    differ.append(f"{section}.{key}: {value!r} here, {endpoint[section][key]!r} sent")
            elif key in endpoint["not_sent"]:
                assert endpoint["not_sent"][key]["protocol"] == value, (section, key)
                differ.append(f"{section}.{key}: {value!r} here, not sent")
            elif GOES_WITH.get(key) in endpoint["not_sent"]:
                differ.append(f"{section}.{key}: {value!r} here, not sent (with {GOES_WITH[key]})")
            else:
                raise AssertionError(f"{section}.{key} is neither sent nor said to be unsent by the endpoint")
    return differ


@pytest.mark.slow
def test_a_model_run_and_an_endpoint_run_tell_what_they_sent(tiny_dir, tmp_path):
    data = daily_omni(tmp_path / "daily")
    base = ["eval", "daily-omni", "--data", str(data), "--protocol", "evalkit", "--limit", "3"]
    local, remote = tmp_path / "local", tmp_path / "endpoint"
    assert main([*base, "--model-dir", str(tiny_dir), "--device", "cpu", "--out", str(local)]) == 0
    with running_gateway(tiny_dir, workers=1) as gw:
        assert main([*base, "--endpoint", gw.url, "--out", str(remote)]) == 0
    a, b = _json(local / "summary.json"), _json(remote / "summary.json")
    for out, summary in ((local, a), (remote, b)):  # run.json says it too
        assert summary["requests"] == _json(out / "run.json")["requests"]
    ra, rb = a["requests"], b["requests"]
    assert ra["not_sent"] == {}
    assert ra["sampling"] == {
        "temperature": 0.0,
        "num_beams": 3,
        "repetition_penalty": 1.2,
        "max_new_tokens": 128,
        "seed": 0,
        "length_penalty": 1.0,
        "early_stopping": False,
    }
    differ = _sections_agree(ra, rb)
    want = {"num_beams", "repetition_penalty", "length_penalty", "early_stopping", "max_frames", "frame_rule"}
    want |= {"segments", "prompt_style", "system_turn", "tts_template", "fidelity"}
    assert {d.split(":")[0].split(".")[1] for d in differ} == want, differ
    for key in ("temperature", "max_new_tokens", "seed"):  # sent alike
        assert ra["sampling"][key] == rb["sampling"][key]
    assert rb["body"] == {"model": rb["body"]["model"], "max_tokens": 128, "temperature": 0.0, "seed": 0}
    assert "**Not sent**: the protocol's num_beams (3), repetition_penalty (1.2)" in (remote / "summary.md").read_text()
    assert "Not sent" not in (local / "summary.md").read_text()
    # the prompt counts each side reported: 3 frames of 64 rows and 3 s of audio per item here
    ca, cb = a["reported"]["counts"], b["reported"]["counts"]
    assert a["reported"]["by"].startswith("the engine") and b["reported"]["by"].startswith("the server")
    assert ca["video_frames"]["total"] == ca["audio_segments"]["total"] == 9
    assert ca["audio_tokens"] == {"items": 3, "total": 90, "min": 30, "max": 30}
    assert ca["image_tokens"]["total"] == cb["image_tokens"]["total"] == 9 * 64
    # the server heard each item's 3 s once: the separate track in place of the video's own
    assert cb["audio_tokens"] == ca["audio_tokens"]
    assert cb["prompt_tokens"]["total"] != ca["prompt_tokens"]["total"]  # its own layout: differs, and shown
    # every item's prompt as the model read it, or the request's parts
    for r in _records(local):
        sent, t = r["sent"], r["timings"]
        assert "Carefully read the following question" in sent["prompt"] and sent["positions"] == t["prompt_tokens"]
        assert sent["rows"] == {"audio": t["audio_tokens"], "image": t["vision_tokens"]} == {"audio": 30, "image": 192}
        assert len(re.findall(r"<\|audio_start\|>\[\d+ audio rows\]<\|audio_end\|>", sent["prompt"])) == 3
        assert sent["prompt"].count("[64 image rows]") == 3
    for r in _records(remote):
        video_part, text_part = r["sent"]["content"]
        assert video_part["type"] == "video_url" and video_part["source"].endswith("_video.mp4")
        track = video_part["audio_track"]
        assert track["source"].endswith("_audio.wav") and track["seconds"] == 3.0
        assert text_part["type"] == "text" and text_part["text"].startswith("Carefully read")
        assert r["ok"] and r["timings"]["prompt_tokens_details"]["image_tokens"] == 192
