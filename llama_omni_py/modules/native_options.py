"""Options cross into the core once: each module's ``to_native()`` fills its native options
struct field by field from its Python config, through :func:`fill`; the C++ defaults are the
Python ones (a test keeps them equal)."""

from __future__ import annotations

from dataclasses import fields

from .._native import core


def fill(struct: str, config, **resolved):
    """The core's ``struct`` filled from every field it shares with ``config``, then from
    ``resolved`` (values the config does not hold as such, or holds under another name)."""
    native = getattr(core, struct)()
    for f in fields(config):
        if hasattr(native, f.name) and f.name not in resolved:
            setattr(native, f.name, getattr(config, f.name))
    for k, v in resolved.items():
        setattr(native, k, v)
    return native
