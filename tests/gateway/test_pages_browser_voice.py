"""The hands-free page (/half_duplex) in headless Chromium, served by the gateway: a WAV of
spoken questions (espeak-ng) is the microphone; the server's VAD ends each question, the reply
streams back and plays, and the page keeps listening for the next one. A screenshot is kept in
tests/artifacts/."""

from speech import SR, conversation
from test_pages_browser import session_page, write_wav16


def _spoken_microphone(path):
    audio, _ = conversation(["What is the capital of France?", "Tell me a joke."], pause_s=3.0, lead_s=1.0)
    return write_wav16(path, audio, SR)


def test_half_duplex_page_holds_a_spoken_conversation(tiny_dir, tmp_path):
    stats, turns = session_page(
        tiny_dir,
        _spoken_microphone(tmp_path / "mic.wav"),
        "/half_duplex",
        "const s = window.omniHalfDuplexStats; return s.turns >= 2 ? s : null",
        120,
        "browser-half-duplex.png",
        "turns",
    )
    assert stats["errors"] == [] and stats["prepared"]
    assert stats["speechStops"] >= stats["turns"] >= 2 and stats["speechStarts"] >= stats["speechStops"]
    assert stats["chunks"] > 0 and stats["audioSeconds"] > 0
    assert len(stats["latencies"]) >= 1 and all(ms > 0 for ms in stats["latencies"])
    assert int(turns) >= 2
