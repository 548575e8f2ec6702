"""``llama-omni eval`` end to end on tiny datasets in the official layouts: Daily-Omni and
Video-MME against the local engine (the tiny set) and against our own server's OpenAI endpoint,
records and summaries, missing media counted, resuming, and the refusals."""

import json
import re

import pytest
from eval_data import daily_omni, videomme
from server_client import running_gateway
from video_files import video

from llama_omni_py.cli import main
from llama_omni_py.eval import mcq, seedtts_run
from llama_omni_py.eval.datasets import daily_omni as load_daily_omni
from llama_omni_py.eval.protocols import protocol
from llama_omni_py.eval.targets import Answer


@pytest.fixture(scope="module")
def daily(tmp_path_factory):
    return daily_omni(tmp_path_factory.mktemp("daily-omni"), missing_video=True)


@pytest.fixture(scope="module")
def vmme(tmp_path_factory):
    return videomme(tmp_path_factory.mktemp("videomme"))


def _summary(out):
    return json.loads((out / "summary.json").read_text())


def _records(out):
    return [json.loads(x) for x in (out / "records.jsonl").read_text().splitlines()]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["llama.cpp-omni", "vllm-omni", "evalkit"])
def test_daily_omni_on_the_local_engine(daily, tiny_dir, tmp_path, capsys, name):
    out = tmp_path / "run"
    args = ["eval", "daily-omni", "--data", str(daily), "--protocol", name, "--model-dir", str(tiny_dir)]
    assert main([*args, "--limit", "3", "--out", str(out), "--device", "cpu"]) == 0
    s = _summary(out)
    assert s["counts"]["items"] == 3 and s["counts"]["missing_media"] == 0
    assert s["protocol"]["name"] == name and s["headline"]["extractor"] == protocol(name, "daily-omni").extractor
    assert set(s["variants"]) >= {"evalkit", "llama.cpp-omni", "vllm-omni"}
    assert s["model_files"] and all(len(v["sha256"]) == 64 for v in s["model_files"].values())
    recs = _records(out)
    assert len(recs) == 3 and all(r["ok"] for r in recs)
    assert all(r["timings"]["video_frames"] == 3 and r["timings"]["audio_segments"] == 3 for r in recs)
    assert all(r["sent"]["rows"] == {"audio": 30, "image": 192} for r in recs)  # the prompt as the model read it
    if name == "vllm-omni":  # as vLLM-Omni's server lays it out: the parts in order, joined by "\n"
        step = r"<image>\[64 image rows\]</image>\n<\|audio_start\|>\[\d+ audio rows\]<\|audio_end\|>\n"
        assert all(re.match(rf"<\|im_start\|>user\n({step}){{3}}Your task", r["sent"]["prompt"]) for r in recs)
    assert s["requests"]["sampling"]["num_beams"] == protocol(name, "daily-omni").num_beams
    assert set(s["groups"]) == {"qa_type", "content_parent_category", "video_category", "video_duration"}
    assert (out / "summary.md").read_text().startswith("# Daily-Omni")
    assert "daily-omni" in capsys.readouterr().out


class Counting:
    """A target that answers "B" and counts what it was asked."""

    name = "fake"

    def __init__(self, fail_after=None):
        self.asked, self.fail_after = [], fail_after

    def describe(self):
        return {"kind": "fake"}

    def request_settings(self, p, seed):
        return {"sent_to": "a fake", "sampling": {"seed": seed}, "media": {}, "layout": {}, "not_sent": {}}

    def ask(self, r):
        if self.fail_after is not None and len(self.asked) >= self.fail_after:
            raise KeyboardInterrupt
        self.asked.append(r.prompt)
        return Answer("B", sent={"prompt": r.prompt})

    def close(self):
        pass


def test_missing_media_is_counted_and_a_run_resumes(daily, tmp_path):
    items = load_daily_omni(daily)
    p = protocol("vllm-omni", "daily-omni")
    settings = {"x": 1}
    out = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        mcq.run(items, p, Counting(fail_after=2), out, settings=settings)
    assert len(_records(out)) == 2
    with (out / "records.jsonl").open("a") as f:
        f.write('{"id": "torn')  # a line cut short by a kill
    again = Counting()
    s = mcq.run(items, p, again, out, settings=settings)
    assert len(again.asked) == 1  # the missing video is never asked, the first two are not redone
    assert [r["sent"] is None for r in _records(out)] == [False, False, False, True]  # nothing sent for it
    assert s["counts"] == {**s["counts"], "items": 4, "missing_media": 1, "failed_requests": 0}
    v = s["variants"]["vllm-omni"]
    assert (v["all"], v["successful"], v["correct"]) == (4, 3, 1)  # one of three answers is B
    assert v["accuracy_all"] == 25.0 and round(v["accuracy_successful"], 2) == 33.33
    with pytest.raises(ValueError, match="other settings"):
        mcq.run(items, p, Counting(), out, settings={"x": 2})


@pytest.mark.slow
def test_videomme_on_the_local_engine(vmme, tiny_dir, tmp_path):
    out = tmp_path / "vmme"
    args = ["eval", "videomme", "--data", str(vmme), "--protocol", "llama.cpp-omni", "--model-dir", str(tiny_dir)]
    assert main([*args, "--limit", "3", "--max-frames", "2", "--out", str(out), "--device", "cpu"]) == 0
    s = _summary(out)
    assert s["counts"]["items"] == 3 and s["requests"]["media"]["max_frames"] == 2
    assert all(r["timings"]["video_frames"] == 2 and r["timings"]["audio_segments"] == 0 for r in _records(out))
    assert set(s["groups"]) == {"duration", "domain", "task_type", "sub_category"}
    assert main(["eval", "videomme", "--data", str(vmme), "--durations", "tiny", "--model-dir", str(tiny_dir)]) == 2


@pytest.mark.slow
def test_daily_omni_against_our_endpoint(daily, tiny_dir, tmp_path):
    out = tmp_path / "endpoint"
    with running_gateway(tiny_dir) as gw:
        args = ["eval", "daily-omni", "--data", str(daily), "--protocol", "vllm-omni", "--endpoint", gw.url]
        assert main([*args, "--limit", "3", "--concurrency", "2", "--out", str(out)]) == 0
    s = _summary(out)
    assert s["target"]["kind"] == "endpoint" and s["counts"]["items"] == 3
    assert s["counts"]["failed_requests"] == 0, [r["error"] for r in _records(out)]
    for r in _records(out):  # one video part carrying the separate track, then the prompt
        assert [x["type"] for x in r["sent"]["content"]] == ["video_url", "text"]
        assert r["sent"]["content"][0]["audio_track"]["seconds"] == 3.0
        assert r["timings"]["prompt_tokens_details"]["audio_tokens"] == 30  # 3 s heard once


def test_refusals(daily, tmp_path, capsys):
    base = ["eval", "daily-omni", "--data", str(daily)]
    assert main([*base, "--limit", "0"]) == 2
    assert main([*base, "--limit", "2", "--sample-ratio", "0.5"]) == 2
    assert main([*base, "--model-dir", "x", "--endpoint", "http://127.0.0.1:9"]) == 2
    assert main([*base, "--concurrency", "2", "--model-dir", "x"]) == 2
    assert main(["eval", "daily-omni", "--data", str(tmp_path)]) == 2  # no qa.json
    err = capsys.readouterr().err
    assert err.count("llama-omni: error:") == 5 and "qa.json" in err


def _unit(i, listen, end=False, samples=24000, apm=10.0, vpm=30.0):
    stage = {"apm": apm, "vpm": vpm, "prefill": 100.0, "decode": 200.0, "tts": 300.0, "token2wav": 400.0}
    return {
        "index": i,
        "is_listen": listen,
        "end_of_turn": end,
        "audio_samples": 0 if listen else samples,
        "t_push_s": float(i),
        "t_result_s": i + 1.5,
        "stage_ms": stage,
        "text_chars": 3,
    }


def test_rtf_pools_the_core_units_the_judges_way():
    from llama_omni_py.eval.rtf import judge_rtf

    # listen, then a turn of 4 units (head, core, core, tail), listen, a turn of 2 (head, tail)
    frames = [_unit(0, True), *[_unit(i, False, end=i == 4) for i in range(1, 5)], _unit(5, True)]
    frames += [_unit(6, False), _unit(7, False, end=True, samples=12000)]
    r = judge_rtf(frames)
    assert r["core_frames"] == 2 and r["core_audio_s"] == 2.0 and r["turns"] == 2
    assert r["core_rtf_judge"] == pytest.approx((30 + 100 + 200 + 300 + 400) / 1000)  # max(apm, vpm)
    assert r["core_rtf_sum"] == pytest.approx((10 + 30 + 100 + 200 + 300 + 400) / 1000)
    # turns: (last result - first push) / audio, pooled: (5.5 - 1) + (8.5 - 6) over 4 + 1.5 s
    assert r["speak_wav_turn_rtf"] == pytest.approx((4.5 + 2.5) / 5.5)


@pytest.mark.slow
def test_rtf_command_on_a_video(tiny_dir, tmp_path):
    talk = video(tmp_path / "talk.mp4", 6, tone=440)
    out = tmp_path / "rtf"
    args = ["eval", "rtf", "--video", str(talk), "--model-dir", str(tiny_dir), "--device", "cpu"]
    assert main([*args, "--interval", "0.5", "--out", str(out)]) == 0
    s = _summary(out)
    assert s["units"] == 6 and len(list((out / "units").glob("*.wav"))) == 6
    assert {"core_rtf_judge", "core_rtf_sum", "speak_wav_turn_rtf"} <= set(s)
    silent = video(tmp_path / "silent.mp4", 3, tone=None)
    assert main(["eval", "rtf", "--video", str(silent), "--model-dir", str(tiny_dir), "--out", str(out)]) == 2


def _seed_models(d):
    """The tiny paraformer, official speaker model and proxy folders under ``d``."""
    from seedtts_models import (
        head_state,
        paraformer_folder,
        proxy_folder,
        s3prl_cfg,
        s3prl_wavlm,
        save_finetune,
        save_s3prl,
    )

    d.mkdir()
    base = save_s3prl(d / "wavlm_large.pt", s3prl_cfg(True), s3prl_wavlm(s3prl_cfg(True), seed=1))
    ft = save_finetune(d / "wavlm_large_finetune.pth", s3prl_wavlm(s3prl_cfg(True), seed=2).state_dict(), head_state(3))
    return paraformer_folder(d / "paraformer"), ft, base, proxy_folder(d / "proxy")


def _assert_capped_as_recorded(out, items):
    """Every record within its speech cap, and the summary's count of capped lines agrees."""
    recs, cap = _records(out), _summary(out)["speech_cap"]
    assert cap["rule"] == seedtts_run.SPEECH_CAP_RULE and cap["codes_per_text_token"] == 20
    for r in recs:
        assert isinstance(r["capped"], bool) and r["text_tokens"] > 0
        assert r["speech_cap_s"] == seedtts_run.speech_cap_s(r["text_tokens"])
        assert 0 < r["audio_s"] <= r["speech_cap_s"]
    assert cap["capped"] == sorted(r["id"] for r in recs if r["capped"]) and cap["n_capped"] == len(cap["capped"])
    assert f"{cap['n_capped']} of {items} lines reached the speech cap" in (out / "summary.md").read_text()


@pytest.mark.slow
@pytest.mark.parametrize("variant", ["zero-shot", "llama.cpp-omni"])
def test_seed_tts_synthesis_and_scores(tiny_dir, tmp_path, variant):
    from eval_data import seed_tts

    meta = seed_tts(tmp_path / "seed")
    para, ft, base, proxy = _seed_models(tmp_path / "models")
    out = tmp_path / "run"
    args = ["eval", "seed-tts", "--meta", str(meta), "--variant", variant, "--model-dir", str(tiny_dir)]
    args += ["--asr", f"paraformer:{para}", "--sv", str(ft), "--sv-wavlm", str(base)]
    args += ["--proxy-sv", str(proxy), "--device", "cpu", "--limit", "2", "--out", str(out)]
    assert main(args) == 0
    assert sorted(p.name for p in out.glob("*.wav")) == ["utt0.wav", "utt1.wav"]
    s = _summary(out)
    assert s["variant"] == variant and s["utterances"] == 2 and s["n_missing_wavs"] == 0
    assert s["wer"]["n"] == 2 and 0.0 <= s["wer"]["wer"] and s["sim"]["n"] == 2 and s["sim_proxy"]["kind"] == "proxy"
    recs = _records(out)
    assert all(r["ok"] for r in recs) and len(recs) == 2
    _assert_capped_as_recorded(out, 2)
    if variant == "llama.cpp-omni":  # teacher forced: the reply is the text itself (its one chunk comes first)
        assert [r["reply"] for r in recs] == ["你好，欢迎。", "今天天气很好。"]
    # a rerun scores the same wavs without synthesising them again
    (out / "utt0.wav").unlink()
    assert main([*args, "--no-synthesis"]) == 0
    assert _summary(out)["n_missing_wavs"] == 1 and _summary(out)["wer"]["skipped"]


RSS_LIMIT = 4 * 10**9  # bytes: 4 GB


def _peak_rss(cmd: list[str], cwd, timeout: float = 600.0) -> int:
    """Runs ``cmd`` in ``cwd`` (not the repository root, whose uncompiled source tree would be
    imported instead of the installed package) to a successful end; the peak resident bytes of it
    and its children, polled every 20 ms. A run that passes ``RSS_LIMIT`` is stopped there and
    fails the test."""
    import subprocess
    import tempfile
    import time

    import psutil

    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, cwd=cwd)
        root, peak, t0 = psutil.Process(proc.pid), 0, time.monotonic()
        try:
            while proc.poll() is None:
                assert time.monotonic() - t0 < timeout, "the run did not finish"
                try:
                    tree = [root, *root.children(recursive=True)]
                    peak = max(peak, sum(p.memory_info().rss for p in tree if p.is_running()))
                except psutil.Error:  # a process ended between listing and reading it
                    pass
                assert peak < RSS_LIMIT, f"{peak / 1e9:.2f} GB resident: stopped"
                time.sleep(0.02)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        err.seek(0)
        assert proc.returncode == 0, err.read().decode(errors="replace")[-3000:]
    return peak


@pytest.mark.slow
def test_seed_tts_run_stays_within_bounded_memory(tiny_dir, tmp_path):
    """The whole run as a user starts it (the random set, the default recipe, WER by paraformer):
    its speech is capped and its memory stays small however long the model would keep talking;
    a wav far longer than any capped line is transcribed in windows, in the same memory."""
    import sys

    import numpy as np
    import soundfile as sf
    from eval_data import seed_tts

    from llama_omni_py.eval.seedtts import asr

    meta = seed_tts(tmp_path / "seed")
    para = _seed_models(tmp_path / "models")[0]
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "llama_omni_py", "eval", "seed-tts", "--meta", str(meta), "--model-dir", str(tiny_dir)]
    cmd += ["--asr", f"paraformer:{para}", "--device", "cpu", "--out", str(out)]
    peak = _peak_rss(cmd, tmp_path)
    print(f"peak RSS of the run: {peak / 1e9:.2f} GB")
    assert peak < RSS_LIMIT
    assert _summary(out)["wer"]["n"] == 3
    _assert_capped_as_recorded(out, 3)
    # a wav of twice the paraformer window (seconds of noise at 24 kHz) is scored in windows
    seconds = 2 * asr.PARAFORMER_WINDOW_S + 10
    noise = 0.1 * np.random.default_rng(0).standard_normal(int(seconds * 24000)).astype(np.float32)
    sf.write(out / "utt0.wav", noise, 24000)
    peak = _peak_rss([*cmd, "--no-synthesis"], tmp_path)
    print(f"peak RSS of scoring a {seconds:.0f} s wav: {peak / 1e9:.2f} GB")
    assert peak < RSS_LIMIT
    assert _summary(out)["wer"]["n"] == 3


def test_speech_cap_rule():
    # 20 speech codes (0.8 s at 25 codes a second) per text token, at least 2 s
    assert seedtts_run.speech_cap_s(1) == 2.0 and seedtts_run.speech_cap_s(2) == 2.0
    assert seedtts_run.speech_cap_s(3) == pytest.approx(2.4) and seedtts_run.speech_cap_s(10) == pytest.approx(8.0)
    assert "20 speech codes (0.8 s) per text token" in seedtts_run.SPEECH_CAP_RULE


class _Stream:
    """A reply stream of one-second chunks (24 kHz), endless unless ``seconds`` is given; closing it
    is recorded, as closing a session's stream cancels its request."""

    def __init__(self, seconds=None, text="ab"):
        self.seconds, self.text, self.closed, self.sent = seconds, text, False, 0

    def __iter__(self):
        import itertools

        import numpy as np

        from llama_omni_py.results import SpeechChunk, Timings

        yield SpeechChunk(self.text, np.zeros(0, np.float32), 0, False)
        for i in itertools.count() if self.seconds is None else range(self.seconds):
            self.sent += 1
            yield SpeechChunk("", np.full(24000, i + 1, np.float32), i + 1, False)
        yield SpeechChunk("", np.zeros(0, np.float32), 0, True, Timings(wall_s=1.5, n_tts_tokens=7))

    def close(self):
        self.closed = True


def test_a_reply_is_cut_at_its_speech_cap_and_cancelled():
    endless = _Stream()
    result, capped = seedtts_run.collect_capped(_Closing(endless), 2 * 24000 + 12000)
    assert capped and endless.closed and endless.sent == 3  # stopped at the first chunk past the cap
    assert result.audio.size == 60000 and result.audio[-1] == 3 and result.text == "ab"
    assert result.timings.wall_s == 0.0  # cancelled: no final chunk


def test_a_reply_within_its_cap_is_kept_whole():
    for cap in (3 * 24000, 10 * 24000):  # exactly at the cap, and under it
        short = _Stream(seconds=3)
        result, capped = seedtts_run.collect_capped(_Closing(short), cap)
        assert not capped and short.closed and result.audio.size == 3 * 24000
        assert result.timings.n_tts_tokens == 7


class _Closing:
    """An iterator over a _Stream with the ``close()`` of a generator."""

    def __init__(self, stream):
        self._it, self._stream = iter(stream), stream

    def __iter__(self):
        return self._it

    def close(self):
        self._stream.close()


@pytest.mark.slow
def test_videomme_and_seed_tts_against_our_endpoint(vmme, tiny_dir, tmp_path):
    from eval_data import seed_tts

    meta = seed_tts(tmp_path / "seed")
    with running_gateway(tiny_dir) as gw:
        out = tmp_path / "vmme"
        args = ["eval", "videomme", "--data", str(vmme), "--protocol", "vllm-omni", "--endpoint", gw.url]
        assert main([*args, "--limit", "3", "--max-frames", "2", "--out", str(out)]) == 0
        s = _summary(out)
        assert s["counts"]["items"] == 3 and s["counts"]["failed_requests"] == 0, [r["error"] for r in _records(out)]
        tts = tmp_path / "tts"
        args = ["eval", "seed-tts", "--meta", str(meta), "--endpoint", gw.url, "--limit", "3", "--out", str(tts)]
        assert main(args) == 0
    recs = _records(tts)
    assert len(recs) == 3 and all(r["ok"] for r in recs), [r.get("error") for r in recs]
    assert sorted(p.name for p in tts.glob("*.wav")) == ["utt0.wav", "utt1.wav", "utt2.wav"]
    assert _summary(tts)["n_missing_wavs"] == 0
