"""Who may use a server: the gateway's API keys (HTTP and WebSocket, OpenAI's 401 shape on /v1)
and the worker's secret (a worker serves only the gateway that holds it)."""

from __future__ import annotations

import asyncio
import json
import urllib.request

import openai
import pytest
from fake_worker import FakeWorkers
from server_client import Client, chat_request, http, running_server, ws_chat
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from llama_omni_py.server.gateway import BackgroundGateway, GatewayConfig
from llama_omni_py.server.gateway.workers import StaticWorkers

KEY = "k-0123456789"


def _get(url: str, headers: dict) -> tuple[int, dict, dict]:
    req = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read()), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read()), dict(e.headers)


@pytest.fixture(scope="module")
def gateway():
    cfg = GatewayConfig(port=0, health_interval_s=0.2, api_keys=(KEY,))
    with BackgroundGateway(cfg, [FakeWorkers(1, "--deltas", "3", "--delay", "0", "--voice")]) as g:
        assert g.wait_ready(60) == "ready"
        yield g


def test_http_routes_need_a_key_except_health_and_pages(gateway):
    url = gateway.url
    assert http(url + "/health")[0] == 200 and http(url + "/")[0] == 200
    status, body, headers = _get(url + "/v1/models", {})
    assert status == 401 and headers.get("www-authenticate") == "Bearer"
    assert body["error"]["code"] == "missing_api_key" and body["error"]["type"] == "invalid_request_error"
    assert _get(url + "/v1/models", {"Authorization": "Bearer nope-nope"})[1]["error"]["code"] == "invalid_api_key"
    assert _get(url + "/status", {})[0] == 401 and _get(url + "/metrics", {})[0] == 401
    assert _get(url + "/status", {"Authorization": f"Bearer {KEY}"})[0] == 200
    assert _get(url + "/status", {"X-API-Key": KEY})[0] == 200


def test_openai_client_with_and_without_the_key(gateway):
    ok = openai.OpenAI(base_url=gateway.url + "/v1", api_key=KEY, max_retries=0)
    assert [m.id for m in ok.models.list()]
    bad = openai.OpenAI(base_url=gateway.url + "/v1", api_key="wrong-key-123", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.models.list()


async def _chat(url: str, **kw) -> list[dict]:
    async with connect(url, **kw) as ws:
        await ws.send(json.dumps(chat_request()))
        out = []
        while not out or out[-1]["type"] not in ("done", "error"):
            out.append(json.loads(await asyncio.wait_for(ws.recv(), 30)))
        return out


def test_websockets_need_the_key_too(gateway):
    ws_url = gateway.url.replace("http://", "ws://") + "/ws/chat"
    with pytest.raises(InvalidStatus) as e:
        asyncio.run(_chat(ws_url))
    assert e.value.response.status_code == 403
    assert asyncio.run(_chat(ws_url + f"?api_key={KEY}"))[-1]["type"] == "done"  # what a browser page does
    assert asyncio.run(_chat(ws_url, additional_headers={"Authorization": f"Bearer {KEY}"}))[-1]["type"] == "done"


def test_realtime_takes_the_key_as_the_browser_client_offers_it(gateway):
    # OpenAI's browser client offers the subprotocols "realtime" and "openai-insecure-api-key.KEY"
    url = gateway.url.replace("http://", "ws://") + "/v1/realtime?model=m"

    async def first_event(key):
        async with connect(url, subprotocols=["realtime", f"openai-insecure-api-key.{key}"]) as ws:
            return ws.subprotocol, json.loads(await asyncio.wait_for(ws.recv(), 30))

    chosen, event = asyncio.run(first_event(KEY))
    assert chosen == "realtime" and event["type"] == "session.created"
    with pytest.raises(InvalidStatus) as e:
        asyncio.run(first_event("wrong-key-123"))
    assert e.value.response.status_code == 403


def test_a_worker_with_a_secret_serves_only_its_gateway(tiny_dir):
    secret = "s" * 32
    with running_server(tiny_dir, secret=secret) as worker:
        assert http(worker.url + "/health")[0] == 200  # health stays open (the gateway polls it)
        with pytest.raises(InvalidStatus) as e:  # a client that goes around the gateway
            asyncio.run(Client.open(worker.url).__aenter__())
        assert e.value.response.status_code == 401
        status, body = http(worker.url + "/sessions/x/close", "POST", b"{}")
        assert status == 401 and "secret" in body["error"]
        for given, works in ((secret, True), (None, False)):
            cfg = GatewayConfig(port=0, health_interval_s=0.2)
            with BackgroundGateway(cfg, [StaticWorkers([worker.url], given)]) as g:
                assert g.wait_ready(60) == "ready"
                msgs = asyncio.run(ws_chat(g.url, chat_request()))
                assert (msgs[-1]["type"] == "done") is works, msgs[-1]
