#!/usr/bin/env bash
# Installs the PyTorch reference implementations the parity tests compare against
# (docs/reference-parity.md): torch (CPU), numpy/scipy/einops, and minicpmo-utils 1.0.7
# *without* its dependencies (its [tts] extra would pull torchaudio and a CUDA torch).
# Outside this project's machines, add the CPU wheel index to avoid a multi-GB CUDA build:
#   PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu scripts/install-reference.sh
set -euo pipefail
python3 -m pip install -q "torch==2.13.0" einops scipy
python3 -m pip install -q --no-deps "minicpmo-utils==1.0.7"
# its video and audio utilities (get_video_frame_audio_segments) read with decord and librosa
python3 -m pip install -q "decord==0.6.0" "librosa==0.11.0"
# transformers 4.52 (minicpmo-utils pins <4.53): Qwen3 and LLaMA references for the LLM and TTS.
python3 -m pip install -q "transformers==4.52.4"
# Seed-TTS metrics (tests/eval/test_seedtts_metrics.py): funasr's paraformer with its filter-bank backend
# (torchaudio is not installed), and s3prl's WavLM, the reference the speaker model's WavLM is
# compared with (its own dependencies are not needed for that module).
python3 -m pip install -q "funasr==1.4.16" "kaldi-native-fbank==1.23.0"
python3 -m pip install -q --no-deps "s3prl==0.4.18"
python3 - <<'PY'
import importlib.util, sys
missing = [m for m in ("torch", "einops", "scipy", "stepaudio2", "transformers", "decord", "librosa", "funasr", "kaldi_native_fbank", "s3prl") if importlib.util.find_spec(m) is None]
sys.exit(f"reference install incomplete: {missing}" if missing else 0)
PY
