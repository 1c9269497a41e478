"""The communication lab (chapter 08): collectives and DDP steps measured on N ranks.

    from a800lab.workloads.comm import busbw_gbs, collective_point, run_comm

Each name below is imported from its module on first use, so a rank's
`python -m a800lab.workloads.comm.worker` imports only what it runs.
"""

from ...core.face import face

_NAMES = {
    ".collectives": "OPS algbw_gbs bus_factor busbw_gbs collective_point link_gbs",
    ".ddp": "ddp_point",
    ".runs": "check_local_ranks hook_support_on run_comm run_comm_here",
    ".worker": "default_comm_backend",
    ".launcher": "RankGroup",
}
__getattr__, __dir__, __all__ = face(__name__, _NAMES)
