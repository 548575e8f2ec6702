"""The three pages in headless Chromium leave the browser console empty (no SEVERE entry: no failed
request, no uncaught exception), on a gateway without API keys and on one with them (opened with
and without the key); the icon is served without a key; the random-weights notice names the
option that picks a real model set (--model)."""

import time
import urllib.request

import pytest
from server_client import running_gateway
from test_pages_browser import _chrome, _wait, severe

KEY = "sk-console-test-key-0123"
PAGES = ("/", "/duplex", "/half_duplex")


def _load(browser, url: str) -> str:
    """Opens ``url`` and waits until the page has settled: its notice (the tiny set has random
    weights) shown after /health answered, plus a moment for anything loaded later."""
    browser.get(url)
    notice = _wait(browser, "const n = document.getElementById('notice'); return !n.hidden && n.textContent")
    time.sleep(0.5)
    return notice


def _icon(url: str) -> tuple[int, str, bytes]:
    with urllib.request.urlopen(url + "/favicon.ico", timeout=10) as r:  # no key, even on a keyed gateway
        return r.status, r.headers.get("Content-Type"), r.read()


@pytest.fixture(scope="module")
def browser():
    b = _chrome()
    b.set_page_load_timeout(30)
    yield b
    b.quit()


@pytest.mark.parametrize("keys", [(), (KEY,)], ids=["open", "keyed"])
def test_pages_leave_the_console_empty(browser, tiny_dir, keys):
    with running_gateway(tiny_dir, workers=1, api_keys=keys) as gw:
        status, ctype, icon = _icon(gw.url)
        assert status == 200 and ctype == "image/x-icon"
        assert icon[:4] == b"\x00\x00\x01\x00" and icon[22:30] == b"\x89PNG\r\n\x1a\n"  # an ICO holding a PNG
        severe(browser)  # drains what came before
        queries = ("", f"?api_key={KEY}") if keys else ("",)
        for page in PAGES:
            for query in queries:
                notice = _load(browser, gw.url + page + query)
                assert "--model " in notice and "--model-dir" not in notice, notice
                assert severe(browser) == [], (page + query, "console errors")
        # a turn from the chat page, with the key where the gateway wants one
        browser.get(gw.url + "/" + (f"?api_key={KEY}" if keys else ""))
        _wait(browser, "return document.getElementById('status').textContent === 'ready'")
        browser.find_element("id", "send").click()
        stats = _wait(browser, "const s = window.omniStats; return s.done >= 1 ? s : null")
        assert stats["errors"] == []
        assert severe(browser) == [], "console errors after a turn"
