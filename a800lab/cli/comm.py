"""The communication lab on the command line: `comm collectives` and `comm ddp`, on ranks started
here (2 gloo processes on a CPU, one per GPU on NCCL) or, under torchrun, every process a rank
and rank 0 writing --out (the G.7.2 row read from it); `torchrun`, torchrun with the lab's checks.
A rank that dies or hangs ends the run with the reason (exit 1)."""

import argparse
import os
import shlex
import sys

from ..core.cancel import Cancelled
from ..core.noise import default_cpu_threads
from ..core.units import parse_size
from . import options
from .options import Stopped, positive, refuse

DDP_OPTIONS = ("hook", "accum_steps", "sync", "bucket_cap_mb", "powersgd_rank", "start_iter")
RANKS = "nproc timeout_s RUN no_resume"
RANK_OPTIONS = {
    "nproc": {"type": int, "help": "ranks to start here (default 2 on a CPU, one per GPU); under "
                                   "torchrun, torchrun decides"},
    "timeout_s": {"type": float, "default": 120.0,
                  "help": "a point taking longer ends the run: its group counts as hung",
                  "check": refuse(positive, "--timeout-s {} must be a number of seconds > 0")},
}


def specs():
    """(CollectiveSpec, DDPSpec): the points' fields, imported when a comm command runs."""
    from ..workloads.comm.collectives import CollectiveSpec
    from ..workloads.comm.ddp import DDPSpec

    return CollectiveSpec, DDPSpec


def add_parsers(commands) -> None:
    commands.add("collectives", group="comm", run=collectives_command, spec=lambda: specs()[0],
                 help="all_reduce, all_gather, reduce_scatter, broadcast, hierarchical_all_reduce, "
                      "leader_all_reduce over message sizes: time, algbw, busbw",
                 options=f"op+ size+ dtype ranks_per_node {RANKS}", **RANK_OPTIONS,
                 size={"type": None, "check": _sizes, "help": "message sizes in bytes, or with "
                       "K/M/G (binary: 1K = 1024); default 1K 16K 256K 4M on CPUs, 1K to 1G by "
                       "4x on GPUs"})
    commands.add("ddp", group="comm", run=ddp_command, spec=lambda: specs()[1],
                 help="a DDP training step: comm hooks, no_sync accumulation, buckets",
                 options=" ".join(f"{name}+" for name in DDP_OPTIONS) + f" train_steps {RANKS}",
                 **RANK_OPTIONS,
                 train_steps="optimizer steps before timing (default 20 on a CPU, 50 on GPUs)")
    launch = commands.add(  # "+" prefixes: every --option after `torchrun` is left to torchrun
        "torchrun", run=torchrun_command, parser_options={"prefix_chars": "+",
                                                          "add_help": False},
        help="torchrun (the same options) running a lab group command on every rank of this "
             "node, after checking the rendezvous endpoint answers; a failed rank named in one "
             "line: a800lab torchrun --nnodes 2 --nproc-per-node 8 --rdzv-backend c10d "
             "--rdzv-endpoint HEAD:29500 comm collectives ...")
    launch.add_argument("torchrun_args", nargs=argparse.REMAINDER,
                        help="torchrun's options, then comm collectives|ddp ... or doctor --fleet")


def collectives_command(args) -> int:
    from ..workloads.comm import runs

    backend = "nccl" if args.device.startswith("cuda") else "gloo"
    per_node = int(os.environ.get("LOCAL_WORLD_SIZE", "1")) if runs.under_torchrun() else None
    return _run(args, "comm", collective_axes(args, backend, per_node),
                {"budget_s": args.budget_s}, backend)


def collective_axes(args, backend: str, per_node: int | None) -> dict:
    """The grid of `comm collectives`; `per_node`: the ranks per node a hierarchical all-reduce
    defaults to (torchrun's LOCAL_WORLD_SIZE; None: every rank on one node)."""
    from ..workloads.comm.collectives import HIERARCHICAL

    sizes = args.size or \
        [2**e for e in range(10, 31 if backend == "nccl" else 23, 2 if backend == "nccl" else 4)]
    spec = specs()[0]
    axes = {"op": args.op or [spec.op], "size_bytes": sizes, "dtype": [args.dtype or spec.dtype]}
    if args.ranks_per_node is not None:
        axes["ranks_per_node"] = [args.ranks_per_node]
    elif per_node is not None and set(HIERARCHICAL) & set(axes["op"]):
        axes["ranks_per_node"] = [per_node]
    return axes


def ddp_axes(args) -> dict:
    """The grid of `comm ddp`."""
    return {name: getattr(args, name) for name in DDP_OPTIONS
            if getattr(args, name) is not None} or {"hook": ["allreduce"]}


def torchrun_command(args) -> int:
    from ..workloads.comm.torchrun import launch, leave, torchrun_args

    if not args.torchrun_args or args.torchrun_args[0] in ("-h", "--help"):
        print(f"usage: a800lab torchrun [torchrun options] COMMAND ...\n\n"
              f"{args.command_parser.description}\n", file=sys.stderr)
        torchrun_args(["--help"])  # torchrun's own options (exits)
    launch_args = torchrun_args(args.torchrun_args)
    command = launch_args.training_script_args
    if command[0] == "comm":  # refused here, once, rather than by every rank
        nodes, per_node = str(launch_args.nnodes), str(launch_args.nproc_per_node)
        both = nodes.isdigit() and per_node.isdigit()
        check_comm_command(args.parser_for, command,
                           world_size=int(nodes) * int(per_node) if both else None,
                           per_node=int(per_node) if both else None)
    leave(launch(launch_args))  # torch's teardown in the agent costs seconds and does nothing


def check_comm_command(parser_for, command: list[str], *, world_size: int | None,
                       per_node: int | None) -> None:
    """ValueError for a comm command its ranks would refuse: it parses as they will parse it
    (`parser_for(argv)`: the lab's parser for that command), its options pass their checks and
    (world_size known) its points theirs."""
    from ..workloads.comm import runs

    try:
        lab = parser_for(command).parse_args(command if "--out" in command else
                                               [*command, "--out", "comm.jsonl"])
    except SystemExit:
        raise ValueError(f"{shlex.join(command)}: the comm command does not parse (its error "
                         "is above)") from None
    options.run_checks(lab, skip=("out", "device"))  # those two are the ranks' to check
    if world_size is not None:
        workload, axes = ("comm", collective_axes(lab, "nccl", per_node)) \
            if lab.comm == "collectives" else ("ddp", ddp_axes(lab))
        runs.plan_points(workload, axes, None, world_size, "nccl")


def ddp_command(args) -> int:
    backend = "nccl" if args.device.startswith("cuda") else "gloo"
    train_steps = args.train_steps or (50 if backend == "nccl" else 20)
    return _run(args, "ddp", ddp_axes(args),
                {"budget_s": args.budget_s, "train_steps": train_steps}, backend)


def _sizes(texts: list[str]) -> list[int]:
    try:
        return [parse_size(text) for text in texts]
    except ValueError as exc:
        raise ValueError(f"--size {exc}") from None


def _run(args, workload: str, axes: dict, settings: dict, backend: str) -> int:
    """Check everything, then run the points on ranks started here or (under torchrun) on this
    process group; Ctrl-C and a failed rank keep what was measured."""
    import torch

    from ..workloads.comm import runs
    from ..workloads.comm.launcher import RankGroupError
    from ..workloads.comm.torchrun import leave

    here = runs.under_torchrun()
    if here and args.nproc is not None:
        raise ValueError("--nproc: under torchrun, torchrun starts the ranks (--nproc-per-node)")
    nproc = int(os.environ["WORLD_SIZE"]) if here else args.nproc  # 0 is a value to refuse
    if nproc is None:
        nproc = torch.cuda.device_count() if backend == "nccl" else 2
    if not here:
        runs.check_local_ranks(nproc, backend)  # too many for this machine: nothing started
    runs.plan_points(workload, axes, None, nproc, backend)  # a bad value exits before any rank
    speaks = not here or os.environ["RANK"] == "0"  # one voice for the group
    threads = args.threads or 1
    if backend == "gloo" and args.threads is None:
        threads = max(1, default_cpu_threads() // (1 if here else nproc))
        if speaks:
            print(f"CPU: {threads} torch thread(s) per rank, a core left for the rest of the "
                  "machine (--threads N per rank to change)", file=sys.stderr)
    common = {"settings": settings, "out": args.out, "resume": not args.no_resume,
              "backend": backend, "on_progress": options.show_progress,
              "on_result": options.show_record}
    try:
        if here:
            os.environ.setdefault("A800LAB_THREADS", str(threads))
            os.environ.setdefault("A800LAB_TIMEOUT_S", str(args.timeout_s))
            res = runs.run_comm_here(workload, axes, **common)
        else:
            res = runs.run_comm(workload, axes, world_size=nproc, timeout_s=args.timeout_s,
                                threads=threads, **common)
    except (KeyboardInterrupt, Cancelled):
        raise Stopped(f"stopped; every finished point is in {args.out}") from None
    except RankGroupError as exc:
        print(f"a800lab: error: {exc}\nevery finished point is in {args.out}", file=sys.stderr)
        code = 1
    else:
        code = 0
        if speaks:
            print(options.summary_line(res, args.out), file=sys.stderr)
            if workload == "comm":
                _hierarchical_row(args.out, "cuda" if backend == "nccl" else "cpu")
    if here:  # a rank under torchrun ends at once (torch's teardown costs seconds)
        leave(code)
    return code


def _hierarchical_row(out: str, device: str) -> None:
    """The report's G.7.2 row read from `out` when it holds flat and hierarchical all-reduces of
    one group (the row needs their ranks on 2 or more nodes to decide)."""
    from ..core.results import read_records
    from ..report.cluster import hierarchical_row

    row = hierarchical_row(read_records(out), device)
    if row is not None:
        status, measured, reason = row
        print(f"G.7.2 (the report's hierarchical all-reduce row): {status}: {measured}"
              + (f"; {reason}" if reason else ""), file=sys.stderr)
