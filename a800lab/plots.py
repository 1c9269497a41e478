"""Deprecated: the figures moved to `a800lab.figures` (one module per lab). This alias keeps
`from a800lab import plots; plots.throughput_figure(...)` working and warns once.

    from a800lab.figures import throughput_figure, heatmap_figure      # the new import
"""

import warnings

from . import figures as _figures

_warned = False


def __getattr__(name: str):
    global _warned
    if name not in _figures.__all__:
        raise AttributeError(f"module 'a800lab.plots' has no attribute {name!r}; the figures "
                             "are in a800lab.figures")
    if not _warned:
        _warned = True
        warnings.warn("a800lab.plots is deprecated: import the figures from a800lab.figures "
                      f"(e.g. `from a800lab.figures import {name}`)", DeprecationWarning,
                      stacklevel=2)
    return getattr(_figures, name)


def __dir__() -> list[str]:
    return sorted(_figures.__all__)
