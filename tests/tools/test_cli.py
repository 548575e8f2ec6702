import json
import subprocess
import sys
import sysconfig
from pathlib import Path

import numpy as np

from llama_omni_py import cli
from llama_omni_py.modelset import spec as ms


def test_make_models_and_info_json(tmp_path, capsys):
    assert cli.main(["make-models", str(tmp_path / "m"), "--only", "projector,token2wav", "--seed", "3"]) == 0
    out = capsys.readouterr().out
    assert "wrote 6 files" in out
    assert cli.main(["info", "--json", "--model-dir", str(tmp_path / "m")]) == 0
    info = json.loads(capsys.readouterr().out)
    assert "cpu" in [d["id"] for d in info["devices"]]
    assert info["llama_cpp_python"] == "0.3.36"
    assert info["numa_nodes"] and info["cpu"]["logical"] >= 1
    keys = [f["key"] for f in info["model_set"]["files"]]
    assert keys == ["projector"] + [f"token2wav.{s}" for s in ms.T2W_FILES]
    assert any(p.endswith(ms.LLM_FILE_GLOB) or "audio" in p for p in info["model_set"]["missing"])


def test_errors_exit_2_with_a_message(tmp_path, capsys):
    assert cli.main(["info", "--model-dir", str(tmp_path / "absent")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert cli.main(["make-models", str(tmp_path), "--only", "vocoder"]) == 2


def test_console_script_runs(tmp_path):
    # The installed `llama-omni` script, run away from the source tree so the installed package is used.
    script = Path(sysconfig.get_path("scripts")) / "llama-omni"
    assert script.exists(), f"console script not installed at {script}"
    r = subprocess.run([str(script), "info"], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "devices:" in r.stdout and "NUMA node" in r.stdout
    r = subprocess.run(
        [sys.executable, "-m", "llama_omni_py", "--version"], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert r.returncode == 0 and "llama-omni-py" in r.stdout


def test_speak_writes_a_wav(tiny_dir, tmp_path, capsys):
    import soundfile as sf

    from llama_omni_py.cli import main

    out = tmp_path / "reply.wav"
    assert (
        main(
            [
                "speak",
                "hello there",
                "-o",
                str(out),
                "--model-dir",
                str(tiny_dir),
                "--device",
                "cpu",
                "--max-new-tokens",
                "20",
            ]
        )
        == 0
    )
    audio, sr = sf.read(out)
    assert sr == 24000 and audio.size > 0
    captured = capsys.readouterr()
    assert "wall RTF" in captured.out and "3/3 Token2Wav" in captured.err and "done in" in captured.err
    assert main(["speak", "--model-dir", str(tiny_dir)]) == 2  # nothing to answer: a clear error, exit 2


def test_speak_slices_an_image(tiny_dir, tmp_path, capsys):
    from PIL import Image

    from llama_omni_py.cli import main

    photo = tmp_path / "page.png"
    Image.fromarray((np.random.default_rng(0).random((1008, 1344, 3)) * 255).astype(np.uint8)).save(photo)
    base = ["speak", "--image", str(photo), "-o", str(tmp_path / "r.wav"), "--model-dir", str(tiny_dir)]
    base += ["--device", "cpu", "--max-new-tokens", "4"]
    assert main(base) == 0  # llama.cpp-omni's rules (the default fidelity): no slices
    assert "vision: 1 encoder inputs" in capsys.readouterr().out
    assert main([*base, "--fidelity", "reference"]) == 0
    assert "vision: 7 encoder inputs" in capsys.readouterr().out  # the overview and 3 x 2 slices
    assert main([*base, "--image-rules", "reference"]) == 0
    assert "vision: 7 encoder inputs" in capsys.readouterr().out
    assert main([*base, "--fidelity", "reference", "--max-slice-nums", "1"]) == 0
    assert "vision: 1 encoder inputs" in capsys.readouterr().out
    assert main([*base, "--max-slice-nums", "10"]) == 2
    assert "max_slice_nums" in capsys.readouterr().err


def test_readme_main_job_on_a_fresh_cache(tmp_path, monkeypatch):
    # `llama-omni speak "..." -o reply.wav` with no model: the demo set is written on first use.
    import soundfile as sf

    from llama_omni_py.cli import main

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    out = tmp_path / "reply.wav"
    assert main(["speak", "Hello, who are you?", "-o", str(out), "--device", "cpu"]) == 0
    assert (tmp_path / "cache" / "llama-omni-py" / "demo-models").is_dir()
    audio, sr = sf.read(out)
    assert sr == 24000 and audio.size > 0


def test_info_plan(capsys):
    import json

    from llama_omni_py.cli import main

    assert main(["info", "--plan", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)["placement"]
    assert plan["vocoder_cpus"] and plan["stage_cpus"] and "NUMA node" in plan["text"]
