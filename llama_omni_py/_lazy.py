"""Package faces that import on first use (PEP 562): ``__getattr__`` for a table of names, each
served from the module that defines it, imported when the name is first asked for. So
``import llama_omni_py`` (or any of its modules) loads nothing heavy, and the compiled core only
when a name backed by it is used."""

from __future__ import annotations

import importlib


def lazy(package: str, table: dict[str, str]):
    """(``__getattr__``, ``__dir__``) for ``package``: ``table`` maps a name to the module that
    defines it (absolute)."""

    def __getattr__(name: str):
        if name in table:
            value = getattr(importlib.import_module(table[name]), name)
        else:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        importlib.import_module(package).__dict__[name] = value  # the next lookup is a plain attribute
        return value

    def __dir__():
        return sorted(set(importlib.import_module(package).__dict__) | set(table))

    return __getattr__, __dir__
