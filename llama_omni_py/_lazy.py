"""Package faces that import on first use (PEP 562): ``__getattr__`` for a table of names, each
served from the module that defines it, imported when the name is first asked for. So
``import llama_omni_py`` (or any of its modules) loads nothing heavy, and the compiled core only
when a name backed by it is used."""

from __future__ import annotations

import importlib


def lazy(package: str, table: dict[str, str], old: dict[str, tuple[str, str]] | None = None):
    """(``__getattr__``, ``__dir__``) for ``package``: ``table`` maps a name to the module that
    defines it (absolute); ``old`` maps an old name to (module, new name), served with a
    DeprecationWarning."""

    def __getattr__(name: str):
        if name in table:
            value = getattr(importlib.import_module(table[name]), name)
        elif old and name in old:
            from .deprecation import warn_renamed

            where, new = old[name]
            warn_renamed(f"{package}.{name}", f"{package}.{new}")
            value = getattr(importlib.import_module(where), new)
            return value  # not cached: each use of an old name warns
        else:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        importlib.import_module(package).__dict__[name] = value  # the next lookup is a plain attribute
        return value

    def __dir__():
        return sorted(set(importlib.import_module(package).__dict__) | set(table))

    return __getattr__, __dir__
