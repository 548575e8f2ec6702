"""The Silero voice activity detector with the demo's windowing and hysteresis, on espeak-ng
speech with pauses and noise: each utterance found once, its end decided within
min_silence + 100 ms, whatever the size of the pieces the audio arrives in."""

import numpy as np
import pytest
from speech import SR, conversation, say, with_gap

from llama_omni_py.errors import ConfigError, InvalidArgumentError, ModelFileError
from llama_omni_py.voice import SileroVad, SpeechDiscarded, SpeechStarted, SpeechStopped, StreamingVad, VadOptions

QUESTIONS = ["What is the capital of France?", "Tell me a joke about cats.", "How far away is the moon?"]


@pytest.fixture(scope="module")
def talk():
    return conversation([*QUESTIONS, with_gap("Wait a moment", "and then answer me", 0.3)], pause_s=2.0)


def _run(vad, audio, piece):
    events = []
    for i in range(0, audio.size, piece):
        events += vad.feed(audio[i : i + piece])
    return events + vad.flush()


def test_each_utterance_once_and_its_end_in_time(talk):
    audio, spans = talk
    opts = VadOptions()
    events = _run(StreamingVad(opts), audio, SR // 2)  # the demo page's 0.5 s chunks
    starts = [e for e in events if isinstance(e, SpeechStarted)]
    stops = [e for e in events if isinstance(e, SpeechStopped)]
    assert len(starts) == len(stops) == len(spans), events  # the 0.3 s gap did not split the last one
    assert not [e for e in events if isinstance(e, SpeechDiscarded)]
    for stop, start, truth in zip(stops, starts, spans):
        assert abs(start.at_s - truth.start_s) <= 0.15, (start, truth)
        assert stop.start_s == start.at_s
        delay = stop.decided_s - truth.end_s
        assert opts.min_silence_duration_ms / 1000 <= delay <= opts.min_silence_duration_ms / 1000 + 0.1, (stop, truth)
        # the utterance's audio spans its speech plus the pad, never the trailing silence wait
        assert stop.audio.size / SR <= truth.end_s - truth.start_s + 0.3
        assert stop.audio.size / SR >= truth.end_s - truth.start_s - 0.1
        assert stop.speech_duration_ms == round(stop.audio.size / SR * 1000)


def test_piece_size_does_not_matter(talk):
    audio, _ = talk
    ref = _run(StreamingVad(), audio, SR // 2)
    rng = np.random.default_rng(1)
    vad = StreamingVad()
    events, i = [], 0
    while i < audio.size:  # ragged pieces, some under one window
        n = int(rng.integers(1, 3000))
        events += vad.feed(audio[i : i + n])
        i += n
    events += vad.flush()
    assert [type(e) for e in events] == [type(e) for e in ref]
    for a, b in zip(events, ref):
        if isinstance(a, SpeechStopped):
            assert (a.start_s, a.end_s, a.decided_s) == (b.start_s, b.end_s, b.decided_s)
            assert np.array_equal(a.audio, b.audio)


def test_silence_and_noise_alone_are_not_speech():
    rng = np.random.default_rng(2)
    noise = rng.normal(0, 0.01, SR * 5).astype(np.float32)
    vad = StreamingVad()
    assert _run(vad, noise, 1600) == [] and not vad.speaking


def test_min_silence_and_threshold_change_the_decision(talk):
    audio, spans = talk
    patient = _run(StreamingVad(VadOptions(min_silence_duration_ms=2500)), audio, 4000)
    # pauses of 2 s no longer end a turn: the questions run into one long utterance
    stops = [e for e in patient if isinstance(e, SpeechStopped)]
    assert len(stops) == 1 and stops[0].start_s < spans[0].end_s and stops[0].end_s > spans[-1].start_s
    quick = [e for e in _run(StreamingVad(VadOptions(min_silence_duration_ms=200)), audio, 4000)]
    assert len([e for e in quick if isinstance(e, SpeechStopped)]) >= len(spans)  # the 0.3 s gap now splits


def test_short_speech_is_discarded():
    audio, _ = conversation(["Yes."], pause_s=1.5)
    events = _run(StreamingVad(VadOptions(min_speech_duration_ms=3000)), audio, 8000)
    assert [type(e) for e in events] == [SpeechStarted, SpeechDiscarded]


def test_long_speech_is_cut_at_the_limit():
    long = np.concatenate([say("one two three four five six seven eight nine ten")] * 2)
    audio, _ = conversation([long], pause_s=1.0)
    events = _run(StreamingVad(VadOptions(max_speech_duration_s=2.0, min_silence_duration_ms=1000)), audio, 8000)
    stops = [e for e in events if isinstance(e, SpeechStopped)]
    assert len(stops) >= 2 and all(s.decided_s - s.start_s <= 2.0 + 0.032 for s in stops)  # one 32 ms window


def test_reset_forgets_an_open_segment():
    vad = StreamingVad()
    x = say("Hello there, how are you doing today?")
    vad.feed(x[: x.size // 2])
    assert vad.speaking
    vad.reset()
    assert not vad.speaking and vad.position == 0 and vad.flush() == []


@pytest.mark.parametrize(
    "field,value",
    [
        ("threshold", 1.5),
        ("threshold", "high"),
        ("min_speech_duration_ms", -1),
        ("min_silence_duration_ms", 10),
        ("min_silence_duration_ms", 800.5),
        ("speech_pad_ms", 5000),
        ("max_speech_duration_s", 60),
    ],
)
def test_options_are_checked(field, value):
    with pytest.raises(ConfigError) as e:
        VadOptions(**{field: value})
    assert e.value.field == field


def test_bad_audio_and_model_file(tmp_path):
    vad = StreamingVad()
    with pytest.raises(InvalidArgumentError):
        vad.feed(np.zeros((2, 100), np.float32))
    with pytest.raises(InvalidArgumentError):
        vad.feed(np.array([0.0, np.nan], np.float32))
    bad = tmp_path / "vad.onnx"
    bad.write_bytes(b"not onnx")
    with pytest.raises(ModelFileError):
        SileroVad(bad)
    with pytest.raises(ValueError):
        SileroVad()(np.zeros(100, np.float32))
