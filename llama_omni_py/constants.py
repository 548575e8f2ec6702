"""Numbers of the MiniCPM-o 4.5 speech path that several modules share, named once.

The facts behind them are in docs/model-files.md and docs/speech-path.md.
"""

from __future__ import annotations

INPUT_SAMPLE_RATE = 16000  # audio the encoders hear: mono float32
OUTPUT_SAMPLE_RATE = 24000  # audio Token2Wav speaks: mono float32

TEXT_CHUNK = 10  # speaking LLM tokens per TTS chunk
AUDIO_EOS = 6561  # TTS code that ends a chunk's speech (codes 0..6560 are speech)
CODES_PER_SECOND = 25  # speech codes per second of audio: one Token2Wav window
MAX_AUDIO_PER_CHUNK = 500  # TTS codes per text chunk before it is cut (20 s of audio)

DEFAULT_VOCODER_THREADS = 16  # vocoder pool size when nothing else says (capped to usable CPUs)
DEFAULT_QUEUE = 16  # items a pipeline queue holds before its producer blocks

MAX_SLOTS = 256  # session slots one engine may hold
