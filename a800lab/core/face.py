"""A package's face: its modules' names importable from the package through a PEP 562 module
`__getattr__`, each module imported only when one of its names is first used (and read afresh
each time, so a flag a test sets on the module is what the face gives).

    __getattr__, __dir__, __all__ = face(__name__, {".spec": "TrainSpec precisions_for"})
"""

import importlib
import sys


def face(package: str, names_by_module: dict[str, str]):
    """(__getattr__, __dir__, __all__) for `package`, from {module: "name name ..."}; a module
    is a path relative to the package (".spec", "..models.presets")."""
    home = {name: module for module, names in names_by_module.items() for name in names.split()}

    def __getattr__(name: str):
        if name not in home:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(home[name], package), name)

    def __dir__():
        return sorted(set(vars(sys.modules[package])) | set(home))

    return __getattr__, __dir__, sorted(home)
