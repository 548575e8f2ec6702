"""Stage timing summaries and the RTF definitions."""

import pytest

from llama_omni_py.orchestration import timings


def _events():
    # 4 chunks; llm 100 ms, tts 200 ms, token2wav 300 ms each; chunk 0 pays 1 s of warm-up.
    ev = []
    for i in range(4):
        base = i * 10.0
        ev += [
            ("llm", base, base + 0.1 + (1.0 if i == 0 else 0)),
            ("tts", base, base + 0.2),
            ("token2wav", base, base + 0.3),
            ("tts.wait", base, base + 0.05),
        ]
    return ev


def test_compute_rtf_uses_steady_chunks_only():
    # Steady windows 1 and 2: TTS + Token2Wav 2 x 0.5 s over 2 x 2 s of audio, plus the LLM's
    # decode time after its first chunk (3 x 0.1 s) spread over all 5.5 s of audio.
    assert timings.compute_rtf(_events(), [1.0, 2.0, 2.0, 0.5]) == pytest.approx(1.0 / 4.0 + 0.3 / 5.5)
    assert timings.compute_rtf(_events()[:8], [1.0, 0.5]) is None  # no steady chunk


def test_summary_table_lists_every_stage():
    p = timings.Profiler(enabled=True)
    p.add(_events(), {"apm_ms": 12.0})
    table = p.report()
    for name in ("llm", "tts", "token2wav", "tts.wait", "apm_ms"):
        assert name in table
    rows = table.splitlines()
    assert "1100.0" in rows[[row.split()[0] for row in rows].index("llm")]  # max
