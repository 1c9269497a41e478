"""The communication lab (chapter 08): collectives and DDP steps measured on N ranks.

    from a800lab.workloads.comm import busbw_gbs, collective_point, run_comm

Every name below is importable from here (each module is imported when a name of it is first
used, so a rank's `python -m a800lab.workloads.comm.worker` imports only what it runs):

    collectives.py   collective_point: all-reduce, all-gather, ... on a live process group;
                     algbw_gbs / busbw_gbs with nccl-tests' formulas (bus_factor), link_gbs
                     (the card's per-direction NVLink), OPS (the collectives measured)
    ddp.py           ddp_point: a DDP step with a comm hook, no_sync accumulation, buckets
    runs.py          run_comm: ranks started, fed points, always stopped; run_comm_here under
                     torchrun; check_local_ranks, hook_support_on
    worker.py        one rank's loop (`python -m a800lab.workloads.comm.worker`);
                     default_comm_backend (NCCL with two GPUs or more, else gloo)
    launcher.py      RankGroup: worker processes on 127.0.0.1, their deaths and hangs told
"""

from ...core.face import face

__getattr__, __dir__, __all__ = face(__name__, {
    "collectives": "OPS algbw_gbs bus_factor busbw_gbs collective_point link_gbs",
    "ddp": "ddp_point",
    "runs": "check_local_ranks hook_support_on run_comm run_comm_here",
    "worker": "default_comm_backend",
    "launcher": "RankGroup",
})
