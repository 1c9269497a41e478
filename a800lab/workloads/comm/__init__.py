"""The communication lab (chapter 08): collectives and DDP steps measured on N ranks.

    from a800lab.workloads.comm import busbw_gbs, collective_point, run_comm

Each name below is imported from its module on first use, so a rank's
`python -m a800lab.workloads.comm.worker` imports only what it runs.
"""

import importlib

_NAMES = {
    ".collectives": "OPS algbw_gbs bus_factor busbw_gbs collective_point link_gbs",
    ".ddp": "ddp_point",
    ".runs": "check_local_ranks hook_support_on run_comm run_comm_here",
    ".worker": "default_comm_backend",
    ".launcher": "RankGroup",
}

_HOME = {name: module for module, names in _NAMES.items() for name in names.split()}
__all__ = sorted(_HOME)


def __getattr__(name: str):  # PEP 562: a name's module is imported when the name is first used
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_HOME[name], __name__), name)


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOME})
