"""Browsers on the gateway, in headless Chromium (selenium): OpenAI's browser Realtime client's
handshake (the subprotocol "realtime", the key as the subprotocol "openai-insecure-api-key.KEY"),
with and without keys on the gateway, a spoken reply received; and the pages on a keyed gateway
opened without a key say what is missing, and say that a generated set's replies are gibberish."""

import pytest
from server_client import running_gateway
from test_pages_browser import _chrome, _wait

KEY = "sk-browser-test-key-0123"

# What OpenAI's browser client does (openai-node src/realtime/websocket.ts): the protocols
# ["realtime", "openai-insecure-api-key." + key]; then a text item and a response.
REALTIME_PAGE_SCRIPT = """
const [url, key, done] = [arguments[0], arguments[1], arguments[arguments.length - 1]];
const ws = new WebSocket(url, ["realtime", "openai-insecure-api-key." + key]);
const got = { protocol: null, types: [], audioBytes: 0, status: null, closed: null };
ws.onopen = () => {
  got.protocol = ws.protocol;
  ws.send(JSON.stringify({ type: "conversation.item.create", item: { type: "message", role: "user",
    content: [{ type: "input_text", text: "Hello, who are you?" }] } }));
  ws.send(JSON.stringify({ type: "response.create" }));
};
ws.onmessage = (m) => {
  const ev = JSON.parse(m.data);
  got.types.push(ev.type);
  if (ev.type === "response.output_audio.delta") got.audioBytes += atob(ev.delta).length;
  if (ev.type === "response.done") { got.status = ev.response.status; ws.close(); done(got); }
};
ws.onclose = (e) => { got.closed = e.code; if (got.status === null) done(got); };
"""


@pytest.fixture(scope="module")
def browser():
    b = _chrome()
    b.set_script_timeout(90)
    yield b
    b.quit()


@pytest.fixture(scope="module")
def keyed(tiny_dir):
    with running_gateway(tiny_dir, workers=1, api_keys=(KEY,)) as g:
        yield g


def _realtime_from_the_page(browser, gw, key):
    browser.get(gw.url + "/")
    url = gw.url.replace("http://", "ws://") + "/v1/realtime?model=MiniCPM-o-4.5"
    return browser.execute_async_script(REALTIME_PAGE_SCRIPT, url, key)


def test_openai_browser_client_handshake_with_a_key(browser, keyed):
    got = _realtime_from_the_page(browser, keyed, KEY)
    assert got["protocol"] == "realtime" and got["status"] == "completed", got
    assert got["audioBytes"] > 24000 and got["audioBytes"] % 2 == 0  # more than half a second of PCM16
    refused = _realtime_from_the_page(browser, keyed, "sk-not-the-key-000")
    assert refused["protocol"] is None and refused["closed"] == 1006  # the handshake was refused (403)


def test_openai_browser_client_handshake_without_keys(browser, tiny_dir):
    with running_gateway(tiny_dir, workers=1) as open_gw:
        got = _realtime_from_the_page(browser, open_gw, "sk-anything")  # the client always sends one
    assert got["protocol"] == "realtime" and got["status"] == "completed", got
    assert got["audioBytes"] > 24000


def test_pages_say_what_is_missing_and_that_the_set_speaks_gibberish(browser, keyed):
    browser.get(keyed.url + "/")  # no ?api_key=
    notice = _wait(browser, "const n = document.getElementById('notice'); return !n.hidden && n.textContent")
    assert "random weights" in notice and "gibberish" in notice
    browser.find_element("id", "send").click()
    status = _wait(browser, "const s = document.getElementById('status').textContent; return s.includes('key') && s")
    assert "needs an API key" in status and "?api_key=" in status
    browser.get(keyed.url + f"/half_duplex?api_key={KEY}")
    links = browser.execute_script("return [...document.querySelectorAll('nav a')].map((a) => a.href)")
    assert any(link.endswith(f"/duplex?api_key={KEY}") for link in links), links
    assert any(link.endswith(f"/?api_key={KEY}") for link in links), links
