"""The JSON Schemas of benchmark runs (run.schema.json, duplex.schema.json, load.schema.json;
docs/benchmark-schema.md)."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

SCHEMA_VERSION = 2
SCHEMA_PATH = Path(__file__).with_name("run.schema.json")


@lru_cache(maxsize=4)
def _schema(path: Path) -> dict:
    return json.loads(path.read_text())


def _validate(run: dict, path: Path) -> None:
    import jsonschema

    jsonschema.validate(run, _schema(path), cls=jsonschema.Draft202012Validator)


def validate_run(run: dict) -> None:
    """Raises jsonschema.ValidationError naming the offending field."""
    _validate(run, SCHEMA_PATH)


DUPLEX_SCHEMA_PATH = Path(__file__).with_name("duplex.schema.json")


def validate_duplex_run(run: dict) -> None:
    """Raises jsonschema.ValidationError naming the offending field."""
    _validate(run, DUPLEX_SCHEMA_PATH)


LOAD_SCHEMA_PATH = Path(__file__).with_name("load.schema.json")


def validate_load_run(run: dict) -> None:
    """Raises jsonschema.ValidationError naming the offending field."""
    _validate(run, LOAD_SCHEMA_PATH)
