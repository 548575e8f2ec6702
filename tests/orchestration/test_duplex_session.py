"""Full duplex end to end on the tiny set: one result per unit with a second of audio, forced
listening first, the streaming form, pause, barge-in, bad input, and a five-minute session with
bounded context and memory."""

import numpy as np
import psutil
import pytest

import llama_omni_py as omni

TONE = (0.3 * np.sin(2 * np.pi * 330 * np.arange(16000) / 16000)).astype(np.float32)


@pytest.fixture(scope="module")
def session(tiny_dir):
    # the reference's image rules: frames laid out as the reference's duplex prefill
    vision = omni.VisionConfig(rules="reference")
    cfg = omni.EngineConfig(threads=1, token2wav=omni.Token2WavConfig(threads=1), vision=vision)
    with omni.OmniSession(tiny_dir, "cpu", cfg) as s:
        yield s


def test_units_give_a_second_of_audio_each(session):
    with session.duplex(system_prompt="Be brief.") as d:
        results = [d.push(TONE) for _ in range(8)]
    assert [r.unit for r in results] == list(range(1, 9))
    assert all(r.is_listen and not r.audio.any() and r.audio.size == 24000 for r in results[:3])  # forced
    for r in results:
        assert r.audio.dtype == np.float32 and (r.audio.size == 24000 or r.end_of_turn)
        assert r.timings.cost_llm_ms > 0 and r.timings.kv_cache_length > 0
        assert r.is_listen or r.timings.n_tts_tokens <= 25
    speaking = [r for r in results if not r.is_listen]
    assert speaking and any(r.text for r in speaking)  # random weights talk
    with pytest.raises(omni.InvalidArgumentError, match="closed"):
        d.push(TONE)
    assert session.speak("hello", max_new_tokens=5).timings.wall_s > 0  # the session is free again


def test_streaming_form_pause_and_bad_input(session, tiny_dir):
    with session.duplex(config=omni.DuplexConfig(seed=3)) as d:
        for _ in range(4):
            d.send(TONE)
        got = [next(iter(d.results())) for _ in range(4)]
        assert [r.unit for r in got] == [1, 2, 3, 4]
        d.pause()
        with pytest.raises(omni.InvalidArgumentError, match="paused"):
            d.send(TONE)
        d.resume()
        assert d.push(TONE).unit == 5
        with pytest.raises(omni.MediaError):
            d.push(np.full(10, np.nan, np.float32))
        with pytest.raises(omni.InvalidArgumentError, match="already serving"):
            session.speak("hi")  # duplex holds the session
        with pytest.raises(omni.InvalidArgumentError, match="already serving"):
            session.duplex()
    with pytest.raises(omni.ConfigError, match="max_context"):
        session.duplex(config=omni.DuplexConfig(max_context=100_000))


def test_frames_are_sliced_as_asked(session):
    # a 960x540 frame: the overview alone by default (the reference's duplex uses 1), overview +
    # 2 x 1 slices when the config or the unit asks for 2; the context grows by what was fed
    frame = (np.random.default_rng(1).random((540, 960, 3)) * 255).astype(np.uint8)
    with session.duplex(config=omni.DuplexConfig(max_slice_nums=2)) as d:
        sliced = d.push(TONE, frame)
        # <unit> <image> 64 </image> <slice> 64 </slice> <slice> 64 </slice>, then the audio: no ids
        # or newlines, as the reference's duplex prefill
        find = session.llm.model.find_token
        unit, image, image_end = find("<unit>"), find("<image>"), find("</image>")
        s, e = find("<slice>"), find("</slice>")
        parts = [p if isinstance(p, int) else len(p) for p in d.context.units[0].parts][:11]
        assert parts[:10] == [unit, image, 64, image_end, s, 64, e, s, 64, e]
        one = d.push(TONE, frame, max_slice_nums=1)
        per_frame = d.push(TONE, [frame, frame], max_slice_nums=[2, 0])
        with pytest.raises(omni.InvalidArgumentError, match="max_slice_nums"):
            d.push(TONE, [frame, frame], max_slice_nums=[2])
    assert (sliced.timings.vision_slices, sliced.timings.vision_tokens) == (3, 192)
    assert (one.timings.vision_slices, per_frame.timings.vision_slices) == (1, 4)
    with session.duplex() as d:
        assert d.push(TONE, frame).timings.vision_slices == 1
    with pytest.raises(omni.ConfigError, match="max_slice_nums"):
        omni.DuplexConfig(max_slice_nums=10)


def test_forbidden_tokens_are_never_said(session):
    # all but eight ordinary tokens forbidden: whatever the random weights want to say, only
    # those eight (and special tokens) are fed
    first_added = session.llm.special.first_added
    allowed = set(range(40, 48))
    cfg = omni.DuplexConfig(force_listen_count=0, seed=2, forbidden_token_ids=sorted(set(range(first_added)) - allowed))
    with session.duplex(config=cfg) as d:
        results = [d.push(TONE) for _ in range(6)]
        fed = [p for u in d.context.units for p in u.parts if isinstance(p, int) and p < first_added]
    assert any(not r.is_listen for r in results) and fed, "random weights talk"
    assert set(fed) <= allowed
    with pytest.raises(omni.ConfigError, match="vocabulary"):
        session.duplex(config=omni.DuplexConfig(forbidden_token_ids=[10**7]))


def test_barge_in_closes_the_turn(session):
    with session.duplex(config=omni.DuplexConfig(force_listen_count=0, seed=1)) as d:
        first = d.push(TONE)
        assert not first.is_listen  # random weights start talking at once
        d.interrupt()
        cut = d.push(TONE)
        assert cut.is_listen and not cut.audio.any()
        assert not d.decoder.turn_open


@pytest.mark.slow
def test_five_minutes_with_bounded_context_and_memory(session):
    rss = []
    with session.duplex(config=omni.DuplexConfig(max_context=1024, prune_to=700)) as d:
        for unit in range(300):  # 300 one-second units
            r = d.push(TONE)
            assert r.timings.kv_cache_length <= 1024 + 64
            if unit in (100, 299):
                rss.append(psutil.Process().memory_info().rss)
        assert d.context.pruned_units > 0
    assert rss[1] - rss[0] < 64 << 20  # flat: no growth with the session's length
