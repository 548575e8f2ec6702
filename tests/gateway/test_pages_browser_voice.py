"""The hands-free page (/half_duplex) in headless Chromium, served by the gateway: a WAV of
spoken questions (espeak-ng) is the microphone; the server's VAD ends each question, the reply
streams back and plays, and the page keeps listening for the next one. A screenshot is kept in
tests/artifacts/."""

from server_client import http, running_gateway, wait_until
from speech import SR, conversation
from test_pages_browser import ARTIFACTS, _wait, fake_mic_chrome, write_wav16


def _spoken_microphone(path):
    audio, _ = conversation(["What is the capital of France?", "Tell me a joke."], pause_s=3.0, lead_s=1.0)
    return write_wav16(path, audio, SR)


def test_half_duplex_page_holds_a_spoken_conversation(tiny_dir, tmp_path):
    mic = _spoken_microphone(tmp_path / "mic.wav")
    browser = fake_mic_chrome(mic)
    try:
        with running_gateway(tiny_dir, workers=1) as gw:
            browser.set_page_load_timeout(30)
            browser.get(gw.url + "/half_duplex")
            browser.find_element("id", "start").click()
            stats = _wait(browser, "const s = window.omniHalfDuplexStats; return s.turns >= 2 ? s : null", timeout=120)
            assert http(gw.url + "/status")[1]["idle_workers"] == 0  # the session holds its worker
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            browser.save_screenshot(str(ARTIFACTS / "browser-half-duplex.png"))
            browser.find_element("id", "stop").click()
            wait_until(lambda: http(gw.url + "/status")[1]["idle_workers"] == 1)
            turns = browser.find_element("id", "turns").text
    finally:
        browser.quit()
    assert stats["errors"] == [] and stats["prepared"]
    assert stats["speechStops"] >= stats["turns"] >= 2 and stats["speechStarts"] >= stats["speechStops"]
    assert stats["chunks"] > 0 and stats["audioSeconds"] > 0
    assert len(stats["latencies"]) >= 1 and all(ms > 0 for ms in stats["latencies"])
    assert int(turns) >= 2
