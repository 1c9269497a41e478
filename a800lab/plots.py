"""Deprecated alias of `a800lab.figures` (import the figures from there); it warns once."""

import warnings

from . import figures

_warned = []


def __getattr__(name: str):
    if name not in figures.__all__:
        raise AttributeError(f"module 'a800lab.plots' has no attribute {name!r}; the figures "
                             "are in a800lab.figures")
    if not _warned:
        _warned.append(name)
        warnings.warn("a800lab.plots is deprecated: import the figures from a800lab.figures "
                      f"(e.g. `from a800lab.figures import {name}`)", DeprecationWarning,
                      stacklevel=2)
    return getattr(figures, name)
