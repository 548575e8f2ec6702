"""The tokens MiniCPM-o's duplex decoder never lets the model say: its tokenizer's
``bad_token_ids`` (6965 ordinary vocabulary ids in MiniCPM-o 4.5's ``tokenizer_config.json``:
newlines, brackets, code punctuation, raw byte fragments), besides ``<|tts_pad|>`` and
``<|chunk_eos|>`` (docs/duplex.md, "Forbidden tokens"). The GGUF module set does not carry the
list, so it is read from the tokenizer_config.json the user points at."""

from __future__ import annotations

import json
from pathlib import Path

from ..errors import ModelFileError

KEY = "bad_token_ids"


def bad_token_ids(path: str | Path) -> tuple[int, ...]:
    """The ``bad_token_ids`` of a MiniCPM-o ``tokenizer_config.json`` (or of the directory holding
    one), sorted and without repeats; ModelFileError when it cannot be read or has no such list."""
    p = Path(path)
    if p.is_dir():
        p = p / "tokenizer_config.json"
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as e:
        raise ModelFileError(f"cannot read it: {e}", str(p)) from None
    except json.JSONDecodeError as e:
        raise ModelFileError(f"not JSON: {e}", str(p)) from None
    ids = data.get(KEY) if isinstance(data, dict) else None
    if not isinstance(ids, list):
        raise ModelFileError(f"has no '{KEY}' list (not a MiniCPM-o tokenizer_config.json?)", str(p))
    if not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids):
        raise ModelFileError(f"'{KEY}' must hold non-negative integers", str(p))
    return tuple(sorted(set(ids)))
