"""OmniSession end to end on the tiny set: the threaded pipeline gives the same audio as the
sequential path, streams before the LLM is done, cancels, forwards stage errors, cleans up."""

import os
import threading

import numpy as np
import pytest

import llama_omni_py as omni
from llama_omni_py.orchestration import stages
from llama_omni_py.orchestration.inputs import Request, build_prompt

TEXT = "hello there, how are you today?"


def _omni_threads():
    """The pipeline's threads still alive (a server another test module left running is not ours)."""
    return [t for t in threading.enumerate() if t.name.startswith("omni-") and t.name != "omni-server"]


def _t2w(threads=1):
    return omni.Token2WavConfig(threads=threads)


def _sequential(session, text, seed):
    """The stages one after the other (the reference path the pipeline must equal)."""
    return stages.synthesize(session.llm, session.tts, session.token2wav, _reply(session, text, seed))


def _reply(session, text, seed):
    c, tts = session.reply, session.reply.tts_sampling(session.engine_config.fidelity)
    prompt = build_prompt(session.llm.model, Request(text, seed=seed), session.inputs.encode(Request(text)))
    return stages.ReplyPlan(prompt, seed, c.max_new_tokens, c.max_audio_per_chunk, c.llm, tts, c.tts_handoff)


@pytest.fixture(scope="module")
def session(tiny_dir):
    # prompt_cache off: these tests compare replies to the same request bit for bit
    cfg = omni.EngineConfig(threads=1, token2wav=_t2w(), prompt_cache=False)
    with omni.OmniSession(tiny_dir, "cpu", cfg, reply=omni.ReplyConfig(max_new_tokens=40)) as s:
        yield s


def test_speak_matches_the_sequential_path(session, tmp_path):
    r = session.speak(TEXT, seed=5)
    assert r.sample_rate == 24000 and r.audio.dtype == np.float32 and r.audio.size > 0
    text, ref = _sequential(session, TEXT, 5)
    assert r.text == text and np.array_equal(r.audio, ref)
    assert np.array_equal(session.speak(TEXT, seed=5).audio, r.audio)  # same seed, same audio
    r.save(tmp_path / "out.wav")
    import soundfile as sf

    back, sr = sf.read(tmp_path / "out.wav", dtype="float32")
    assert sr == 24000 and back.shape == r.audio.shape
    assert r.timings.audio_s == pytest.approx(r.audio.size / 24000) and r.timings.wall_rtf > 0
    assert r.timings.seed == 5 and r.timings.n_tts_tokens > 0


def test_stream_overlaps_the_llm(tiny_dir, monkeypatch):
    # The tiny LLM is far faster than the rest; give it a real LLM's pace (0.3 s per chunk) and
    # the TTS a real reply's length per chunk (25 codes), so the test shows the stages
    # overlapping rather than the LLM racing ahead.
    import time

    session = omni.OmniSession(
        tiny_dir,
        "cpu",
        omni.EngineConfig(threads=1, token2wav=_t2w()),
        reply=omni.ReplyConfig(max_new_tokens=40, max_audio_per_chunk=25),
    )
    real = session.llm.chunks

    def paced(*a, **k):
        for chunk in real(*a, **k):
            time.sleep(0.3)
            yield chunk

    monkeypatch.setattr(session.llm, "chunks", paced)
    chunks = list(session.stream(TEXT, seed=1))
    assert len(chunks) >= 2 and chunks[-1].is_final and not any(c.is_final for c in chunks[:-1])
    assert [c.index for c in chunks] == list(range(len(chunks)))
    assert chunks[-1].timings is not None and all(c.timings is None for c in chunks[:-1])
    ev = chunks[-1].timings.events
    llm_end = max(e for name, s, e in ev if name == "llm")
    first_t2w = min(e for name, s, e in ev if name == "token2wav")
    assert first_t2w < llm_end  # the first audio chunk was out before the LLM finished
    session.close()


def test_cancel_stops_within_a_chunk(session):
    seen = []
    for chunk in session.stream(TEXT, seed=2):
        seen.append(chunk)
        session.cancel()
    full = list(session.stream(TEXT, seed=2))
    assert len(seen) == 1 and len(full) > 1 and not _omni_threads()
    assert np.array_equal(full[0].audio, seen[0].audio)  # a cancelled request leaves no state behind


def test_stage_error_is_named(session, monkeypatch):
    def broken(*a, **k):
        raise RuntimeError("boom")

    monkeypatch.setattr(session.tts, "speak", broken)
    with pytest.raises(omni.PipelineError, match="tts stage failed: RuntimeError: boom") as info:
        session.speak(TEXT)
    assert info.value.stage == "tts" and isinstance(info.value.__cause__, RuntimeError)
    assert not _omni_threads()


def test_audio_and_image_input(session):
    t = np.arange(16000) / 16000
    r = session.speak(
        audio=(0.3 * np.sin(2 * np.pi * 330 * t)).astype(np.float32), image=np.full((32, 48, 3), 90, np.uint8), seed=3
    )
    assert r.audio.size > 0 and r.timings.apm_ms > 0 and r.timings.vpm_ms > 0


def test_sliced_image_counts_and_max_slice_nums(session):
    page = (np.random.default_rng(0).random((1008, 1344, 3)) * 255).astype(np.uint8)
    # llama.cpp-omni's rules (the default fidelity) slice nothing unless asked
    one = session.speak("read it", image=page, seed=3, max_new_tokens=4, speech=False)
    assert (one.timings.vision_slices, one.timings.vision_tokens) == (1, 64)
    r = session.speak("read it", image=page, seed=3, max_new_tokens=4, speech=False, max_slice_nums=9)
    assert (r.timings.vision_slices, r.timings.vision_tokens) == (7, 7 * 64)  # overview + 3 x 2 slices
    assert r.timings.prompt_tokens - one.timings.prompt_tokens >= 6 * 64  # the slices' rows are in the prompt
    two = session.speak("both", image=[page, page], seed=3, max_new_tokens=4, speech=False, max_slice_nums=[4, 0])
    assert two.timings.vision_slices == 5 + 1
    for bad in (10, -1, [4], "9", 2.5):
        with pytest.raises(omni.InvalidArgumentError, match="max_slice_nums"):
            session.speak("x", image=[page, page], max_slice_nums=bad)


def test_bad_requests_and_config():
    with pytest.raises(omni.ConfigError, match="tts_queue"):
        omni.ReplyConfig(tts_queue=0)
    with pytest.raises(omni.ConfigError, match="audio_mode"):
        omni.EngineConfig(audio_mode="all")
    with pytest.raises(omni.ConfigError, match="vision"):
        omni.EngineConfig(vision="reference")
    with pytest.raises(omni.ConfigError, match="max_slice_nums"):
        omni.EngineConfig(vision=omni.VisionConfig(max_slice_nums=12))
    with pytest.raises(omni.ConfigError) as err:
        omni.EngineConfig(token2wav=omni.Token2WavConfig(cache_policy="pytorch"))
    assert err.value.field == "cache_policy"


def test_token2wav_cache_policy_reaches_token2wav(session, tiny_dir):
    assert session.token2wav.cache_policy == "llama.cpp-omni"
    cfg = omni.EngineConfig(pin=False, token2wav=omni.Token2WavConfig(threads=1, cache_policy="reference"))
    with omni.OmniSession(tiny_dir, "cpu", cfg, reply=omni.ReplyConfig(max_new_tokens=10)) as s:
        assert s.token2wav.cache_policy == "reference"


def test_empty_request_and_close(tiny_dir):
    s = omni.OmniSession(
        tiny_dir, "cpu", omni.EngineConfig(token2wav=_t2w()), reply=omni.ReplyConfig(max_new_tokens=10)
    )
    with pytest.raises(omni.InvalidArgumentError):
        s.speak("   ")
    s.close()
    assert not _omni_threads()
    with pytest.raises(omni.InvalidArgumentError, match="closed"):
        s.speak("hi")


def test_stage_threads_and_vocoder_follow_the_plan(tiny_dir, monkeypatch):
    import os

    from llama_omni_py.device import placement

    mask = sorted(os.sched_getaffinity(0))
    if len(mask) < placement.MIN_CPUS_TO_PIN:  # emulate a roomier node inside our own mask
        monkeypatch.setattr(placement, "MIN_CPUS_TO_PIN", 2 if len(mask) >= 2 else 1)
    s = omni.OmniSession(
        tiny_dir,
        "cpu",
        omni.EngineConfig(token2wav=_t2w()),
        reply=omni.ReplyConfig(max_new_tokens=20, max_audio_per_chunk=25),
    )
    plan = s.placement
    assert plan is not None and s.token2wav.threads == len(plan.vocoder_cpus) == 1
    if len(mask) > 1:
        assert not set(plan.vocoder_cpus) & set(plan.stage_cpus)
    seen = []
    real = s.llm.chunks

    def spy(*a, **k):
        seen.append(os.sched_getaffinity(0))
        yield from real(*a, **k)

    monkeypatch.setattr(s.llm, "chunks", spy)
    s.speak(TEXT, seed=0)
    s.close()
    assert seen == [set(plan.stage_cpus)]  # the LLM stage thread ran on the stage CPUs
    assert sorted(os.sched_getaffinity(0)) == mask  # the caller's thread is untouched


def test_small_hosts_stay_unpinned(tmp_path):
    from llama_omni_py.device import placement

    (tmp_path / "node0").mkdir()
    (tmp_path / "node0" / "cpulist").write_text("0-1\n")
    plan = placement.plan_placement(placement.read_topology(tmp_path, allowed=[0, 1]))
    assert not plan.apply and "unpinned" in " ".join(plan.notes)


def test_async_stream_matches_speak(session):
    import asyncio

    async def collect():
        return [c async for c in session.astream(TEXT, seed=5)]

    chunks = asyncio.run(collect())
    assert chunks[-1].is_final
    assert np.array_equal(np.concatenate([c.audio for c in chunks]), session.speak(TEXT, seed=5).audio)


def test_audio_comes_a_window_at_a_time(session):
    # Token2Wav gets every 25 codes: 20160 samples for the first second, 24000 for each later one,
    # the rest with the final flush; text arrives in its own chunks, ahead of its audio.
    chunks = list(session.stream(TEXT, seed=7))
    audio = [c for c in chunks if c.audio.size]
    assert audio[0].audio.size == 20160 and all(c.audio.size == 24000 for c in audio[1:-1])
    assert all(c.audio.size <= 24000 for c in audio)  # never more than a second at once
    assert all(not (c.text_delta and c.audio.size) for c in chunks)
    texts = [i for i, c in enumerate(chunks) if c.text_delta]
    assert texts and texts[0] < chunks.index(audio[0])  # the first text before the first audio
    n_codes = chunks[-1].timings.n_tts_tokens
    assert sum(c.audio.size for c in chunks) == (3 + n_codes) * 960  # 2 mel frames x 480 samples per code
    t = chunks[-1].timings
    assert 0 < t.first_text_s <= t.first_codes_s <= t.time_to_first_audio_s <= t.wall_s


def test_voice_and_per_request_token_limit(session):
    t = np.arange(8000) / 16000
    voice = (0.2 * np.sin(2 * np.pi * 220 * t)).astype(np.float32)
    short = session.speak(TEXT, seed=4, max_new_tokens=5)
    full = session.speak(TEXT, seed=4)
    # the limit holds; the same seed gives the same first tokens (the full reply's length
    # depends on the random weights and the CPU's rounding, so it is not asserted)
    assert short.timings.n_tokens <= 5 and full.timings.n_tokens <= 40
    assert full.text.startswith(short.text)
    with_voice = session.speak(TEXT, seed=4, ref_audio=voice)
    assert with_voice.timings.apm_ms > 0 and not np.array_equal(with_voice.audio, full.audio)
    with pytest.raises(omni.InvalidArgumentError, match="max_new_tokens"):
        session.speak(TEXT, max_new_tokens=0)
    with pytest.raises(TypeError):
        session.speak(TEXT, colour="blue")  # unknown options are not silently ignored


def test_two_stage_token2wav_gives_the_same_audio(tiny_dir, session):
    # Token2Mel and the vocoder as two pipeline stages (overlap): the same reply, bit for bit,
    # as the one-stage pipeline and the sequential path; the timings still count Token2Wav.
    cfg = omni.EngineConfig(threads=1, token2wav=omni.Token2WavConfig(threads=1, overlap=True), prompt_cache=False)
    with omni.OmniSession(tiny_dir, "cpu", cfg, reply=omni.ReplyConfig(max_new_tokens=40)) as two:
        assert two.stages.overlap and not session.stages.overlap  # the default on the CPU is one stage
        r = two.speak(TEXT, seed=5)
        names = {name for name, _, _ in r.timings.events}
        text, ref = stages.synthesize(two.llm, two.tts, two.token2wav, _reply(two, TEXT, 5), overlap=True)
    assert {"token2mel", "vocoder"} <= names and "token2wav" not in names
    assert np.array_equal(r.audio, session.speak(TEXT, seed=5).audio)
    assert r.text == text and np.array_equal(r.audio, ref)
    assert r.timings.token2wav_ms > 0 and r.timings.n_tts_tokens > 0


def test_encoders_default_to_the_stage_cpus(tiny_dir):
    # APM/VPM run between LLM calls on its thread: all the CPUs the stages may use, unless
    # EngineConfig.threads says otherwise.
    cpus = len(os.sched_getaffinity(0))
    with omni.OmniSession(tiny_dir, "cpu", omni.EngineConfig(token2wav=_t2w(), pin=False)) as s:
        assert s.inputs.threads == min(cpus, 16)
        assert s.speak(image=np.full((32, 48, 3), 90, np.uint8), seed=3).timings.vpm_ms > 0
    with omni.OmniSession(tiny_dir, "cpu", omni.EngineConfig(threads=1, token2wav=_t2w())) as s:
        assert s.inputs.threads == 1


def test_session_profile_at_close(tiny_dir, monkeypatch, capsys):
    monkeypatch.setenv("OMNI_T2W_PROFILE", "1")
    s = omni.OmniSession(
        tiny_dir,
        "cpu",
        omni.EngineConfig(token2wav=omni.Token2WavConfig(threads=1)),
        reply=omni.ReplyConfig(max_new_tokens=40, max_audio_per_chunk=30),
    )
    r = s.speak("hello there, how are you today?", seed=0)
    t = r.timings
    assert t.audio_s == pytest.approx(r.audio.size / 24000)
    assert 0 < t.time_to_first_audio_s <= t.wall_s and t.wall_rtf > 0
    assert t.compute_rtf is None or t.compute_rtf > 0
    s.close()
    err = capsys.readouterr().err
    assert "OMNI_T2W_PROFILE" in err and "token2wav" in err and "p95" in err
