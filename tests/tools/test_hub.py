"""A module set by its repository id, fetched through huggingface_hub from a local stand-in for the
Hub (tests/support/hub_server.py, pointed at with HF_ENDPOINT) that serves the tiny set as ``test/tiny-gguf``
with two LLM quantizations, F16 and Q4_K_M (the tiny LLM quantized by libllama)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hub_server import FakeHub, Repo, serving

import llama_omni_py as omni
from llama_omni_py import cli
from llama_omni_py.config import ConfigError
from llama_omni_py.env import hub_choice, hub_environment
from llama_omni_py.modelset import hub
from llama_omni_py.modelset import spec as ms
from llama_omni_py.modelset.random_set import random_set_config

REPO = "test/tiny-gguf"


@pytest.fixture
def fake_hub(hub_repo_files, tmp_path, monkeypatch):
    server = FakeHub({REPO: Repo(dict(hub_repo_files))})
    yield from serving(server, monkeypatch, HF_ENDPOINT="{url}", HF_HUB_CACHE=str(tmp_path / "hf-cache"))


def snapshot(tmp_path: Path) -> Path:
    (root,) = (tmp_path / "hf-cache" / "models--test--tiny-gguf" / "snapshots").iterdir()
    return root


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("llama-omni: error: "), err
    return err[0]


def test_a_session_by_repo_id_replies(fake_hub, tmp_path):
    config, short = random_set_config(max_new_tokens=12)
    with omni.OmniSession(REPO, device="cpu", config=config, reply=short) as session:
        reply = session.speak("hello there", seed=0)
    assert reply.text and reply.audio.size > 0
    # the CPU default: the first published of Q4_K_M, Q8_0, F16
    assert session.model_dir == snapshot(tmp_path) / hub.llm_file("Q4_K_M")
    assert sorted(fake_hub.gets()) == sorted(hub.set_files("Q4_K_M"))


def test_llm_quant_picks_its_file_and_fetches_nothing_else(fake_hub, tmp_path, capsys):
    assert cli.main(["download", REPO, "--llm-quant", "f16", "--device", "cpu"]) == 0
    assert "use it with: --model" in capsys.readouterr().out
    assert sorted(fake_hub.gets()) == sorted(hub.set_files("F16"))  # no Q4_K_M, no README
    root = snapshot(tmp_path)
    assert sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()) == sorted(
        hub.set_files("F16")
    )
    # the same set by REPO:QUANT in another command: from the cache, nothing fetched again
    fake_hub.fetched.clear()
    assert cli.main(["info", "--json", "--model", f"{REPO}:F16"]) == 0
    assert fake_hub.gets() == []
    files = json.loads(capsys.readouterr().out)["model_set"]["files"]
    assert files[0]["key"] == "llm" and files[0]["weight_types"] == ["f16"] and len(files) == len(ms.FILES)


def test_the_device_decides_the_default_quantization(fake_hub, capsys):
    assert omni.download(REPO, device="cann:0").name == hub.llm_file("F16")  # CANN's matmul refuses K-quants
    assert hub.download(REPO, device="cuda:0").name == hub.llm_file("Q4_K_M")
    # fetched for a device this host lacks (no CANN build here): the set is only checked for it
    assert cli.main(["download", REPO, "--device", "cann:0"]) == 0
    assert hub.llm_file("F16") in capsys.readouterr().out


def test_a_second_run_with_the_server_stopped_works_from_the_cache(fake_hub, tmp_path, monkeypatch, capsys):
    first = hub.download(REPO, device="cpu")
    fake_hub.stop()
    asked = len(fake_hub.log)
    assert hub.download(REPO, device="cpu") == first  # the hub unreachable: the cached copy
    assert hub.download(REPO, device="cpu", local_files_only=True) == first
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    out = tmp_path / "reply.wav"
    assert cli.main(["speak", "hi", "-o", str(out), "--model", REPO, "--device", "cpu", "--max-new-tokens", "8"]) == 0
    assert out.stat().st_size > 44
    capsys.readouterr()
    # offline, a quantization the cache does not hold: one line naming what it holds
    assert cli.main(["download", REPO, "--llm-quant", "F16", "--device", "cpu"]) == 2
    assert "no LLM quantization 'F16': the cache holds Q4_K_M" in one_error_line(capsys)
    assert len(fake_hub.log) == asked  # not one request reached the hub


def test_a_truncated_file_is_refused_by_name(fake_hub, hub_repo_files, tmp_path, capsys):
    tts = ms.TTS_FILE
    fake_hub.serve_instead[(REPO, tts)] = hub_repo_files[tts][: len(hub_repo_files[tts]) // 2]
    with pytest.raises(omni.ModelFileError, match="the hub lists") as e:
        omni.OmniSession(REPO, device="cpu")
    assert e.value.path.endswith(tts) and not Path(e.value.path).exists()  # removed, never loaded
    assert cli.main(["download", REPO, "--device", "cpu"]) == 2
    assert tts in one_error_line(capsys)
    fake_hub.serve_instead.clear()  # the next run fetches it again
    llm = hub.download(REPO, device="cpu")
    # a cached copy damaged afterwards, with no network to compare against: the validator names it
    fake_hub.stop()
    cached = llm.parent / tts
    os.truncate(cached.resolve(), cached.stat().st_size - 1000)
    with pytest.raises(omni.ModelFileError, match="extends past the end of the file") as e:
        hub.download(REPO, device="cpu")
    assert e.value.path == str(cached)
    assert cli.main(["speak", "hi", "--model", REPO, "--device", "cpu"]) == 2
    assert tts in one_error_line(capsys)


def test_a_damaged_download_is_removed_and_fetched_again(fake_hub, hub_repo_files):
    vision = ms.VPM_FILE
    damaged = bytearray(hub_repo_files[vision])
    damaged[-10] ^= 0xFF  # same size, one byte off: only the digest tells
    fake_hub.serve_instead[(REPO, vision)] = bytes(damaged)
    with pytest.raises(omni.ModelFileError, match="SHA-256 differs from the hub") as e:
        hub.download(REPO, device="cpu")
    assert e.value.path.endswith(vision) and not Path(e.value.path).exists()
    fake_hub.serve_instead.clear()
    cached = hub.download(REPO, device="cpu").parent / vision
    assert cached.read_bytes() == hub_repo_files[vision]
    # damaged in the cache afterwards, same size: the validator refuses it, the digest shows it is
    # not the published file, and it goes
    with open(cached.resolve(), "r+b") as f:
        f.write(b"GGUX")
    with pytest.raises(omni.ModelFileError, match="its SHA-256 differs from the hub's"):
        hub.download(REPO, device="cpu")
    assert not cached.exists() and not cached.resolve().exists()
    hub.download(REPO, device="cpu")  # fetched again
    assert cached.read_bytes() == hub_repo_files[vision]


def test_a_published_file_the_validator_refuses_is_named(fake_hub, hub_repo_files):
    files = dict(hub_repo_files)
    files[ms.PROJECTOR_FILE] = files[ms.PROJECTOR_FILE][:5000]  # the repository's own copy is short
    fake_hub.repos["test/broken"] = Repo(files)
    with pytest.raises(omni.ModelFileError, match="this is the file test/broken publishes") as e:
        hub.download("test/broken", device="cpu")
    assert e.value.path.endswith(ms.PROJECTOR_FILE) and Path(e.value.path).exists()  # kept: it is the published one


def test_an_interrupted_download_resumes(fake_hub, hub_repo_files, monkeypatch):
    import huggingface_hub.constants
    import huggingface_hub.file_download

    # write the body as it arrives (the tiny files are smaller than one 10 MB chunk); older
    # versions bind the constant into file_download at import
    for module in (huggingface_hub.constants, huggingface_hub.file_download):
        monkeypatch.setattr(module, "DOWNLOAD_CHUNK_SIZE", 64 << 10, raising=False)
    fake_hub.cut.add((REPO, ms.VPM_FILE))
    try:  # huggingface_hub 0.x gives up on a cut body (the next run resumes); later ones resume at once
        llm = hub.download(REPO, device="cpu")
    except omni.ModelFileError as e:
        assert "run again to resume" in e.problem and e.path == f"{REPO}/{ms.VPM_FILE}"
        llm = hub.download(REPO, device="cpu")
    ranges = [r for path, r in fake_hub.fetched if path == ms.VPM_FILE]
    assert len(ranges) == 2 and ranges[0] is None and ranges[1].startswith("bytes=") and ranges[1] != "bytes=0-"
    assert (llm.parent / ms.VPM_FILE).read_bytes() == hub_repo_files[ms.VPM_FILE]


def test_unknown_repo_and_quantization_give_one_line_and_exit_2(fake_hub, capsys):
    assert cli.main(["speak", "hi", "--model", "test/no-such-set", "--device", "cpu"]) == 2
    line = one_error_line(capsys)
    assert f"test/no-such-set: no such directory, nor model repository on {fake_hub.url}" in line
    assert cli.main(["download", REPO, "--llm-quant", "Q3_K_S", "--device", "cpu"]) == 2
    assert "no LLM quantization 'Q3_K_S': the repository publishes F16, Q4_K_M" in one_error_line(capsys)
    assert cli.main(["info", "--model", f"{REPO}:Q2_K"]) == 2
    assert "the repository publishes F16, Q4_K_M" in one_error_line(capsys)
    with pytest.raises(omni.HubError, match="no revision 'v9'"):
        hub.download(REPO, revision="v9")
    assert fake_hub.gets() == []  # nothing fetched for any of them


def test_a_layout_unlike_the_published_one_is_refused_before_any_download(fake_hub):
    del fake_hub.repos[REPO].files[ms.VPM_FILE]
    with pytest.raises(omni.HubError, match=f"lacks {ms.VPM_FILE}"):
        hub.download(REPO, device="cpu")
    assert fake_hub.gets() == []


def test_download_into_a_directory(fake_hub, tmp_path, capsys):
    target = tmp_path / "set"
    assert cli.main(["download", f"{REPO}:F16", "--dir", str(target), "--device", "cpu"]) == 0
    assert str(target / hub.llm_file("F16")) in capsys.readouterr().out
    assert not (tmp_path / "hf-cache" / "models--test--tiny-gguf").exists()
    assert omni.discover(target).missing() == []
    fake_hub.stop()  # offline: the directory is the copy
    assert hub.download(REPO, "F16", device="cpu", local_dir=target) == target / hub.llm_file("F16")


def test_engine_and_worker_options_take_a_repo_id(fake_hub, tmp_path):
    from llama_omni_py.modelset.hub_cli import resolve_model_args
    from llama_omni_py.server.worker_options import WorkerOptions

    engine_config, short = random_set_config()
    with omni.OmniEngine(f"{REPO}:F16", device="cpu", slots=2, config=engine_config, reply=short) as engine:
        assert engine.model_dir.name == hub.llm_file("F16") and engine.free_slots == 2
    options = WorkerOptions(model_dir=REPO, llm_quant="F16")
    assert options.to_argv()[:4] == ["--model-dir", REPO, "--llm-quant", "F16"]
    config = options.server_config("127.0.0.1", 0, "cpu")
    assert config.model_dir == str(snapshot(tmp_path) / hub.llm_file("F16"))
    # serve: fetched once by the gateway for its local workers; Ray workers fetch on their own hosts
    args = cli.build_parser().parse_args(["serve", "--model", REPO, "--llm-quant", "F16", "--device", "cpu"])
    resolve_model_args(args)
    assert args.model_dir == config.model_dir and args.llm_quant is None
    args = cli.build_parser().parse_args(["serve", "--ray", "--model", REPO])
    resolve_model_args(args)
    assert args.model_dir == REPO


def test_a_model_argument_is_a_path_unless_shaped_like_a_repo_id(tmp_path, monkeypatch):
    from llama_omni_py.modelset.hub_cli import resolved_model

    monkeypatch.chdir(tmp_path)
    assert hub.parse_ref("openbmb/MiniCPM-o-4_5-gguf") == hub.ModelRef("openbmb/MiniCPM-o-4_5-gguf")
    assert hub.parse_ref("a/b:q8_0") == hub.ModelRef("a/b", "Q8_0")
    (tmp_path / "models" / "set").mkdir(parents=True)
    for path in ("models/set", "/abs/dir", "./a/b", "a/b/c", "a", "a/b:", Path("x/y")):
        assert hub.parse_ref(path) is None, path
    with pytest.raises(omni.InvalidArgumentError, match="names quantization Q8_0"):
        hub.download("a/b:Q8_0", llm_quant="F16")
    with pytest.raises(omni.InvalidArgumentError, match="go with a repository id"):
        resolved_model(str(tmp_path), "F16", None, "cpu")
    assert resolved_model(str(tmp_path), None, None, "cpu") == str(tmp_path)


def test_the_quantization_rules():
    published = ["F16", "Q4_K_M", "Q8_0"]
    assert hub.choose_quant("r", None, published, "cann:1") == "F16"
    assert hub.choose_quant("r", None, published, "cpu") == "Q4_K_M"
    assert hub.choose_quant("r", None, ["F16", "Q8_0"], "cuda:0") == "Q8_0"
    assert hub.choose_quant("r", "q8_0", published, "cpu") == "Q8_0"
    with pytest.raises(omni.HubError, match="no LLM in F16 .* publishes Q4_K_M; name one"):
        hub.choose_quant("r", None, ["Q4_K_M"], "cann:0")
    assert hub.published_quants(["MiniCPM-o-4_5-Q8_0.gguf", "audio/MiniCPM-o-4_5-audio-F16.gguf", "x.gguf"]) == ["Q8_0"]


def test_the_hub_environment_is_read_when_a_model_is_fetched():
    env = hub_environment("huggingface", {"HF_HOME": "/h", "HF_HUB_OFFLINE": "yes", "HF_ENDPOINT": "http://m"})
    assert (env.endpoint, env.offline, env.cache) == ("http://m", True, "/h/hub")
    assert hub_environment("huggingface", {"HF_HUB_CACHE": "/c", "HF_HOME": "/h"}).cache == "/c"
    assert hub_environment("huggingface", {"HF_HUB_OFFLINE": "0"}).offline is False
    assert hub_environment("modelscope", {"MODELSCOPE_CACHE": "/m"}).cache == "/m"
    assert hub_choice(None, {}) == "huggingface" and hub_choice(None, {"OMNI_HUB": "ModelScope"}) == "modelscope"
    with pytest.raises(ConfigError, match="OMNI_HUB: must be one of huggingface, modelscope"):
        hub_choice(None, {"OMNI_HUB": "github"})
