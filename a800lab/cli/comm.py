"""The communication lab on the command line: `comm collectives` and `comm ddp`.

    python -m a800lab comm collectives --op all_reduce all_gather --size 1K 1M 64M \
        --out comm.jsonl                               # algbw/busbw on 2 gloo ranks or all GPUs
    python -m a800lab comm ddp --hook allreduce fp16_compress powersgd --out ddp.jsonl
    torchrun --nproc-per-node 8 -m a800lab comm collectives --size 1M 1G --out comm.jsonl

Here the command starts its own ranks (2 gloo processes on a CPU, one per GPU on NCCL); under
torchrun every process is a rank and rank 0 writes --out. A rank that dies or hangs ends the run
with the reason (exit 1); every finished point is already in --out.
"""

from __future__ import annotations

import math
import os
import sys

from ..core.cancel import Cancelled
from ..core.units import parse_size
from .options import resume_options, run_options, show_progress, show_record, summary_line

DDP_OPTIONS = ("hook", "accum_steps", "sync", "bucket_cap_mb", "powersgd_rank", "start_iter")


def add_parsers(commands) -> None:
    collectives = commands.add(
        "collectives", group="comm", run=collectives_command,
        help="all_reduce, all_gather, reduce_scatter, broadcast, hierarchical_all_reduce over "
             "message sizes: time, algbw, busbw")
    collectives.add_argument("--op", nargs="+", default=None,
                             help="collectives (default all_reduce)")
    collectives.add_argument("--size", nargs="+", default=None,
                             help="message sizes in bytes, or with K/M/G (binary: 1K = 1024); "
                                  "default 1K 16K 256K 4M on CPUs, 1K to 1G by 4x on GPUs")
    collectives.add_argument("--dtype", default="fp32", help="fp32, fp16 or bf16")
    collectives.add_argument("--ranks-per-node", type=int, default=None,
                             help="hierarchical_all_reduce: ranks per node (default: under "
                                  "torchrun LOCAL_WORLD_SIZE, else all ranks on one node)")
    _rank_options(collectives)

    ddp = commands.add("ddp", group="comm", run=ddp_command,
                       help="a DDP training step: comm hooks, no_sync accumulation, buckets")
    ddp.add_argument("--hook", nargs="+", default=None,
                     help="allreduce, fp16_compress, bf16_compress, powersgd")
    ddp.add_argument("--accum-steps", type=int, nargs="+", default=None,
                     help="micro-batches per optimizer step")
    ddp.add_argument("--sync", nargs="+", default=None,
                     help="no_sync (once per step) or every_micro_batch")
    ddp.add_argument("--bucket-cap-mb", type=float, nargs="+", default=None,
                     help="DDP's gradient bucket sizes, MB (default 25, torch's)")
    ddp.add_argument("--powersgd-rank", type=int, nargs="+", default=None,
                     help="PowerSGD's matrix approximation ranks (default 1; the powersgd hook)")
    ddp.add_argument("--start-iter", type=int, nargs="+", default=None,
                     help="PowerSGD's plain all-reduce steps before compressing (>= 2)")
    ddp.add_argument("--train-steps", type=int, default=None,
                     help="optimizer steps before timing (default 20 on a CPU, 50 on GPUs)")
    _rank_options(ddp)


def _rank_options(parser) -> None:
    parser.add_argument("--nproc", type=int, default=None,
                        help="ranks to start here (default 2 on a CPU, one per GPU); under "
                             "torchrun, torchrun decides")
    parser.add_argument("--timeout-s", type=float, default=120.0,
                        help="a point taking longer ends the run: its group counts as hung")
    run_options(parser)
    resume_options(parser)


def _backend(args) -> str:
    from ..core.backends import resolve_device

    return "nccl" if resolve_device(args.device).startswith("cuda") else "gloo"


def collectives_command(args) -> int:
    backend = _backend(args)
    sizes = [_size(s) for s in args.size] if args.size else \
        [2**e for e in range(10, 31 if backend == "nccl" else 23, 2 if backend == "nccl" else 4)]
    axes = {"op": args.op or ["all_reduce"], "size_bytes": sizes, "dtype": [args.dtype]}
    if args.ranks_per_node is not None:
        axes["ranks_per_node"] = [args.ranks_per_node]
    from ..workloads.comm.runs import under_torchrun

    if under_torchrun() and "hierarchical_all_reduce" in axes["op"] and \
            args.ranks_per_node is None:
        axes["ranks_per_node"] = [int(os.environ.get("LOCAL_WORLD_SIZE", "1"))]
    return _run(args, "comm", axes, {"budget_s": args.budget_s}, backend)


def ddp_command(args) -> int:
    backend = _backend(args)
    train_steps = args.train_steps or (50 if backend == "nccl" else 20)
    if train_steps < 1:
        raise ValueError(f"--train-steps {train_steps} must be at least 1")
    axes = {name: getattr(args, name) for name in DDP_OPTIONS
            if getattr(args, name) is not None} or {"hook": ["allreduce"]}
    return _run(args, "ddp", axes, {"budget_s": args.budget_s, "train_steps": train_steps},
                backend)


def _size(text: str) -> int:
    try:
        return parse_size(text)
    except ValueError as exc:
        raise ValueError(f"--size {exc}") from None


def _run(args, workload: str, axes: dict, settings: dict, backend: str) -> int:
    """Check everything, then run the points on ranks started here or (under torchrun) on
    this process group; Ctrl-C and a failed rank keep what was measured."""
    import torch

    from ..workloads.comm.launcher import RankGroupError
    from ..workloads.comm.runs import (
        check_local_ranks,
        plan_points,
        run_comm,
        run_comm_here,
        under_torchrun,
    )
    from .options import check_run_options

    check_run_options(args)
    if not (math.isfinite(args.timeout_s) and args.timeout_s > 0):
        raise ValueError(f"--timeout-s {args.timeout_s} must be a number of seconds > 0")
    here = under_torchrun()
    if here and args.nproc is not None:
        raise ValueError("--nproc: under torchrun, torchrun starts the ranks (--nproc-per-node)")
    if here:
        nproc = int(os.environ["WORLD_SIZE"])
    elif args.nproc is not None:  # --nproc 0 is a value to refuse, not "the default"
        nproc = args.nproc
    else:
        nproc = torch.cuda.device_count() if backend == "nccl" else 2
    if not here:
        check_local_ranks(nproc, backend)  # too many for this machine: refused, nothing started
    plan_points(workload, axes, None, nproc, backend)  # a bad value exits before any rank
    threads = args.threads or 1
    if backend == "gloo" and args.threads is None:
        from ..core.noise import default_cpu_threads

        threads = max(1, default_cpu_threads() // (1 if here else nproc))
        if os.environ.get("RANK", "0") == "0" or not here:
            print(f"CPU: {threads} torch thread(s) per rank, a core left for the rest of the "
                  "machine (--threads N per rank to change)", file=sys.stderr)
    try:
        if here:
            os.environ.setdefault("A800LAB_THREADS", str(threads))
            os.environ.setdefault("A800LAB_TIMEOUT_S", str(args.timeout_s))
            res = run_comm_here(workload, axes, settings=settings, out=args.out,
                                resume=not args.no_resume, backend=backend,
                                on_progress=show_progress, on_result=show_record)
            if int(os.environ["RANK"]) != 0:
                return 0
        else:
            res = run_comm(workload, axes, world_size=nproc, backend=backend,
                           settings=settings, out=args.out, resume=not args.no_resume,
                           timeout_s=args.timeout_s, threads=threads,
                           on_progress=show_progress, on_result=show_record)
    except (KeyboardInterrupt, Cancelled):
        print(f"stopped; every finished point is in {args.out}", file=sys.stderr)
        return 130
    except RankGroupError as exc:
        print(f"a800lab: error: {exc}\nevery finished point is in {args.out}", file=sys.stderr)
        return 1
    print(summary_line(res, args.out), file=sys.stderr)
    return 0
