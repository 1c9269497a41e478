"""The battery `a800lab report` runs: which points, at which sizes, for which claim, per mode and
machine (plans only: the point functions live beside their workloads).

    from a800lab.report.battery import plan_battery
    plan = plan_battery("quick", device="cpu")      # or "full"; device "cuda:0" on a GPU box
    plan.steps[0].name, plan.steps[0].points        # "peak", [{"device": "cpu", ...}]
    plan.untestable["tf32_speed"]                   # why a claim cannot be tested here
    plan.estimate_s                                 # rough seconds for the whole battery

Each step is one workload of the lab over a few points (a point is a dict of the workload's
parameters) and names the register's claims it serves; its records go to the report's JSON
Lines like any sweep's. Nothing here measures anything itself: POINTS maps each step's workload
to the lab's own point function. The plans themselves are in plan_gpu.py (the guide's
configurations at GPU sizes: 8192^3 peaks, a 4096^3 bf16 tile search and the guide's 16x16 /
32x16 tiles, the GPT-2-small-shaped Transformer and ResNet-50, the box's GPUs as ranks) and
plan_cpu.py (every method a CPU can show, at the chapters' small fp32 sizes, 2 gloo ranks for
the communication claims). A claim the plan cannot measure here gets its reason in
`untestable`; claims no measurement decides are the register's own (not_measurable).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ..workloads.peak import peak_point
from ..workloads.pipeline import pipeline_point
from ..workloads.placement import placement_point
from ..workloads.sparsity import sparse_point
from ..workloads.tiles.point import tiled_matmul_point
from ..workloads.tiles.tune import default_grid
from ..workloads.training.max_batch import max_batch_point
from ..workloads.training.numerics import embedding_point, held_out_point
from ..workloads.training.point import accumulation_point, train_point
from ..workloads.usage import matmul_usage_point, sparse_usage_point

# Bumped when a step's points or what their records carry change meaning: a report folder's
# points from another version are measured again (report.run), never judged by today's rules.
BATTERY_VERSION = 3   # 3: training points carry their model FLOPs and MFU
MODES = ("quick", "full")
BUDGET_S = {"quick": 120.0, "full": 900.0}
DDP_ACCUM_STEPS = 4   # micro-batches per optimizer step in the ddp step (no_sync: one sync)


@dataclass(frozen=True)
class Step:
    """One workload over a few points; `ranks` > 0 runs them on that many ranks (NCCL on GPUs,
    gloo on a CPU: the points say which)."""

    name: str
    workload: str
    points: tuple[dict, ...]
    settings: dict = field(default_factory=dict)   # the point function's options (not params)
    est_s: float = 1.0                             # rough seconds per point, for the ETA
    claims: tuple[str, ...] = ()
    what: str = ""
    ranks: int = 0

    def to_dict(self) -> dict:
        return {"name": self.name, "workload": self.workload, "points": list(self.points),
                "settings": self.settings, "est_s": self.est_s, "claims": list(self.claims),
                "what": self.what, "ranks": self.ranks}


@dataclass(frozen=True)
class Plan:
    """The battery for one mode on one machine, and the claims it cannot test, with why."""

    mode: str
    device: str
    gpu_count: int
    steps: tuple[Step, ...]
    untestable: dict

    @property
    def points(self) -> int:
        return sum(len(s.points) for s in self.steps)

    @property
    def estimate_s(self) -> float:
        return sum(s.est_s * len(s.points) for s in self.steps) + sum(
            RANKS_START_S for _ in {(s.ranks, s.points[0].get("backend")) for s in self.steps
                                    if s.ranks})

    def steps_for(self, claim: str) -> list[Step]:
        """The steps whose points the claim is judged from."""
        return [s for s in self.steps if claim in s.claims]

    def to_dict(self) -> dict:
        return {"mode": self.mode, "device": self.device, "gpu_count": self.gpu_count,
                "steps": [s.to_dict() for s in self.steps], "untestable": self.untestable,
                "points": self.points, "estimate_s": self.estimate_s}


RANKS_START_S = 6.0   # starting a rank group: processes, torch imports, DDP's first use

POINTS: dict[str, Callable[..., dict]] = {
    "peak": peak_point, "tiles": tiled_matmul_point, "sparsity": sparse_point,
    "train": train_point, "accumulation": accumulation_point, "max_batch": max_batch_point,
    "pipeline": pipeline_point, "placement": placement_point, "held_out": held_out_point,
    "embedding": embedding_point, "matmul_usage": matmul_usage_point,
    "sparse_usage": sparse_usage_point,
}


def plan_battery(mode: str = "quick", device: str = "cpu", gpu_count: int | None = None,
                 ) -> Plan:
    """The steps of `mode` ("quick" or "full") on `device` ("cpu", or "cuda:N": the first card
    of the box, the others its siblings) and the claims it cannot test here, with why."""
    if mode not in MODES:
        raise ValueError(f"mode {mode!r}: use 'quick' or 'full'")
    if device == "cpu":
        from .plan_cpu import cpu_plan

        return cpu_plan(mode)
    if not device.startswith("cuda:"):
        raise ValueError(f"device {device!r}: give 'cpu' or 'cuda:N'")
    from .plan_gpu import gpu_plan

    return gpu_plan(mode, device, gpu_count)


def default_grid_points(backend: str) -> list[dict]:
    """The tile tuner's default grid for `backend`, with group_m filled in."""
    return [{"group_m": 8 if backend == "triton" else 1, **c} for c in default_grid(backend)]


def train_points(models: dict[str, tuple[str, int]], precisions) -> tuple[dict, ...]:
    """train points: each model {name: (size, batch)} in each precision."""
    return tuple({"model": m, "size": size, "batch_size": batch, "precision": p}
                 for m, (size, batch) in models.items() for p in precisions)


def accumulation_points(model: str, size: str, large: int, steps: int) -> tuple[dict, ...]:
    """One batch of `large` against `steps` micro-batches of large // steps."""
    return tuple({"model": model, "size": size, "batch_size": b, "accum_steps": k,
                  "precision": "fp32"} for b, k in ((large, 1), (large // steps, steps)))


def embedding_points(model: str, size: str, batch: int, seeds=(0, 1)) -> tuple[dict, ...]:
    """fp16 against fp32 tables: AdamW with each seed, SGD (the lost updates) with the first."""
    return tuple({"embedding": e, "model": model, "size": size, "batch_size": batch,
                  "optimizer": opt, "seed": seed}
                 for opt, opt_seeds in (("adamw", seeds), ("sgd", seeds[:1]))
                 for seed in opt_seeds for e in ("fp32", "fp16"))


def pipeline_ladder(base: dict, workers: int, gpu: bool) -> tuple[dict, ...]:
    """The idle-rate ladder, one lever added per point: none; workers; + pin_memory;
    + non_blocking (the last two need a GPU)."""
    rungs = [(0, False, False), (workers, False, False)]
    if gpu:
        rungs += [(workers, True, False), (workers, True, True)]
    return tuple({**base, "num_workers": w, "pin_memory": pin, "non_blocking": nb}
                 for w, pin, nb in rungs)


def comm_steps(ranks: dict, sizes, hooks, quick_ddp: bool, est_s: float) -> list[Step]:
    """The communication steps over `ranks` ({"world_size", "backend"}): hierarchical vs flat
    all-reduce at `sizes`, and DDP steps per comm hook and sync mode."""
    n = ranks["world_size"]
    rpn = n // 2 if n >= 4 else 1     # two halves of the box as two "nodes" (1 rank each at 2)
    flat = [{"op": "all_reduce", "size_bytes": s, "dtype": "fp32", **ranks} for s in sizes]
    hier = [{"op": "hierarchical_all_reduce", "size_bytes": s, "dtype": "fp32",
             "ranks_per_node": rpn, **ranks} for s in sizes]
    if quick_ddp:   # what the claims need: plain both ways, each compressing hook with no_sync
        ddp = [("allreduce", "every_micro_batch"), ("allreduce", "no_sync")] + [
            (h, "no_sync") for h in hooks if h != "allreduce"]
    else:
        ddp = [(h, s) for h in hooks for s in ("no_sync", "every_micro_batch")]
    return [
        Step("hierarchical", "comm", tuple(flat + hier), {"budget_s": 0.3}, est_s,
             ("hierarchical",), f"flat and hierarchical all-reduce over {n} ranks "
             f"({ranks['backend']})", ranks=n),
        Step("ddp", "ddp", tuple({"hook": h, "sync": s, "accum_steps": DDP_ACCUM_STEPS, **ranks}
                                 for h, s in ddp),
             {"budget_s": 0.3, "train_steps": 10}, est_s,
             ("compression", "accum_traffic", "accum_frequency"),
             f"DDP steps per comm hook and sync mode over {n} ranks ({ranks['backend']})",
             ranks=n),
    ]
