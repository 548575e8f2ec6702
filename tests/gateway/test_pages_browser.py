"""The demo page in headless Chromium (selenium), served by the gateway: a text turn streams audio
that the page receives, decodes and schedules (window.omniStats), a second turn follows on a fresh
connection; the open page holds no engine. A screenshot is kept in tests/artifacts/."""

import os
import shutil
import time
from pathlib import Path

import pytest
from server_client import http, running_gateway, wait_until

ARTIFACTS = Path(os.environ.get("OMNI_TEST_ARTIFACTS", Path(__file__).parents[1] / "artifacts"))


def _chrome(*extra: str):
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if not (binary and driver):
        # A missing browser fails the test (never a skip that reads as a pass); .ci/run installs both.
        pytest.fail(
            "needs Debian's chromium and chromium-driver: apt-get install chromium chromium-driver (.ci/run does this)"
        )
    from selenium import webdriver  # in the test extra

    os.environ.setdefault("SE_OFFLINE", "true")  # Selenium Manager must not go online; the paths are given
    opts = webdriver.ChromeOptions()
    opts.binary_location = binary
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--disable-default-apps",
        "--mute-audio",
        "--autoplay-policy=no-user-gesture-required",
        "--window-size=1000,800",
        *extra,
    ):
        opts.add_argument(flag)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})  # the console, for get_log("browser")
    from selenium.webdriver.chrome.service import Service

    return webdriver.Chrome(service=Service(driver), options=opts)


def severe(browser) -> list[dict]:
    """The console's SEVERE entries (a failed request, an uncaught exception) since the last call
    (each call drains the browser's log)."""
    return [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]


def _wait(browser, script, timeout=60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = browser.execute_script(script)
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for: {script}")


def test_page_streams_and_decodes_audio(tiny_dir):
    browser = _chrome()
    try:
        with running_gateway(tiny_dir, workers=1) as gw:
            browser.set_page_load_timeout(30)
            browser.get(gw.url + "/")
            _wait(browser, "return document.getElementById('status').textContent === 'ready'")
            assert http(gw.url + "/status")[1]["idle_workers"] == 1  # an open page holds no engine
            browser.find_element("id", "text").clear()
            browser.find_element("id", "text").send_keys("Hello, who are you?")
            browser.find_element("id", "send").click()
            stats = _wait(browser, "const s = window.omniStats; return s.done >= 1 ? s : null")
            shown = browser.find_element("id", "audio-received").get_attribute("data-seconds")
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            shot = ARTIFACTS / "browser-demo.png"
            browser.save_screenshot(str(shot))
            # a second turn carries the first one as history, on a fresh connection
            browser.find_element("id", "send").click()
            second = _wait(browser, "const s = window.omniStats; return s.done >= 2 ? s : null")
            wait_until(lambda: http(gw.url + "/status")[1]["idle_workers"] == 1)
            console = severe(browser)
    finally:
        browser.quit()
    assert console == []
    assert stats["audioChunks"] >= 2 and stats["decodedChunks"] == stats["audioChunks"]
    assert stats["audioSeconds"] > 1.0 and float(shown) == pytest.approx(stats["audioSeconds"], abs=1e-3)
    assert stats["ttfaMs"] > 0 and stats["rtf"] > 0  # (the random-weight reply text may be empty)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert second["errors"] == [] and second["audioChunks"] > stats["audioChunks"]


def _fake_microphone(path: Path) -> Path:
    """A 3 s WAV that Chromium plays in a loop as the microphone (tone bursts over noise)."""
    import numpy as np

    rate = 48000
    t = np.arange(3 * rate) / rate
    x = 0.3 * np.sin(2 * np.pi * 220 * t) * (np.sin(2 * np.pi * 0.5 * t) > 0) + 0.01 * np.random.default_rng(
        0
    ).standard_normal(t.size)
    return write_wav16(path, x, rate)


def write_wav16(path: Path, samples, rate: int) -> Path:
    """Mono 16-bit PCM WAV (what Chromium's fake audio capture reads)."""
    import wave

    import numpy as np

    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes((np.clip(samples, -1, 1) * 32767).astype("<i2").tobytes())
    return path


def fake_mic_chrome(wav: Path):
    """Headless Chromium whose microphone plays ``wav`` (permission granted)."""
    return _chrome(
        "--use-fake-device-for-media-stream",
        "--use-fake-ui-for-media-stream",
        f"--use-file-for-fake-audio-capture={wav}",
    )


def session_page(tiny_dir, mic: Path, page: str, stats_ready: str, timeout: float, shot: str, count_id: str):
    """Opens a whole-life session page (/duplex, /half_duplex) with ``mic`` as the microphone,
    presses Start, waits until ``stats_ready`` (a script) returns the page's stats, checks that the
    session holds its worker, keeps a screenshot, presses Stop and checks the worker is freed and
    the console holds no error. Returns the stats and the text of the element ``count_id``."""
    browser = fake_mic_chrome(mic)
    try:
        with running_gateway(tiny_dir, workers=1) as gw:
            browser.set_page_load_timeout(30)
            browser.get(gw.url + page)
            browser.find_element("id", "start").click()
            stats = _wait(browser, stats_ready, timeout=timeout)
            assert http(gw.url + "/status")[1]["idle_workers"] == 0  # the session holds its worker
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            browser.save_screenshot(str(ARTIFACTS / shot))
            browser.find_element("id", "stop").click()
            wait_until(lambda: http(gw.url + "/status")[1]["idle_workers"] == 1)
            assert severe(browser) == [], "console errors"
            return stats, browser.find_element("id", count_id).text
    finally:
        browser.quit()


def test_duplex_page_talks_and_plays_every_second(tiny_dir, tmp_path):
    """The full-duplex page: a (fake) microphone goes out in 1 s chunks through the gateway's queue to
    a worker's duplex session; every unit comes back with one second of audio (speech or silence),
    which the page schedules; Stop ends the session and frees the worker."""
    stats, units = session_page(
        tiny_dir,
        _fake_microphone(tmp_path / "mic.wav"),
        "/duplex",
        "const s = window.omniDuplexStats; return s.results >= 4 ? s : null",
        90,
        "browser-duplex.png",
        "units",
    )
    assert stats["errors"] == [] and stats["prepared"]
    assert stats["sent"] >= stats["results"] >= 4
    assert stats["listens"] + stats["speaks"] == stats["results"]
    # one second of 24 kHz audio per unit, whatever the model decided
    assert stats["audioSeconds"] == pytest.approx(stats["results"], abs=1e-3)
    assert int(units) >= 3
