"""The report's battery on a CPU: every method a CPU can show, at the chapters' small fp32
sizes (the quick battery is run by the tests and chapter 11, so it stays a few seconds of
measuring plus one start of 2 gloo ranks).

    from a800lab.report.plan_cpu import cpu_plan
    plan = cpu_plan("quick")

What a CPU answers is only what does not depend on the hardware: accumulation's gradient
against one large batch, and the bytes and calls DDP hands to all-reduce (counted on 2 gloo
ranks). Everything else runs as a method: the tile kernel's CPU stand-in at the guide's blocks,
AMP against the framework's default fp32 on the tiny Transformer, embedding tables in fp16, the
loading ladder (workers only: pinned memory needs a GPU), placement, energy (or CPU time) per
TFLOP, flat and hierarchical all-reduce and the comm hooks on gloo; the report draws these as
"method shown on CPU; says nothing about the GPU". Claims that a CPU cannot even run (tensor-core
rates, TF32, 2:4 sparsity, ResNet-50) say why.
"""

from __future__ import annotations

from ..core.backends import torchvision_reason
from ..workloads.sparsity import sparsity_unsupported_reason
from .battery import (
    Plan,
    Step,
    accumulation_points,
    comm_steps,
    default_grid_points,
    embedding_points,
    pipeline_ladder,
    train_points,
)

PEAK_SIZE, TILE_SIZE, ENERGY_SIZE = 512, 256, 256
QUICK_TILES = tuple(dict(block_m=b, block_n=b, block_k=64, group_m=1) for b in (32, 64, 128))
# the guide's 16x16 and 32x8 blocks as the stand-in's tiles (32x8: nearest 32x16, as on a GPU)
GUIDE_TILES = (dict(block_m=16, block_n=16, block_k=16, group_m=1),
               dict(block_m=32, block_n=16, block_k=16, group_m=1))
CPU_MAX_BATCH_MIB = {"quick": 32, "full": 256}   # pretend budgets of counted bytes
PIPELINE = {"preprocess_ms": 0.2, "cost": "cpu", "batch_size": 32, "prefetch_factor": 2}
GLOO = {"world_size": 2, "backend": "gloo"}
HOOKS = ("allreduce", "fp16_compress", "powersgd")
NO_GPU = "no NVIDIA GPU here"


def cpu_plan(mode: str) -> Plan:
    """The CPU battery of `mode` (see the module docstring)."""
    full = mode == "full"
    shape = {"m": TILE_SIZE, "n": TILE_SIZE, "k": TILE_SIZE, "precision": "fp32"}
    models = {"transformer": ("tiny", 64)}
    if full:
        models["mlp"] = ("tiny", 64)
    steps = [
        Step("peak", "peak", ({"device": "cpu", "precision": "fp32", "size": PEAK_SIZE},),
             {"budget_s": 0.3}, 1.5, ("health", "tc_peak", "unit_util_mfu"),
             "fp32 matmul rate and copy bandwidth (the tiles' reference on a CPU)"),
        Step("tiles", "tiles", tuple(
            {**shape, "backend": "cpu_blocked", **t}
            for t in (QUICK_TILES if not full else default_grid_points("cpu_blocked"))),
            {"budget_s": 0.2, "warmup_s": 0.05}, 1.0, ("tc_peak", "tile_shape"),
            "the tile kernel's CPU stand-in over tile configs"),
        Step("guide_tiles", "tiles", tuple({**shape, "backend": "cpu_blocked", **t}
                                           for t in GUIDE_TILES)
             + ({**shape, "backend": "torch"},), {"budget_s": 0.2, "warmup_s": 0.05}, 1.0,
             ("tile_shape", "tc_peak"), "the guide's 16x16 and 32x16 tiles on the stand-in, "
             "and torch.matmul (CPU BLAS)"),
        Step("amp", "train", train_points(models, ("fp32_default", "fp16") if not full
                                          else ("fp32_default", "fp32", "fp16", "bf16")),
             {"train_steps": 3, "budget_s": 0.2, "predict_memory": False}, 1.5,
             ("mp_memory", "amp_speed", "nlp_speed_memory", "overall", "amp_trains",
              "unit_util_mfu"),
             "training steps: AMP (fp16 + GradScaler) against the framework's default fp32"),
        Step("embeddings", "embedding", embedding_points("transformer", "tiny", 32),
             {"train_steps": 40}, 0.5, ("embeddings_fp32",),
             "embedding tables in fp16 against fp32"),
        Step("accumulation", "accumulation", accumulation_points("transformer", "tiny", 64, 4),
             {"train_steps": 3, "budget_s": 0.2}, 2.0, ("accum_snippet",),
             "large batch vs accumulated micro-batches, and the guide's snippet"),
        Step("max_batch", "max_batch", tuple(
            {"model": m, "size": "tiny", "precision": p, "limit_mib": CPU_MAX_BATCH_MIB[mode]}
            for m in (("mlp",) if not full else ("mlp", "transformer"))
            for p in ("fp32", "bf16")), {}, 1.0 if not full else 3.0, ("max_batch",),
            f"largest micro-batch in a {CPU_MAX_BATCH_MIB[mode]} MiB pretend budget"),
        Step("pipeline", "pipeline", pipeline_ladder(PIPELINE, 1, gpu=False),
             {"budget_s": 0.3}, 1.5, ("idle_cut",), "the input pipeline without and with a "
             "loader worker"),
        Step("placement", "placement", tuple({"placement": p} for p in
                                             ("all_on_device", "embedding_on_cpu")),
             {"budget_s": 0.2}, 0.5, ("placement",), "an embedding table on the CPU or the "
             "device (both the CPU here)"),
        Step("energy", "matmul_usage", ({"size": ENERGY_SIZE, "precision": "fp32"},),
             {"duration_s": 0.3}, 0.6, ("energy",), "an fp32 matmul under the energy meter"),
        *comm_steps(GLOO, (2**22,), HOOKS, quick_ddp=not full, est_s=0.6),
    ]
    return Plan(mode, "cpu", 0, tuple(steps), _untestable())


def _untestable() -> dict[str, str]:
    rates = (f"{NO_GPU}: it is a ratio of tensor-core rates, and a CPU has no tensor cores "
             "(its bf16/fp16 matmuls are ~100x slower than fp32, TF32 does not exist)")
    sparse = f"{NO_GPU}: " + sparsity_unsupported_reason(64, 64, "fp16", "cpu")
    vision = torchvision_reason()
    resnet = (f"{NO_GPU}: ResNet-50's mixed-precision buffers are a GPU question (a CPU's "
              "autocast casts other ops), and its method is shown on the Transformer"
              + (f"; also, {vision}" if vision else ""))
    return {
        "tf32_speed": rates, "half_speed": rates, "fp8_speed": rates,
        "tf32_accuracy": f"{NO_GPU}: TF32 is a tensor-core mode; on a CPU torch computes IEEE "
                         "fp32, so a 'TF32' run here would be fp32 under another name",
        "sparsity_speed": sparse, "sparsity_util": sparse,
        "unit_util": f"{NO_GPU}: CPUs have no datasheet peak in the lab's table to take a "
                     "share of",
        "buffers_resnet50": resnet,
        "busbw": f"{NO_GPU}: the health section's bus bandwidth needs 2 or more GPUs",
    }
