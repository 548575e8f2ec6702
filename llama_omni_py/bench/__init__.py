"""The benchmark suite behind ``llama-omni bench``: a fixed prompt set, per-request RTF (wall and
compute), time to first audio, stage and queue times, validity gates, and an environment
manifest; one JSON file per configuration (docs/benchmark-schema.md). Needs the ``bench`` extra
(jsonschema, matplotlib).

Owns: arguments (the CLI), runner (turn-based runs), duplex, load (many sessions, many
processes) and their metrics, schemas and manifest. May import every layer below the apps
(session.py, duplex/, device/, ...); never the server. Nothing is imported until it is used.
"""

from .._lazy import lazy

__getattr__, __dir__ = lazy(
    __name__, {name: "llama_omni_py.bench.runner" for name in ("BenchOptions", "RunConfig", "run_bench", "write_runs")}
)
