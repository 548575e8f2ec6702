"""The same module set from ModelScope (``--hub modelscope`` / ``OMNI_HUB=modelscope``), fetched
through the ``modelscope`` package from a local stand-in for ModelScope's API (tests/support/hub_server.py,
pointed at with MODELSCOPE_ENDPOINT)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hub_server import FakeModelScope, Repo, serving

import llama_omni_py as omni
from llama_omni_py import cli
from llama_omni_py.modelset import hub
from llama_omni_py.modelset import spec as ms
from llama_omni_py.modelset.random_set import random_set_config

REPO = "test/tiny-gguf"


@pytest.fixture
def fake_ms(hub_repo_files, tmp_path, monkeypatch):
    server = FakeModelScope({REPO: Repo(dict(hub_repo_files))})
    cache = str(tmp_path / "ms-cache")
    # HF_ENDPOINT a closed port: nothing may go to the other hub
    env = {"MODELSCOPE_ENDPOINT": "{url}", "MODELSCOPE_CACHE": cache, "OMNI_HUB": "modelscope"}
    yield from serving(server, monkeypatch, HF_ENDPOINT="http://127.0.0.1:9", **env)


def error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert err and err[-1].startswith("llama-omni: error: "), err
    return err[-1]


def test_a_session_by_repo_id_from_modelscope_replies(fake_ms, tmp_path):
    config, short = random_set_config(max_new_tokens=12)
    with omni.OmniSession(REPO, device="cpu", config=config, reply=short) as session:
        reply = session.speak("hello there", seed=0)
    assert reply.text and reply.audio.size > 0
    assert session.model_dir.name == hub.llm_file("Q4_K_M")
    assert str(tmp_path / "ms-cache") in str(session.model_dir)
    assert sorted(fake_ms.gets()) == sorted(hub.set_files("Q4_K_M"))


def test_llm_quant_picks_its_file_then_the_cache_serves_offline(fake_ms, tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("OMNI_HUB")  # --hub says it instead
    assert cli.main(["download", REPO, "--hub", "modelscope", "--llm-quant", "F16", "--device", "cpu"]) == 0
    assert sorted(fake_ms.gets()) == sorted(hub.set_files("F16"))
    fake_ms.stop()
    asked = len(fake_ms.log)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    out = tmp_path / "reply.wav"
    argv = ["speak", "hi", "-o", str(out), "--model", f"{REPO}:F16", "--hub", "modelscope", "--device", "cpu"]
    assert cli.main([*argv, "--max-new-tokens", "8"]) == 0 and out.stat().st_size > 44
    monkeypatch.delenv("HF_HUB_OFFLINE")  # the server stopped, no offline switch: the cache still serves
    assert hub.download(REPO, "F16", device="cpu", hub="modelscope").name == hub.llm_file("F16")
    assert len(fake_ms.log) == asked
    capsys.readouterr()


def test_a_truncated_file_from_modelscope_is_refused_by_name(fake_ms, hub_repo_files, capsys):
    tts = ms.TTS_FILE
    fake_ms.serve_instead[(REPO, tts)] = hub_repo_files[tts][:1000]
    assert cli.main(["download", REPO, "--device", "cpu"]) == 2
    assert tts in error_line(capsys)
    fake_ms.serve_instead.clear()
    llm = hub.download(REPO, device="cpu")
    assert (Path(llm).parent / tts).read_bytes() == hub_repo_files[tts]


def test_unknown_repo_and_quantization_on_modelscope_give_one_line(fake_ms, capsys):
    assert cli.main(["speak", "hi", "--model", "test/no-such-set", "--device", "cpu"]) == 2
    assert "test/no-such-set: no such directory, nor model repository" in error_line(capsys)
    assert cli.main(["download", REPO, "--llm-quant", "Q3_K_S", "--device", "cpu"]) == 2
    assert "no LLM quantization 'Q3_K_S': the repository publishes F16, Q4_K_M" in error_line(capsys)
    assert fake_ms.gets() == []
