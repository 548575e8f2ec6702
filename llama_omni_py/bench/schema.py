"""The JSON Schemas of benchmark runs (run.schema.json, duplex.schema.json; docs/benchmark-schema.md)."""

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


DUPLEX_SCHEMA_PATH = Path(__file__).with_name("duplex.schema.json")


@lru_cache(maxsize=1)
def duplex_schema() -> dict:
    return json.loads(DUPLEX_SCHEMA_PATH.read_text())


def validate_duplex_run(run: dict) -> None:
    """Raises jsonschema.ValidationError naming the offending field."""
    import jsonschema

    jsonschema.validate(run, duplex_schema(), cls=jsonschema.Draft202012Validator)
