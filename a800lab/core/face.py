"""A package's face: the names its modules define, importable from the package itself and
imported only when first asked for, so that importing one module of a package never imports
the rest (a Triton kernel, a rank's worker, the profiler).

    # in a package's __init__.py
    __getattr__, __dir__, __all__ = face(__name__, {"spec": "TrainSpec precisions_for", ...})

A name is read from its module on every access, so a flag a test sets on the module
(`backends.HAS_TRITON`) is what the face gives. A face never exports a name that is also a
module of the package (`tiles.tune`'s `tune`): Python binds the module over it when it loads.
"""

from __future__ import annotations

import importlib
import sys


def face(package: str, names_by_module: dict[str, str]):
    """(__getattr__, __dir__, __all__) for `package`, from {module: "name name ..."}."""
    home = {name: module for module, names in names_by_module.items() for name in names.split()}

    def __getattr__(name: str):
        if name not in home:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{home[name]}"), name)

    def __dir__():
        return sorted(set(vars(sys.modules[package])) | set(home))

    return __getattr__, __dir__, sorted(home)
