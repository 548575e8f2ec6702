"""A message's parts in order: the prompt tokens of [frame, audio] x N + text as MiniCPM-o's
chat() and processor write them (each part its marker, joined by "" in omni mode and "\\n"
otherwise; <image> + 64 rows + </image>, <|audio_start|> + rows + <|audio_end|>), llama.cpp-omni's
evaluation layout, the keyword shorthand, history turns with parts, and the errors."""

import numpy as np
import pytest
from video_files import video

import llama_omni_py as omni
from llama_omni_py.modules.llm.prompt import ASSISTANT_SPEECH_PREFIX, ASSISTANT_TEXT_PREFIX
from llama_omni_py.orchestration.inputs import Request, build_prompt
from llama_omni_py.video import audio_rows

QUESTION = "Carefully read the following question and select the letter."


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    """3.5 s of video with a tone: frames at 0..3 s, segments of 1, 1, 1 and 0.5 s."""
    return video(tmp_path_factory.mktemp("clip") / "clip.mp4", 3.5)


@pytest.fixture(scope="module")
def silent(tmp_path_factory):
    return video(tmp_path_factory.mktemp("silent") / "silent.mp4", 2, size="64x48", tone=None)


@pytest.fixture(scope="module", params=["reference", "llama.cpp-omni"])
def session(request, tiny_dir):
    cfg = omni.EngineConfig(fidelity=request.param, threads=1, token2wav=omni.Token2WavConfig(threads=1))
    with omni.OmniSession(tiny_dir, "cpu", cfg, reply=omni.ReplyConfig(max_new_tokens=4)) as s:
        yield s


def _rule(session) -> str:
    """The session's prompt layout."""
    return session.reply.prompt_rule(session.engine_config.fidelity)


def _flat(prompt) -> list:
    """Token ids, and -1 for each embedding row."""
    out = []
    for kind, x in prompt.segments:
        out += list(x) if kind == "tokens" else [-1] * len(x)
    return out


def _prompt(session, **kw):
    r = Request.of(system_prompt=False, **kw)
    return build_prompt(session.llm.model, r, session.inputs.encode(r), style=_rule(session))


def _restated(model, pieces: list, join: str, suffix: str) -> list:
    """The reference's user turn, restated: <|im_start|>user\n, the pieces -- ("text", s),
    ("image", rows) or ("audio", rows) markers -- joined, then the assistant prefix; each marker's
    <unk> run is that many embedding rows."""
    out = list(model.tokenize("<|im_start|>user\n", True))
    for i, (kind, n) in enumerate(pieces):
        sep = join if i else ""
        if kind == "text":
            out += list(model.tokenize(sep + n, False))
            continue
        out += list(model.tokenize(sep, False)) if sep else []
        start, end = {
            "image": ("<image>", "</image>"),
            "image0": ("<image_id>0</image_id><image>", "</image>"),
            "audio": ("<|audio_start|>", "<|audio_end|>"),
        }[kind]
        out += list(model.tokenize(start, True)) + [-1] * n + list(model.tokenize(end, True))
    return out + list(model.tokenize(suffix, True))


def test_video_is_frames_interleaved_with_their_audio(session, clip):
    model = session.llm.model
    got = _flat(_prompt(session, text=QUESTION, video=clip))
    segments = [16000, 16000, 16000, 8000]
    markers = [m for n in segments for m in (("image", 64), ("audio", audio_rows(n)))]
    # the reference's omni mode joins with ""; llama.cpp-omni's evaluation CLI writes "\n" after each part
    join = "" if _rule(session) == "reference" else "\n"
    want = _restated(model, [*markers, ("text", QUESTION)], join, ASSISTANT_SPEECH_PREFIX)
    assert got == want


def test_frames_only_video_is_joined_by_newlines(session, silent):
    model = session.llm.model
    got = _flat(_prompt(session, text=QUESTION, video=silent))
    want = _restated(model, [("image", 64), ("image", 64), ("text", QUESTION)], "\n", ASSISTANT_SPEECH_PREFIX)
    assert got == want


def test_content_order_is_kept(session, clip):
    model = session.llm.model
    tone = (0.2 * np.sin(np.arange(16000) / 16000 * 2 * np.pi * 300)).astype(np.float32)
    frame = np.full((48, 64, 3), 120, np.uint8)
    content = ["First listen:", omni.Audio(tone), "then look:", omni.Image(frame), "and answer."]
    got = _flat(_prompt(session, content=content, speech=False, tts_template=False))
    join = "\n" if _rule(session) == "reference" else ""
    lco = _rule(session) == "llama.cpp-omni"
    suffix = "<|im_end|>\n<|im_start|>assistant\n" if lco else ASSISTANT_TEXT_PREFIX
    # an image (not a video frame) carries its id under the reference's layout
    image = "image0" if _rule(session) == "reference" else "image"
    pieces = [("text", "First listen:"), ("audio", 10), ("text", "then look:"), (image, 64), ("text", "and answer.")]
    assert got == _restated(model, pieces, join, suffix)


def test_shorthand_is_images_videos_audio_text(session, clip):
    tone = (0.2 * np.sin(np.arange(16000) / 16000 * 2 * np.pi * 300)).astype(np.float32)
    frame = np.full((48, 64, 3), 120, np.uint8)
    short = _flat(_prompt(session, text="hi", image=frame, video=clip, audio=tone))
    long = _flat(_prompt(session, content=[omni.Image(frame), omni.Video(clip), omni.Audio(tone), "hi"]))
    assert short == long


def test_history_turns_take_parts(session, clip):
    model = session.llm.model
    tone = (0.2 * np.sin(np.arange(16000) / 16000 * 2 * np.pi * 300)).astype(np.float32)
    hist = [("user", ["Hear this", omni.Audio(tone)]), ("assistant", "A tone.")]
    got = _flat(_prompt(session, text="And now?", history=hist))
    join = "\n" if _rule(session) == "reference" else ""
    turn = list(model.tokenize("<|im_start|>user\n", True)) + list(model.tokenize("Hear this", False))
    turn += list(model.tokenize(join, False)) if join else []
    turn += list(model.tokenize("<|audio_start|>", True)) + [-1] * 10 + list(model.tokenize("<|audio_end|>", True))
    turn += list(model.tokenize("<|im_end|>\n", True))
    assert any(got[i : i + len(turn)] == turn for i in range(len(got)))


def test_max_frames_one_is_one_frame_and_all_the_audio(session, clip):
    t = session.speak(QUESTION, video=clip, max_frames=1, seed=1).timings
    assert t.video_frames == 1 and t.audio_segments == 1 and t.audio_tokens == 35


def test_timings_report_frames_segments_and_rows(session, clip):
    t = session.speak(QUESTION, video=clip, seed=1).timings
    assert (t.video_frames, t.audio_segments, t.audio_tokens) == (4, 4, 35)
    assert t.vision_tokens == 4 * 64 and t.prompt_tokens > 4 * 64 + 35


def test_bad_video_input_is_a_typed_error(session, clip, silent, tmp_path):
    broken = tmp_path / "broken.mp4"
    broken.write_bytes(clip.read_bytes()[:2000])  # the header and no frame
    with pytest.raises(omni.MediaError):
        session.speak(QUESTION, video=broken)
    with pytest.raises(omni.MediaError, match="no such file"):
        session.speak(QUESTION, video=clip, video_audio=tmp_path / "missing.wav")
    bad_track = tmp_path / "bad.wav"
    bad_track.write_bytes(b"RIFF\x00\x00\x00\x00WAVEjunk")
    with pytest.raises(omni.MediaError):
        session.speak(QUESTION, video=clip, video_audio=bad_track)
    for n in (0, 1025, 2.5, True):
        with pytest.raises(omni.InvalidArgumentError, match="max_frames"):
            session.speak(QUESTION, video=clip, max_frames=n)
    with pytest.raises(omni.InvalidArgumentError, match="not both"):
        session.speak(QUESTION, content=["x"])
    with pytest.raises(omni.InvalidArgumentError, match="content part"):
        session.speak(content=[object()])
    assert session.speak(QUESTION, video=silent, seed=1).timings.video_frames == 2  # still alive


def test_a_prompt_past_the_context_names_both_numbers(tiny_dir, clip):
    cfg = omni.EngineConfig(n_ctx=512, threads=1, token2wav=omni.Token2WavConfig(threads=1))
    with omni.OmniSession(tiny_dir, "cpu", cfg, reply=omni.ReplyConfig(max_new_tokens=16)) as s:
        with pytest.raises(omni.InvalidArgumentError, match=r"prompt \(\d+ tokens\).*context \(512 tokens\)"):
            s.speak(QUESTION, video=clip)
        assert s.speak("hi", seed=1).text is not None  # the session goes on


@pytest.mark.slow
def test_a_200_second_video_is_64_frames_and_64_segments_in_the_default_context(tiny_dir, tmp_path):
    path = video(tmp_path / "long.mp4", 200, size="64x48", fps=5, tone=300)
    cfg = omni.EngineConfig(threads=1, token2wav=omni.Token2WavConfig(threads=1))
    assert cfg.n_ctx == 8192
    with omni.OmniSession(tiny_dir, "cpu", cfg, reply=omni.ReplyConfig(max_new_tokens=4)) as s:
        t = s.speak(QUESTION, video=path, speech=False, seed=1).timings
    assert (t.video_frames, t.audio_segments) == (64, 64)
    assert 1990 <= t.audio_tokens <= 2000  # 10 rows a second of all 200 s: no segment clamped at 29.9 s
    assert 64 * 66 < t.prompt_tokens < cfg.n_ctx


def test_every_slot_holds_its_encoders_output(tiny_dir, clip):
    # the prompt's embedding slots, in order: each frame's block is the vision encoder's for that
    # frame, each segment's rows the audio encoder's (merged, as the reference encodes them)
    from llama_omni_py import video as V

    cfg = omni.EngineConfig(fidelity="reference", threads=1, token2wav=omni.Token2WavConfig(threads=1))
    with omni.OmniSession(tiny_dir, "cpu", cfg) as s:
        r = Request.of(QUESTION, video=clip, system_prompt=False)
        prompt = build_prompt(s.llm.model, r, s.inputs.encode(r), style="reference")
        apm, vpm = s.inputs.encoders()
        parts = V.load_video(clip, s.engine_config.video)
        frames = vpm.encode_overviews([vpm.overview(f) for f in parts.frames])
        audio = apm.encode_as_reference(parts.segments, True, 1.0)
    slots = [x for kind, x in prompt.segments if kind == "embeddings"]
    want = [b for pair in zip(frames, audio) for b in pair]
    assert len(slots) == len(want) == 8
    for got, w in zip(slots, want):
        assert got.shape == w.shape and np.array_equal(got, w)
