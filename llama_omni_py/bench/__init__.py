"""The benchmark suite behind ``llama-omni bench``: a fixed prompt set, per-request RTF (wall and
compute), time to first audio, stage and queue times, validity gates, and an environment
manifest; one JSON file per configuration (docs/benchmark-schema.md)."""

from .runner import BenchOptions, RunConfig, run_bench, write_runs  # noqa: F401
