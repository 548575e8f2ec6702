"""Benchmarks users gate on, by the protocols of the harnesses they compare: Daily-Omni, Video-MME,
Seed-TTS (WER and speaker similarity) and the RTF metric (docs/evaluation.md). Nothing here loads
the native core until a command runs against the local engine.

Owns: cli (llama-omni eval), datasets, targets (the engine or a server under test), protocols
(each harness's prompt and scoring rules), mcq, rtf, seedtts/ (WER and SIM), records, scoring,
extract, summary. An app: may import every layer below it (session.py, bench/'s duplex runner,
...); never the server.
"""
