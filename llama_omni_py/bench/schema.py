"""The JSON Schema of a benchmark run (run.schema.json, documented in docs/benchmark-schema.md)."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

SCHEMA_VERSION = 2
SCHEMA_PATH = Path(__file__).with_name("run.schema.json")


@lru_cache(maxsize=1)
def run_schema() -> dict:
    return json.loads(SCHEMA_PATH.read_text())


def validate_run(run: dict) -> None:
    """Raises jsonschema.ValidationError naming the offending field."""
    import jsonschema

    jsonschema.validate(run, run_schema(), cls=jsonschema.Draft202012Validator)
