"""The battery `a800lab report` runs: which points, at which sizes, for which claim, per mode and
machine (plans only: the point functions live beside their workloads).

    from a800lab.report.battery import plan_battery
    plan = plan_battery("quick", device="cpu")      # or "full"; device "cuda:0" on a GPU box
    plan.steps[0].name, plan.steps[0].points        # "peak", [{"device": "cpu", ...}]
    plan.untestable["tf32_speed"]                   # why a claim cannot be tested here
    plan.estimate_s                                 # rough seconds for the whole battery

Each step is one workload of the lab over a few points (a point is a dict of the workload's
parameters); its records go to the report's JSON Lines like any sweep's. Nothing here measures
anything itself: POINTS maps each step's workload to the lab's own point function
(peak_point, tiled_matmul_point, train_point, accumulation_point, max_batch_point, ...).
Sizes: on a GPU the realistic shapes of the chapters (8192^3 peaks, a 4096^3 bf16 tile search,
the medium training presets); on a CPU the small sizes of the chapters' CPU fallback, for the
claims whose method a CPU can check.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from ..core.backends import HAS_TRITON, why_unavailable
from ..core.precision import unsupported_reason
from ..workloads.peak import peak_point
from ..workloads.pipeline import pipeline_point
from ..workloads.sparsity import sparse_point, sparsity_unsupported_reason
from ..workloads.tiles.point import tiled_matmul_point
from ..workloads.tiles.tune import default_grid
from ..workloads.training.max_batch import max_batch_point
from ..workloads.training.point import accumulation_point, train_point
from ..workloads.usage import train_usage_point

MODES = ("quick", "full")
BUDGET_S = {"quick": 120.0, "full": 900.0}
MATMUL_PRECISIONS = ("fp32", "tf32", "fp16", "bf16", "fp8")
GPU_PEAK_SIZE, CPU_PEAK_SIZE = 8192, 512
GPU_TILE_SIZE, CPU_TILE_SIZE = 4096, 256
# Quick tile grids: sensible tiles of the chapter's grids (all fit an A100's shared memory).
QUICK_TRITON_TILES = tuple(
    dict(zip(("block_m", "block_n", "block_k", "num_warps", "num_stages"), t, strict=True),
         group_m=8)
    for t in ((64, 64, 32, 4, 3), (64, 128, 32, 4, 4), (128, 64, 32, 4, 4), (128, 128, 32, 4, 3),
              (128, 128, 64, 8, 3), (128, 256, 64, 8, 3), (256, 128, 64, 8, 3),
              (256, 64, 32, 4, 3)))
QUICK_CPU_TILES = tuple(dict(block_m=b, block_n=b, block_k=64, group_m=1) for b in (32, 64, 128))
QUICK_GPU_MAX_BATCH_MIB = 8192   # quick: plan for an 8 GiB budget (a few trials, not 80 GB's)
# CPU: a pretend budget of counted bytes; 32 MiB keeps the quick battery's trials under a second
CPU_MAX_BATCH_MIB = {"quick": 32, "full": 256}
ACCUM = {"cpu": (64, 16, 4), "cuda": (64, 16, 4)}   # large batch, micro-batch, steps
PIPELINE = {"preprocess_ms": 0.05, "cost": "cpu", "batch_size": 64, "prefetch_factor": 2}
PIPELINE_WORKERS = 4
COMM_SIZES = {"quick": (2**24, 2**28, 2**30), "full": tuple(2**e for e in range(10, 31, 2))}
HOOKS = ("allreduce", "fp16_compress", "powersgd")
DDP_ACCUM_STEPS = 4


@dataclass(frozen=True)
class Step:
    """One workload over a few points; `ranks` > 0 runs them on that many GPU ranks (NCCL)."""

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
        return sum(s.est_s * len(s.points) for s in self.steps)

    def to_dict(self) -> dict:
        return {"mode": self.mode, "device": self.device, "gpu_count": self.gpu_count,
                "steps": [s.to_dict() for s in self.steps], "untestable": self.untestable,
                "points": self.points, "estimate_s": self.estimate_s}


POINTS: dict[str, Callable[..., dict]] = {
    "peak": peak_point, "tiles": tiled_matmul_point, "sparsity": sparse_point,
    "train": train_point, "accumulation": accumulation_point, "max_batch": max_batch_point,
    "pipeline": pipeline_point, "usage": train_usage_point,
}


# ---- the plan ----------------------------------------------------------------------------------
def plan_battery(mode: str = "quick", device: str = "cpu", gpu_count: int | None = None,
                 ) -> Plan:
    """The steps of `mode` ("quick" or "full") on `device` ("cpu", or "cuda:N": the first card
    of the box, the others its siblings) and the claims it cannot test here, with why."""
    if mode not in MODES:
        raise ValueError(f"mode {mode!r}: use 'quick' or 'full'")
    if device == "cpu":
        return _cpu_plan(mode)
    if not device.startswith("cuda:"):
        raise ValueError(f"device {device!r}: give 'cpu' or 'cuda:N'")
    count = torch.cuda.device_count() if gpu_count is None else gpu_count
    return _gpu_plan(mode, device, count)


_NO_GPU = "no NVIDIA GPU here"


def _cpu_plan(mode: str) -> Plan:
    full = mode == "full"
    steps = [
        Step("peak", "peak", ({"device": "cpu", "precision": "fp32", "size": CPU_PEAK_SIZE},),
             {"budget_s": 0.3}, 1.5, ("health",), "fp32 matmul rate and copy bandwidth"),
        Step("tiles", "tiles", tuple(
            {"m": s, "n": s, "k": s, "precision": "fp32", "backend": "cpu_blocked", **t}
            for s in ((CPU_TILE_SIZE,) if not full else (CPU_TILE_SIZE, 512))
            for t in (QUICK_CPU_TILES if not full else default_grid_points("cpu_blocked"))),
            {"budget_s": 0.2, "warmup_s": 0.05}, 1.0, ("tile_spread",),
            "the tile kernel's CPU stand-in over tile configs"),
        Step("train", "train", tuple(
            {"model": m, "size": "tiny", "batch_size": 64, "precision": p}
            for m in (("transformer",) if not full else ("transformer", "mlp", "cnn"))
            for p in ("fp32", "bf16")), {"train_steps": 3, "budget_s": 0.2}, 2.0,
            ("mp_memory",), "training steps, fp32 vs bf16 autocast: memory"),
        Step("accumulation", "accumulation", _accumulation_points(
            ("transformer",) if not full else ("transformer", "mlp"), "tiny", "cpu"),
            {"train_steps": 3, "budget_s": 0.2}, 2.0, ("accumulation",),
            "large batch vs accumulated micro-batches"),
        Step("max_batch", "max_batch", tuple(
            {"model": m, "size": "tiny", "precision": p, "limit_mib": CPU_MAX_BATCH_MIB[mode]}
            for m in (("mlp",) if not full else ("mlp", "transformer"))
            for p in ("fp32", "bf16")), {}, 1.0 if not full else 3.0, ("max_batch",),
            f"largest micro-batch in a {CPU_MAX_BATCH_MIB[mode]} MiB pretend budget"),
        Step("usage", "usage", ({"model": "mlp", "size": "tiny", "batch_size": 64,
                                 "precision": "fp32"},), {"duration_s": 0.5}, 1.5, ("bill",),
             "energy per sample and cost per million samples"),
    ]
    tensor_cores = (f"{_NO_GPU}: it is a ratio of tensor-core rates, and a CPU has no tensor "
                    "cores (its bf16/fp16 matmuls are ~100x slower than fp32, TF32 does not "
                    "exist)")
    untestable = {
        "tile_peak": f"{_NO_GPU}: CPUs have no datasheet peak in the lab's table, and the tile "
                     "kernel's CPU stand-in is not a TensorCore kernel",
        "tf32_speed": tensor_cores, "tf32_accuracy": f"{_NO_GPU}: TF32 is a CUDA tensor-core "
                                                     "mode; on a CPU torch computes fp32",
        "half_speed": tensor_cores, "fp8_speed": tensor_cores,
        "sparsity_speed": f"{_NO_GPU}: " + sparsity_unsupported_reason(64, 64, "fp16", "cpu"),
        "mp_speed": f"{_NO_GPU}: bf16 autocast on a CPU runs without tensor cores, so its "
                    "speed says nothing about a GPU's",
        "pipeline_overlap": f"{_NO_GPU}: on a CPU the training step and the loader workers "
                            "share the same cores and there is no copy to overlap",
        "compression": f"{_NO_GPU}: it needs 2 or more GPUs (NCCL) and the links between "
                       "them",
        "busbw": f"{_NO_GPU}: all-reduce bandwidth needs 2 or more GPUs",
        "bill": f"{_NO_GPU}: bf16 against fp32 on a CPU is no tensor-core result (fp32's energy "
                "per sample and cost per million samples on this CPU are reported)",
    }
    return Plan(mode, "cpu", 0, tuple(steps), untestable)


def default_grid_points(backend: str) -> list[dict]:
    """the tile tuner's default grid for `backend`, with group_m filled in."""
    return [{"group_m": 8 if backend == "triton" else 1, **c} for c in default_grid(backend)]


def _accumulation_points(models, size: str, kind: str) -> tuple[dict, ...]:
    large, micro, steps = ACCUM[kind]
    return tuple({"model": m, "size": size, "batch_size": b, "accum_steps": k,
                  "precision": "fp32"} for m in models for b, k in ((large, 1), (micro, steps)))


def _gpu_plan(mode: str, device: str, count: int) -> Plan:
    full = mode == "full"
    index = int(device.split(":")[1])
    cards = [device] + [f"cuda:{i}" for i in range(count) if i != index]
    supported = [p for p in MATMUL_PRECISIONS if not unsupported_reason(p, device)]
    untestable: dict[str, str] = {}
    for claim, needs in (("tf32_speed", "tf32"), ("tf32_accuracy", "tf32"),
                         ("half_speed", "tf32"), ("fp8_speed", "fp8")):
        reason = unsupported_reason(needs, device)
        if reason:
            untestable[claim] = reason
    steps = [Step("peak", "peak", tuple({"device": device, "precision": p, "size": GPU_PEAK_SIZE}
                                        for p in supported),
                  {"budget_s": 0.3}, 2.0, ("health", "tf32_speed", "tf32_accuracy",
                                           "half_speed", "fp8_speed"),
                  f"matmul rate per precision and copy bandwidth on {device}")]
    if len(cards) > 1:
        sibling_precisions = supported if full else ["bf16" if "bf16" in supported else "fp32"]
        steps.append(Step("siblings", "peak", tuple(
            {"device": c, "precision": p, "size": GPU_PEAK_SIZE}
            for c in cards[1:] for p in sibling_precisions), {"budget_s": 0.3}, 2.0,
            ("health",), "the same on every other card, for the sibling check"))
    tile_precision = "bf16" if "bf16" in supported else "fp16"
    if HAS_TRITON:
        configs = default_grid_points("triton") if full else QUICK_TRITON_TILES
        steps.append(Step("tiles", "tiles", tuple(
            {"m": GPU_TILE_SIZE, "n": GPU_TILE_SIZE, "k": GPU_TILE_SIZE,
             "precision": tile_precision, "backend": "triton", **c} for c in configs),
            {"budget_s": 0.3, "warmup_s": 0.1}, 3.0, ("tile_spread", "tile_peak"),
            f"the Triton tile kernel over tile configs, {GPU_TILE_SIZE}^3 {tile_precision}"))
    else:
        untestable["tile_spread"] = untestable["tile_peak"] = why_unavailable("triton")
    sparse = [{"m": s, "n": s, "k": s, "precision": p}
              for s in ((8192,) if not full else (4096, 8192))
              for p in (("fp16",) if not full else ("fp16", "bf16"))
              if not sparsity_unsupported_reason(s, s, p, device)]
    if sparse:
        steps.append(Step("sparsity", "sparsity", tuple(sparse), {"budget_s": 0.3}, 4.0,
                          ("sparsity_speed",), "dense vs 2:4-sparse matmul"))
    else:
        untestable["sparsity_speed"] = sparsity_unsupported_reason(8192, 8192, "fp16", device)
    models = ("transformer",) if not full else ("mlp", "transformer", "cnn")
    train_precisions = ("fp32", "bf16") if not full else ("fp32", "tf32", "fp16", "bf16")
    train_precisions = tuple(p for p in train_precisions if not unsupported_reason(p, device))
    steps += [
        Step("train", "train", tuple({"model": m, "size": "medium", "batch_size": 64,
                                      "precision": p} for m in models for p in train_precisions),
             {"train_steps": 10 if not full else 30, "budget_s": 0.5}, 8.0,
             ("mp_memory", "mp_speed"), "training steps per precision: memory and samples/s"),
        Step("accumulation", "accumulation", _accumulation_points(
            models if full else ("transformer",), "medium", "cuda"),
            {"train_steps": 5, "budget_s": 0.5}, 6.0, ("accumulation",),
            "large batch vs accumulated micro-batches"),
        Step("max_batch", "max_batch", tuple(
            {"model": m, "size": "medium", "precision": p,
             "limit_mib": None if full else QUICK_GPU_MAX_BATCH_MIB}
            for m in models for p in ("fp32", "bf16") if not unsupported_reason(p, device)),
            {}, 15.0 if not full else 40.0, ("max_batch",),
            "largest micro-batch, verified, with the memory model's prediction"),
        Step("pipeline", "pipeline", tuple(
            {**PIPELINE, "num_workers": w, "pin_memory": w > 0, "non_blocking": w > 0}
            for w in (0, PIPELINE_WORKERS)), {"budget_s": 0.5}, 4.0, ("pipeline_overlap",),
            "input pipeline without and with workers and pinned memory"),
        Step("usage", "usage", tuple({"model": "transformer", "size": "medium",
                                      "batch_size": 64, "precision": p}
                                     for p in ("fp32", "bf16")
                                     if not unsupported_reason(p, device)),
             {"duration_s": 3.0 if not full else 5.0}, 5.0 if not full else 7.0, ("bill",),
             "training under the energy meter"),
    ]
    if count >= 2:
        # the comm workers' records name their world and backend: so do the points, or resume
        # and the report would never match them
        ranks = {"world_size": count, "backend": "nccl"}
        steps += [
            Step("busbw", "comm", tuple({"op": "all_reduce", "size_bytes": s, "dtype": "fp32",
                                         **ranks} for s in COMM_SIZES[mode]),
                 {"budget_s": 0.3}, 2.0, ("busbw",), f"all-reduce over {count} GPUs",
                 ranks=count),
            Step("compression", "ddp", tuple(
                {"hook": h, "sync": s, "accum_steps": DDP_ACCUM_STEPS, **ranks}
                for h in HOOKS for s in ("no_sync", "every_micro_batch")),
                {"budget_s": 0.3, "train_steps": 10 if not full else 30}, 5.0,
                ("compression",), f"DDP comm hooks over {count} GPUs", ranks=count),
        ]
    else:
        why = (f"one GPU here: it needs 2 or more GPUs in this box (NCCL), "
               f"CUDA sees {count}")
        untestable["compression"] = untestable["busbw"] = why
    return Plan(mode, device, count, tuple(steps), untestable)
