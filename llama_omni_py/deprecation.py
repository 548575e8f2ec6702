"""Old names kept for one release: each use warns (DeprecationWarning) and names the new one.

    renamed_kwargs(voice="ref_audio")      a function's keyword argument, renamed
    renamed_fields(Cls, engine="token2mel") a dataclass field: the keyword and the attribute

A module's old names go through its lazy face (_lazy.lazy(..., old=...)).

The list of every alias and its replacement is in docs/architecture.md#names.
"""

from __future__ import annotations

import functools
import warnings

from .errors import InvalidArgumentError


def warn_renamed(old: str, new: str, stacklevel: int = 3) -> None:
    warnings.warn(f"{old} is now {new}; the old name goes in the next release", DeprecationWarning, stacklevel)


def _translate(where: str, renames: dict[str, str], kwargs: dict) -> dict:
    for old, new in renames.items():
        if old in kwargs:
            if new in kwargs:
                raise InvalidArgumentError(f"{where}: give {new}= only ({old}= is its old name)")
            warn_renamed(f"{where}({old}=...)", f"{new}=", stacklevel=4)
            kwargs[new] = kwargs.pop(old)
    return kwargs


def renamed_kwargs(**renames: str):
    """A decorator: the function takes each old keyword (warning) as its new one."""

    def wrap(fn):
        @functools.wraps(fn)
        def inner(*args, **kwargs):
            return fn(*args, **_translate(fn.__qualname__, renames, kwargs))

        return inner

    return wrap


def renamed_fields(cls, **renames: str):
    """Gives a dataclass its fields' old names: as constructor keywords and as read-only
    attributes, each use warning. Returns the class."""
    init = cls.__init__

    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        init(self, *args, **_translate(cls.__name__, renames, kwargs))

    cls.__init__ = __init__
    for old, new in renames.items():

        def read(self, _old=old, _new=new):
            warn_renamed(f"{cls.__name__}.{_old}", f"{cls.__name__}.{_new}")
            return getattr(self, _new)

        setattr(cls, old, property(read))
    return cls
