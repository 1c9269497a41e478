"""The tile lab (chapter 02): one matmul tiled by hand, its configs checked, tuned and modelled.

    from a800lab.workloads.tiles import tiled_matmul_point, check_config, quantise

Each name below is imported from its module on first use (tune() lives in .tune), and so is the
Triton kernel (kernel.py): set TRITON_INTERPRET=1 before that to run it under the interpreter.
"""

import importlib

_NAMES = {
    ".point": "backend_label default_tile_backend tiled_matmul_point",
    ".config": "alignment_hints check_config export_config smem_limit",
    ".facts": "tile_facts tile_facts_grid",
    ".plan": "compare_targets format_plan plan_tiles",
    ".occupancy": "Occupancy",
    ".tune": "config_grid default_grid",
    ".quantisation": "quantise sm_count_of",
}

_HOME = {name: module for module, names in _NAMES.items() for name in names.split()}
__all__ = sorted(_HOME)


def __getattr__(name: str):  # PEP 562: a name's module is imported when the name is first used
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_HOME[name], __name__), name)


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOME})
