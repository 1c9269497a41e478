"""Comm sweeps from one process: check the points, start the ranks, feed them points, append
rank 0's records to `out` (resumable), and always stop the ranks.

    run_comm("comm", {"op": ["all_reduce"], "size_bytes": [2**10, 2**20]}, world_size=2)
    run_comm("ddp", {"hook": ["allreduce", "fp16_compress"]}, world_size=2, out="ddp.jsonl")
    hook_support_on(world_size=2)          # {"bf16_compress": "ok" or why not, ...}
"""

import contextlib
import json
import os
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import fields

from ...core.cancel import CancelToken
from ...core.envdiff import format_params
from ...core.environment import environment, fingerprint
from ...core.memory import available_bytes
from ...core.noise import usable_cores
from ...core.results import (
    Record,
    append_record,
    check_param_names,
    check_writable,
    done_keys,
    new_run_id,
)
from ...core.sweep import SweepResult, grid
from .collectives import DTYPES, HIERARCHICAL, CollectiveSpec, message_bytes
from .ddp import DDPSpec
from .launcher import RankGroup, RankGroupError, launched
from .placement import lost_peer, placement
from .worker import default_comm_backend

WORKER = "a800lab.workloads.comm.worker"
GROUP_PARAMS = ("world_size", "backend", "nodes")  # the group's shape (nodes only when > 1)
SPECS = {"comm": CollectiveSpec, "ddp": DDPSpec}  # a point's parameters: its spec's fields


def check_point(workload: str, params: Mapping) -> None:
    """Refuse a point the workers would refuse, before any process starts."""
    if workload not in SPECS:
        raise ValueError(f"unknown comm workload {workload!r}: use 'comm' or 'ddp'")
    names = tuple(f.name for f in fields(SPECS[workload]))
    unknown = set(params) - {*names, *GROUP_PARAMS}
    if unknown:
        raise ValueError(f"{sorted(unknown)} are not parameters of {workload!r}; it takes "
                         f"{names}")
    spec = SPECS[workload](**{k: v for k, v in params.items() if k not in GROUP_PARAMS})
    if workload == "comm":
        n, rpn = params["world_size"], spec.ranks_per_node
        if rpn is not None and (spec.op not in HIERARCHICAL or n % rpn):
            raise ValueError(f"ranks_per_node={rpn} needs op {' or '.join(HIERARCHICAL)} and "
                             f"must divide world_size={n}")
        message_bytes(spec.op, spec.size_bytes, n, DTYPES[spec.dtype].itemsize, rpn or n)


def relevant(workload: str, params: Mapping) -> dict:
    """`params` without settings that do nothing for this point (PowerSGD's unless the hook is
    powersgd, ranks_per_node unless the op is hierarchical)."""
    drop = set()
    if workload == "ddp" and params.get("hook", "allreduce") != "powersgd":
        drop |= {"powersgd_rank", "start_iter"}
    if workload == "comm" and params.get("op") not in HIERARCHICAL:
        drop.add("ranks_per_node")
    return {k: v for k, v in params.items() if k not in drop}


def _check_world_size(world_size) -> None:
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 2:
        raise ValueError(f"world_size={world_size!r}: communication needs at least 2 ranks "
                         "(with one GPU, use gloo: CPU ranks, e.g. --device cpu)")


def plan_points(workload: str, axes: Mapping[str, Sequence], fixed: Mapping | None,
                world_size: int, backend: str) -> list[dict]:
    """Every grid point's params (world_size and backend added, idle settings dropped, each
    once), checked."""
    _check_world_size(world_size)
    fixed = {**(fixed or {}), "world_size": world_size, "backend": backend}
    points = []
    for point in grid(axes):
        params = relevant(workload, {**fixed, **point})
        if params not in points:
            points.append(params)
    check_param_names(points[0])
    for params in points:
        check_point(workload, params)
    return points


RANK_BYTES = 400 * 2**20   # resident memory of one rank process (torch imported: ~250-350 MiB)
RANKS_PER_CORE = 4         # gloo ranks beyond this many per core only queue for the cores
BACKENDS = ("gloo", "nccl")


def check_local_ranks(world_size, backend: str) -> None:
    """ValueError, before any process starts, for ranks this machine cannot run side by side
    (too few, NCCL without a GPU per rank, more than memory holds or the cores serve)."""
    if backend not in BACKENDS:
        raise ValueError(f"backend={backend!r}: use 'gloo' (CPU ranks) or 'nccl' (one GPU per "
                         "rank)")
    if backend == "nccl":
        import torch

        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if gpus < 2 or (isinstance(world_size, int) and world_size > gpus):
            raise ValueError(f"NCCL needs one GPU per rank and at least 2 ranks: "
                             f"world_size={world_size}, {gpus} GPU(s) visible; lower world_size "
                             "or use backend='gloo' (CPU ranks)")
    _check_world_size(world_size)
    if backend == "nccl":
        return
    cores = usable_cores()
    room = available_bytes("cpu")
    if room is not None and world_size * RANK_BYTES > room:
        raise ValueError(f"world_size={world_size}: {world_size} rank processes need about "
                         f"{world_size * RANK_BYTES / 2**30:.1f} GiB ({RANK_BYTES // 2**20} MiB "
                         f"each) and {room / 2**30:.1f} GiB is available; use at most "
                         f"{max(2, int(room // RANK_BYTES))} ranks here, or run under torchrun "
                         "on more machines")
    if world_size > RANKS_PER_CORE * cores:
        raise ValueError(f"world_size={world_size}: {world_size} gloo ranks on {cores} usable "
                         f"core(s) would only take turns; use at most "
                         f"{max(2, RANKS_PER_CORE * cores)} here")


def start_ranks(world_size: int = 2, backend: str | None = None, threads: int = 1,
                timeout_s: float = 60.0) -> RankGroup:
    """A started group of comm workers, for several run_comm calls (`group=`); close() it."""
    backend = backend or default_comm_backend()
    check_local_ranks(world_size, backend)
    group = RankGroup(WORKER, world_size=world_size, timeout_s=timeout_s,
                      env={"A800LAB_BACKEND": backend,
                           "A800LAB_THREADS": str(threads), "A800LAB_TIMEOUT_S": str(timeout_s)})
    group.start()
    return group


def run_comm(workload: str, axes: Mapping[str, Sequence], *, fixed: Mapping | None = None,
             world_size: int = 2, backend: str | None = None, settings: Mapping | None = None,
             out=None, resume: bool = True, label: str = "", run_id: str | None = None,
             timeout_s: float = 60.0, threads: int = 1,
             on_progress: Callable[[int, int, float | None], None] | None = None,
             on_result: Callable[[Record], None] | None = None,
             cancel: CancelToken | None = None, group: RankGroup | None = None) -> SweepResult:
    """Every grid point of `workload` ("comm" or "ddp") on `world_size` fresh ranks (or on
    `group`, from start_ranks(), left running). `settings`: the point function's non-param
    options (budget_s, train_steps); `threads`: torch threads per rank on CPU."""
    backend = backend or default_comm_backend()
    if group is None:
        check_local_ranks(world_size, backend)
    points = plan_points(workload, axes, fixed, world_size, backend)
    if group is not None and group.world_size != world_size:
        raise ValueError(f"the group has {group.world_size} ranks, the points {world_size}")
    todo = _todo(workload, points, out, resume, "cuda:0" if backend == "nccl" else "cpu")
    result = SweepResult(total=len(points), run_id=run_id or new_run_id(),
                         skipped=len(points) - len(todo))
    if not todo:
        return result
    own = group is None
    if own:
        group = start_ranks(world_size, backend, threads, timeout_s)
    job = {"job": "point", "workload": workload, "settings": dict(settings or {}),
           "label": label, "run_id": result.run_id}
    try:
        _measure_all(todo, lambda params: Record.from_dict(json.loads(group.request(
            {**job, "params": params}))), result, out, on_result, on_progress, cancel)
    finally:
        if own:
            group.close()
    return result


def under_torchrun() -> bool:
    """True in a process torchrun started (RANK and WORLD_SIZE set, not by the lab)."""
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ and not launched()


def run_comm_here(workload: str, axes: Mapping[str, Sequence], *, fixed: Mapping | None = None,
                  settings: Mapping | None = None, out=None, resume: bool = True,
                  label: str = "", backend: str | None = None, on_progress=None,
                  on_result=None) -> SweepResult:
    """run_comm for a process that is itself a rank (under torchrun): every rank calls it alike;
    rank 0 decides what is left, writes `out` and gets the records (the others none)."""
    import torch.distributed as dist

    from .worker import join_group, measure_on_group

    device = join_group(backend)
    finished = False
    try:
        where = placement()
        if where["nodes"] > 1:  # a point across nodes is not the same point on one box
            fixed = {**(fixed or {}), "nodes": where["nodes"]}
        points = plan_points(workload, axes, fixed, dist.get_world_size(), dist.get_backend())
        rank = dist.get_rank()
        plan = [None, None]
        if rank == 0:
            plan = [_todo(workload, points, out, resume, device), new_run_id()]
        dist.broadcast_object_list(plan, src=0)  # every rank runs the same points
        todo, run_id = plan
        result = SweepResult(total=len(points), run_id=run_id, skipped=len(points) - len(todo))
        job = {"workload": workload, "settings": dict(settings or {}), "label": label,
               "run_id": run_id}

        def measure(params):  # rank 0 gets the record, the others None
            record = measure_on_group({**job, "params": params}, device)
            check_alive(where, params)
            return record

        _measure_all(todo, measure, result, out, on_result, on_progress)
        finished = True
        return result
    finally:
        if finished:  # no rank tears the group down while another still uses it
            dist.barrier()
        dist.destroy_process_group()


def check_alive(where: dict, params: Mapping) -> None:
    """A barrier after each point: a group a rank has left (a point's error was its broken
    connection, not the point's fault) ends the run with a RankGroupError naming the peer."""
    import torch.distributed as dist

    try:
        dist.barrier()
    except (RuntimeError, dist.DistError) as exc:  # gloo raises RuntimeError, NCCL DistError
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        # gloo's first sentence, without its C++ source location and generic advice
        text = re.sub(r"^\[[^\]]*\.(?:cc|cpp|h):\d+\] ", "", text).split(". ")[0]
        peer = lost_peer(where, text)
        raise RankGroupError(
            f"rank {dist.get_rank()} on {where['host']}: the group broke during "
            f"{format_params(params)}: {text}" + (f"; {peer}, whose launcher names the rank "
                                                   "that stopped" if peer else "")) from None


def run_point(workload: str, *, world_size: int = 2, backend: str | None = None,
              settings: Mapping | None = None, timeout_s: float = 60.0, **params) -> Record:
    """One point on a fresh group (seconds of start-up: sweeps use run_comm)."""
    result = run_comm(workload, {name: [value] for name, value in params.items()},
                      world_size=world_size, backend=backend, settings=settings,
                      timeout_s=timeout_s)
    return result.records[0]


def hook_support_on(world_size: int = 2, backend: str | None = None,
                    timeout_s: float = 60.0) -> dict[str, str]:
    """Which DDP comm hooks a fresh group runs: hook -> "ok" or the error it raised."""
    with contextlib.closing(start_ranks(world_size, backend, 1, timeout_s)) as group:
        return group.request({"job": "hook_support"})


def _todo(workload: str, points: list[dict], out, resume: bool, device: str) -> list[dict]:
    if out is not None:
        check_writable(out)
    done = done_keys(out, fingerprint(environment(device))) if (out and resume) else set()
    return [p for p in points
            if Record(workload=workload, params=p, outcome="error").point_key() not in done]


def _measure_all(todo: list[dict], measure, result: SweepResult, out, on_result, on_progress,
                 cancel: CancelToken | None = None) -> None:
    """`measure(params)` each point left (a Record, or None on a rank other than 0); a record
    goes to `out`, `result` and on_result, then on_progress hears how far the sweep is."""
    started = time.perf_counter()
    for done, params in enumerate(todo, start=1):
        if cancel is not None and cancel.cancelled:
            result.cancelled = True
            break
        record = measure(params)
        if record is None:
            continue
        if out is not None:
            append_record(out, record)
        result.records.append(record)
        if on_result is not None:
            on_result(record)
        if on_progress is not None:
            per_point_s = (time.perf_counter() - started) / done
            on_progress(result.skipped + done, result.total, per_point_s * (len(todo) - done))
