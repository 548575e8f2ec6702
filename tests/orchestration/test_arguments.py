"""Hostile arguments at every API boundary: a typed error (or a capped value with a warning),
never a crash, a hang or an exception from deep inside the native core."""

import logging
import os
import subprocess
import time

import numpy as np
import pytest

import llama_omni_py as omni
from llama_omni_py import cli, media
from llama_omni_py._native import core

USABLE = len(os.sched_getaffinity(0))
TONE = (0.3 * np.sin(2 * np.pi * 330 * np.arange(16000) / 16000)).astype(np.float32)


@pytest.fixture(scope="module")
def session(tiny_dir):
    cfg = omni.EngineConfig(threads=1, token2wav=omni.Token2WavConfig(threads=1), prompt_cache=False)
    reply = omni.ReplyConfig(max_new_tokens=10, max_audio_per_chunk=10)
    with omni.OmniSession(tiny_dir, "cpu", cfg, reply=reply) as s:
        yield s


# -- thread counts -------------------------------------------------------------------------
def test_huge_thread_counts_are_capped_with_a_warning(tiny_dir, caplog):
    with caplog.at_level(logging.WARNING):
        enc = omni.AudioEncoder(tiny_dir, threads=100000)
        assert enc.encode(TONE).shape[0] > 0  # once a SIGSEGV
        cfg = omni.EngineConfig(threads=100000)
    assert cfg.threads == USABLE and "more than" in caplog.text
    assert omni.EngineConfig(threads=1000).threads == USABLE
    assert omni.Token2WavConfig(threads=100000).resolved_threads == USABLE


@pytest.mark.parametrize(
    "make",
    [
        lambda d: omni.AudioEncoder(d, threads=-3),
        lambda d: omni.ImageEncoder(d, threads=0),
        lambda d: omni.Token2Wav(d, threads=-1),
        lambda d: omni.EngineConfig(threads="2"),
        lambda d: omni.EngineConfig(threads=True),
        lambda d: omni.EngineConfig(threads=1.5),
    ],
)
def test_bad_thread_counts_name_the_field(tiny_dir, make):
    with pytest.raises(omni.ConfigError, match="threads"):
        make(tiny_dir)


def test_the_core_refuses_absurd_thread_counts(tiny_dir):
    # Direct use of the bindings cannot start 100000 OS threads either.
    with pytest.raises(omni.InvalidArgumentError, match="threads"):
        core.Apm(str(tiny_dir / "audio" / "MiniCPM-o-4_5-audio-F16.gguf"), "cpu", 100000, False)


# -- seeds, text, limits -------------------------------------------------------------------
@pytest.mark.parametrize("seed", [2**64, -2, "abc", 1.5, True])
def test_bad_seeds(session, seed):
    with pytest.raises(omni.InvalidArgumentError, match="seed"):
        session.speak("hello", seed=seed)


def test_seed_minus_one_draws_and_reports_a_seed(session):
    r = session.speak("hello", seed=-1)
    assert 0 <= r.timings.seed < 2**32
    again = session.speak("hello", seed=r.timings.seed)
    assert np.array_equal(again.audio, r.audio)  # the reported seed reproduces the reply
    with pytest.raises(omni.ConfigError, match="seed"):
        omni.ReplyConfig(seed=2**32)


@pytest.mark.parametrize(
    "kwargs",
    [{"text": "\ud800"}, {"text": "hi", "system_prompt": "x\udfff"}, {"text": "hi", "history": [("user", "\ud800")]}],
)
def test_lone_surrogates_are_invalid_arguments(session, kwargs):
    text = kwargs.pop("text")
    with pytest.raises(omni.InvalidArgumentError, match="Unicode"):
        session.speak(text, **kwargs)


def test_wrong_types_are_invalid_arguments(session):
    with pytest.raises(omni.InvalidArgumentError, match="text"):
        session.speak(42)
    with pytest.raises(omni.InvalidArgumentError, match="speech"):
        session.speak("hi", speech="yes")


def test_per_request_llm_sampling(session):
    with pytest.raises(omni.InvalidArgumentError, match="llm must be an LlmSampling"):
        session.speak("hi", llm={"temperature": 0})
    with pytest.raises(omni.ConfigError, match="temperature"):
        omni.LlmSampling(temperature=-1)
    # greedy for this request: the seed no longer matters; the session's sampling does use it
    greedy = omni.LlmSampling(temperature=0.0)
    a, b = (session.speak("hello there", seed=s, speech=False, llm=greedy).text for s in (1, 2))
    sampled = {session.speak("hello there", seed=s, speech=False).text for s in range(1, 6)}
    assert a == b and len(sampled) > 1


def test_max_new_tokens_errors_share_one_type(session):
    with pytest.raises(omni.InvalidArgumentError, match="max_new_tokens"):
        session.speak("hello", max_new_tokens=0)
    with pytest.raises(omni.InvalidArgumentError, match="exceeds the context"):  # not a PipelineError
        session.speak("hello", max_new_tokens=10**6)
    with pytest.raises(omni.ConfigError, match="max_new_tokens"):
        omni.ReplyConfig(max_new_tokens=10**6).check_fits(omni.EngineConfig())  # more than n_ctx


def test_bad_devices_and_configs(tiny_dir):
    with pytest.raises(omni.DeviceError, match="malformed"):
        omni.OmniSession(tiny_dir, "gpu::0")
    with pytest.raises(omni.DeviceError, match="string"):
        omni.OmniSession(tiny_dir, 0)
    with pytest.raises(omni.ConfigError, match="config"):
        omni.OmniSession(tiny_dir, "cpu", {"threads": 1})
    with pytest.raises(omni.ConfigError, match="temperature"):
        omni.LlmSampling(temperature=-1)
    with pytest.raises(omni.ConfigError, match="cache_policy"):
        omni.Token2WavConfig(cache_policy="newest")
    with pytest.raises(omni.ConfigError, match="overlap"):
        omni.Token2WavConfig(overlap="yes")
    with pytest.raises(omni.InvalidArgumentError, match="unexpected keyword"):
        omni.Token2Wav(tiny_dir, colour="blue")


# -- media ---------------------------------------------------------------------------------
def test_directory_and_streamless_media(tmp_path):
    with pytest.raises(omni.MediaError, match="is a directory"):
        media.load_audio(tmp_path)
    silent = tmp_path / "silent.mp4"
    subprocess.run(
        [
            media.ffmpeg_binary(),
            "-hide_banner",
            "-loglevel",
            "error",
            "-y",
            "-f",
            "lavfi",
            "-i",
            "sine=frequency=300:duration=1",
            "-c:a",
            "aac",
            str(silent),
        ],
        check=True,
        timeout=60,
    )
    with pytest.raises(omni.MediaError, match="no video stream"):
        media.load_frame(silent)
    with pytest.raises(omni.MediaError, match="path, bytes or a numpy array"):
        media.load_audio(12)


def test_kill_path_is_bounded_when_a_grandchild_holds_the_pipe(tmp_path, monkeypatch):
    # ffmpeg stand-in: a setsid grandchild (outside the killed group) keeps stdout open.
    fake = tmp_path / "ffmpeg"
    pidfile = tmp_path / "grandchild.pid"
    fake.write_text(f"#!/bin/sh\nsetsid sh -c 'echo $$ > {pidfile}; exec sleep 60' &\nsleep 60\n")
    fake.chmod(0o755)
    monkeypatch.setenv("OMNI_FFMPEG", str(fake))
    monkeypatch.setattr(media, "KILL_GRACE", 0.5)
    t0 = time.monotonic()
    try:
        with pytest.raises(omni.MediaError, match="did not finish"):
            media.run_ffmpeg(["-version"], timeout=0.5, retries=0)
        assert time.monotonic() - t0 < 10  # once: forever
    finally:
        if pidfile.exists():
            os.kill(int(pidfile.read_text()), 9)


# -- CLI -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "output,why", [("/missing/dir/x.wav", "does not exist"), ("out.txt", "unsupported format"), (".", "is a directory")]
)
def test_cli_checks_the_output_before_any_work(tmp_path, monkeypatch, capsys, output, why):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # the demo set would be written here
    t0 = time.monotonic()
    assert cli.main(["speak", "hello", "-o", output]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("llama-omni: error:") and why in err[0]
    assert time.monotonic() - t0 < 5 and not (tmp_path / "cache").exists()  # nothing loaded or written


def test_cli_make_models_onto_a_file(tmp_path, capsys):
    target = tmp_path / "taken"
    target.write_text("x")
    assert cli.main(["make-models", str(target)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not a directory" in err[0]


def test_cli_errors_start_on_their_own_line(tiny_copy, tmp_path, capsys):
    # The failure comes while the loading bar is drawn: the error must not share its line.
    tts = tiny_copy / "tts" / "MiniCPM-o-4_5-tts-F16.gguf"
    tts.write_bytes(tts.read_bytes()[:4096])
    out = tmp_path / "r.wav"
    assert cli.main(["speak", "hi", "-o", str(out), "--model-dir", str(tiny_copy), "--device", "cpu"]) == 2
    last = capsys.readouterr().err.split("\n")[-2]
    assert last.startswith("llama-omni: error:") and "loading [" not in last
    assert not out.exists()
