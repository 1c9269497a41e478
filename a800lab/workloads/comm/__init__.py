"""The communication lab (chapter 08): collectives and DDP steps measured on N ranks.

    collectives.py   collective_point: all-reduce, all-gather, ... on a live process group;
                     algbw / busbw with nccl-tests' formulas
    ddp.py           ddp_point: a DDP step with a comm hook, no_sync accumulation, buckets
    runs.py          run_comm: ranks started, fed points, always stopped; run_comm_here under
                     torchrun
    worker.py        one rank's loop (`python -m a800lab.workloads.comm.worker`)
    launcher.py      RankGroup: worker processes on 127.0.0.1, their deaths and hangs told
"""
