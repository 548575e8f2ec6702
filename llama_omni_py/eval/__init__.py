"""Benchmarks users gate on, by the protocols of the harnesses they compare: Daily-Omni, Video-MME,
Seed-TTS (WER and speaker similarity) and the RTF metric (docs/evaluation.md). Nothing here loads
the native core until a command runs against the local engine."""
