"""Collectives through torch.distributed, checked, then timed, with nccl-tests' algbw and busbw
(doc/PERFORMANCE.md: size is the whole buffer, busbw = algbw x bus_factor).

    busbw_gbs("all_reduce", size_bytes=2**30, time_ms=10.0, world_size=8)   # 187.9 GB/s
    collective_point("all_reduce", 2**20, world_size=2, backend="gloo")   # on every rank
"""

import functools
import statistics
import time
from dataclasses import dataclass

import torch

from ...core.checks import positive_int
from ...core.knobs import check_knobs, knob, knobs
from ...core.specs import match
from ...core.timing import measure

OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "hierarchical_all_reduce",
       "leader_all_reduce")
ALL_REDUCES = ("all_reduce", "hierarchical_all_reduce", "leader_all_reduce")  # one result
HIERARCHICAL = ALL_REDUCES[1:]  # two levels: ranks_per_node consecutive ranks per node
DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
WARMUP_CALLS = 2
MIN_REPS, MAX_REPS = 5, 200


@dataclass(frozen=True)
class CollectiveSpec:
    """One collective point's parameters (the group's shape is the run's)."""

    op: str = knob("all_reduce", "collectives", choices=OPS)
    size_bytes: int = knob(2**20, "message size", unit="bytes", integer=True, lo=1, cli="size")
    dtype: str = knob("fp32", "element type", choices=tuple(DTYPES))
    ranks_per_node: int | None = knob(None, "hierarchical_all_reduce and leader_all_reduce: ranks "
                                      "per node (default: under torchrun LOCAL_WORLD_SIZE, else "
                                      "all ranks on one node)", integer=True, lo=1)

    def __post_init__(self):
        check_knobs(self)


def bus_factor(op: str, world_size: int) -> float:
    """nccl-tests' busbw / algbw for `op` on `world_size` ranks."""
    knobs(CollectiveSpec)["op"].check("op", op)
    n = positive_int("world_size", world_size)
    if op in ALL_REDUCES:
        return 2 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter"):
        return (n - 1) / n
    return 1.0


def algbw_gbs(size_bytes: float, time_ms: float) -> float:
    """Algorithm bandwidth: the buffer's bytes over the time, in GB/s (1e9 bytes/s)."""
    if not (size_bytes >= 0 and time_ms > 0):
        raise ValueError(f"need size_bytes >= 0 and time_ms > 0, got {size_bytes}, {time_ms}")
    return size_bytes / (time_ms * 1e-3) / 1e9


def busbw_gbs(op: str, size_bytes: float, time_ms: float, world_size: int) -> float:
    """Bus bandwidth: algbw x bus_factor(op, world_size), in GB/s."""
    return algbw_gbs(size_bytes, time_ms) * bus_factor(op, world_size)


def link_gbs(device_name: str) -> tuple[float | None, str]:
    """(per-direction NVLink GB/s, source) of a card from the datasheet table, or (None, why)."""
    spec = match(device_name)
    if spec is None:
        return None, f"no datasheet row for {device_name!r}: no link bandwidth to compare with"
    if spec.nvlink_gbs is None:
        return None, f"{spec.name} has no NVLink; its peers talk over PCIe"
    return spec.nvlink_gbs / 2, (f"{spec.name}: NVLink {spec.nvlink_gbs:g} GB/s total, "
                                 f"{spec.nvlink_gbs / 2:g} GB/s per direction ({spec.source})")


def message_bytes(op: str, size_bytes: int, world_size: int, element_bytes: int,
                  ranks_per_node: int = 1) -> int:
    """`size_bytes` rounded down to whole elements that split evenly into the ranks' pieces
    (as nccl-tests rounds)."""
    pieces = {"all_gather": world_size, "reduce_scatter": world_size,
              "hierarchical_all_reduce": ranks_per_node}.get(op, 1)
    count = size_bytes // element_bytes // pieces * pieces
    if count == 0:
        raise ValueError(f"size_bytes={size_bytes} holds no whole element per piece "
                         f"({pieces} piece(s) of {element_bytes}-byte elements); give at least "
                         f"{pieces * element_bytes} bytes")
    return count * element_bytes


def _gather_into(dist):  # all_gather_single from torch 2.13 on
    return getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


def _scatter_into(dist):  # reduce_scatter_single from torch 2.13 on
    return getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


@functools.lru_cache(maxsize=8)
def node_groups(world_size: int, ranks_per_node: int):
    """(this rank's intra-node group, its inter-node group) for `ranks_per_node` consecutive
    ranks per node; collective (every rank calls it alike), made once per shape."""
    import torch.distributed as dist

    rank, nodes = dist.get_rank(), world_size // ranks_per_node
    intra = inter = None
    for node in range(nodes):  # every rank creates every group, in the same order
        group = dist.new_group(list(range(node * ranks_per_node, (node + 1) * ranks_per_node)))
        if rank // ranks_per_node == node:
            intra = group
    for local in range(ranks_per_node):
        group = dist.new_group(list(range(local, world_size, ranks_per_node)))
        if rank % ranks_per_node == local:
            inter = group
    return intra, inter


def hierarchical_all_reduce(tensor: torch.Tensor, intra, inter, ranks_per_node: int) -> None:
    """Sum `tensor` (numel a multiple of ranks_per_node) over all ranks in place: reduce-scatter
    in the node, all-reduce each shard across nodes (every local rank's link busy), all-gather
    in the node."""
    import torch.distributed as dist

    shard = torch.empty(tensor.numel() // ranks_per_node, dtype=tensor.dtype,
                        device=tensor.device)
    _scatter_into(dist)(shard, tensor, group=intra)
    dist.all_reduce(shard, group=inter)
    _gather_into(dist)(tensor, shard, group=intra)


def leader_all_reduce(tensor: torch.Tensor, intra, inter, ranks_per_node: int) -> None:
    """Sum `tensor` over all ranks in place through node leaders: reduce to each node's local
    rank 0, all-reduce among the leaders across nodes, broadcast in the node."""
    import torch.distributed as dist

    dist.reduce(tensor, group=intra, group_dst=0)
    if dist.get_rank() % ranks_per_node == 0:  # the leaders' group is local rank 0's inter group
        dist.all_reduce(tensor, group=inter)
    dist.broadcast(tensor, group=intra, group_src=0)


def _operation(op: str, count: int, dtype: torch.dtype, device: str, ranks_per_node: int):
    """(call, check, ready): `check()` after the first call (each rank gives rank + 1);
    `ready()` zeroes the reduced buffers, so no timed call refills them (a memset costs
    several % at 1 GiB) and fp16 cannot overflow."""
    import torch.distributed as dist

    rank, n = dist.get_rank(), dist.get_world_size()
    total = n * (n + 1) / 2
    full = functools.partial(torch.full, dtype=dtype, device=device)
    if op in ALL_REDUCES:
        buf = full((count,), rank + 1.0)
        return (_all_reduce(op, buf, n, ranks_per_node), lambda: bool((buf == total).all()),
                buf.zero_)
    if op == "all_gather":
        piece, out = full((count // n,), rank + 1.0), full((count,), 0.0)
        expected = torch.arange(1, n + 1, dtype=dtype, device=device).repeat_interleave(
            count // n)
        return (lambda: _gather_into(dist)(out, piece),
                lambda: bool((out == expected).all()), lambda: None)
    if op == "reduce_scatter":
        src, out = full((count,), rank + 1.0), full((count // n,), 0.0)
        return (lambda: _scatter_into(dist)(out, src), lambda: bool((out == total).all()),
                lambda: None)
    buf = full((count,), 1.0 if rank == 0 else 0.0)  # broadcast from rank 0
    return (lambda: dist.broadcast(buf, src=0), lambda: bool((buf == 1.0).all()),
            lambda: None)


def _all_reduce(op: str, buf: torch.Tensor, world_size: int, ranks_per_node: int):
    """A call of all-reduce `op` summing `buf` in place."""
    import torch.distributed as dist

    if op == "all_reduce":
        return functools.partial(dist.all_reduce, buf)
    algorithm = hierarchical_all_reduce if op == "hierarchical_all_reduce" else leader_all_reduce
    return functools.partial(algorithm, buf, *node_groups(world_size, ranks_per_node),
                             ranks_per_node)


def flat_difference(op: str, count: int, dtype: torch.dtype, device: str,
                    ranks_per_node: int) -> float:
    """The largest |difference| on any rank between `op`'s sum and the flat all-reduce's, both
    of the same seeded integers in {-1, 0, 1} per rank (exact in every dtype up to 256 ranks,
    bf16's integer range, so any difference is a wrong sum, not rounding)."""
    import torch.distributed as dist

    rank, n = dist.get_rank(), dist.get_world_size()
    flat = torch.randint(-1, 2, (count,), dtype=dtype, device=device,
                         generator=torch.Generator(device).manual_seed(rank))
    mine = flat.clone()
    dist.all_reduce(flat)
    _all_reduce(op, mine, n, ranks_per_node)()
    return agree(float((mine - flat).abs().max()), device)  # 0 exactly when every sum agrees


def agree(value: float, device: str, how: str = "max") -> float:
    """The max (or min) of `value` over all ranks: one decision every rank shares."""
    import torch.distributed as dist

    t = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX if how == "max" else dist.ReduceOp.MIN)
    return float(t.item())


def agreed_reps(call, device: str, budget_s: float) -> int:
    """Warm `call` up, then agree on one repetition count filling `budget_s` on the slowest
    rank."""
    start = time.perf_counter()
    for _ in range(WARMUP_CALLS):
        call()
        if device.startswith("cuda"):
            torch.cuda.synchronize(device)
    per_call_s = agree((time.perf_counter() - start) / WARMUP_CALLS, device)
    return max(MIN_REPS, min(MAX_REPS, round(budget_s / per_call_s) if per_call_s > 0
                             else MAX_REPS))


def timed_calls(call, device: str, reps: int) -> list[float]:
    """`reps` timed calls (measure(): CUDA events on a GPU), each sample the slowest rank's."""
    import torch.distributed as dist

    timing = measure(call, device=device, min_warmup=0, warmup_s=0.0, min_reps=reps,
                     max_reps=reps, flush_l2=False)
    samples = torch.tensor(timing.samples_ms, dtype=torch.float64, device=device)
    dist.all_reduce(samples, op=dist.ReduceOp.MAX)
    return samples.tolist()


def check_group(world_size: int, backend: str, nodes: int = 1) -> None:
    """The live group is the one the point is for: `world_size` ranks on `backend` spanning
    `nodes` nodes."""
    import torch.distributed as dist

    from .placement import placement

    if not dist.is_initialized():
        raise RuntimeError("no torch.distributed process group: run this on the ranks of a "
                           "group (CommExplorer, `python -m a800lab comm`, or torchrun)")
    if dist.get_world_size() != world_size or dist.get_backend() != backend:
        raise ValueError(f"this point is for {world_size} ranks on {backend}, the group has "
                         f"{dist.get_world_size()} on {dist.get_backend()}")
    spans = placement()["nodes"]
    if spans != nodes:
        raise ValueError(f"this point is for ranks on {nodes} node(s), the group spans {spans}")


def collective_point(op: str = CollectiveSpec.op, size_bytes: int = CollectiveSpec.size_bytes, *,
                     world_size: int, backend: str, nodes: int = 1, device: str = "cpu",
                     budget_s: float = 0.3, **params) -> dict:
    """One collective at one size (CollectiveSpec's fields: `params` dtype, ranks_per_node;
    checked by runs.check_point) on every rank of the live group: checked (a hierarchical one
    also against the flat all-reduce), then timed; throughput = median busbw in GB/s."""
    check_group(world_size, backend, nodes)
    spec = CollectiveSpec(op, size_bytes, **params)
    op, size_bytes, dtype = spec.op, spec.size_bytes, spec.dtype
    factor = bus_factor(op, world_size)
    rpn = world_size if spec.ranks_per_node is None else spec.ranks_per_node
    element_bytes = DTYPES[dtype].itemsize
    moved = message_bytes(op, size_bytes, world_size, element_bytes, rpn)
    count = moved // element_bytes
    call, check, ready = _operation(op, count, DTYPES[dtype], device, rpn)
    call()
    if agree(1.0 if check() else 0.0, device, "min") < 1:
        return {"outcome": "wrong", "message": f"{op} left wrong values on some rank (each "
                "rank gave rank + 1; the sum did not arrive everywhere)",
                "message_bytes": moved}
    extra = {}
    if op in HIERARCHICAL:  # the reduced tensors against the flat all-reduce's, element by element
        extra["max_diff_vs_flat"] = flat_difference(op, count, DTYPES[dtype], device, rpn)
        if extra["max_diff_vs_flat"] > 0:
            return {"outcome": "wrong", "message": f"{op}'s sum differs from the flat "
                    f"all-reduce's by up to {extra['max_diff_vs_flat']:g} on some rank (the "
                    "same integers summed: a wrong sum, not rounding)", "message_bytes": moved}
    ready()
    samples = timed_calls(call, device, agreed_reps(call, device, budget_s))
    algbw = algbw_gbs(moved, statistics.median(samples))
    result = {"throughput": algbw * factor, "throughput_unit": "GB/s busbw", "time_ms": samples,
              "message_bytes": moved, "algbw_gbs": algbw, "bus_factor": factor, **extra}
    if device.startswith("cuda"):
        link, source = link_gbs(torch.cuda.get_device_name(device))
        result.update(link_gbs=link, link_source=source)
        if link:
            result["pct_of_link"] = 100 * result["throughput"] / link
    return result


