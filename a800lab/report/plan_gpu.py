"""The report's battery on a GPU box: the guide's own configurations at GPU sizes.

    from a800lab.report.plan_gpu import gpu_plan
    plan = gpu_plan("quick", "cuda:0", gpu_count=8)

What it measures (a800lab.report.register says what each claim's reading is): matmul peaks per
precision at 8192^3 on the first card and its siblings; the Triton tile kernel over a grid of
tiles and at the guide's 16x16 and 32x8 (nearest: 32x16) blocks beside cuBLAS at 4096^3; 2:4
sparsity; AMP against the framework's default fp32 on the GPT-2-small-shaped Transformer and
torchvision's ResNet-50 (where torchvision imports), TF32 beside; TF32's held-out loss;
embedding tables in fp16 and fp32; accumulation against one large batch; the max-batch finder;
the loading ladder; embedding placement; energy per TFLOP; and on 2 or more GPUs the flat and
hierarchical all-reduce and the DDP comm hooks on NCCL ranks.
"""

from __future__ import annotations

import torch

from ..core.backends import HAS_TRITON, torchvision_reason, why_unavailable
from ..core.precision import unsupported_reason
from ..workloads.sparsity import sparsity_unsupported_reason
from ..workloads.tiles.config import fitting_points
from ..workloads.training.spec import canonical_precision, matmul_precision_of
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

MATMUL_PRECISIONS = ("fp32", "tf32", "fp16", "bf16", "fp8")
PEAK_SIZE, TILE_SIZE, SPARSE_SIZE, ENERGY_SIZE = 8192, 4096, 8192, 8192
# Quick tile grids: sensible tiles of the chapter's grids (all fit an A100's shared memory).
QUICK_TRITON_TILES = tuple(
    dict(zip(("block_m", "block_n", "block_k", "num_warps", "num_stages"), t, strict=True),
         group_m=8)
    for t in ((64, 64, 32, 4, 3), (64, 128, 32, 4, 4), (128, 64, 32, 4, 4), (128, 128, 32, 4, 3),
              (128, 128, 64, 8, 3), (128, 256, 64, 8, 3), (256, 128, 64, 8, 3),
              (256, 64, 32, 4, 3)))
# The guide's blocks as thread-block tiles: 16x16(x16); 32x8 has no Triton form (tl.dot needs
# >= 16 per dimension), its nearest is 32x16. One warp per 16 rows, pipelined loads.
GUIDE_TRITON_TILES = (dict(block_m=16, block_n=16, block_k=16, num_warps=1, num_stages=3,
                           group_m=8),
                      dict(block_m=32, block_n=16, block_k=16, num_warps=2, num_stages=3,
                           group_m=8))
AMP_MODELS = {"transformer": ("gpt2_small", 8), "resnet50": ("224", 64)}
QUICK_GPU_MAX_BATCH_MIB = 8192   # quick: plan for an 8 GiB budget (a few trials, not 80 GB's)
PIPELINE = {"preprocess_ms": 0.05, "cost": "cpu", "batch_size": 64, "prefetch_factor": 2}
COMM_SIZES = {"quick": (2**24, 2**28, 2**30), "full": tuple(2**e for e in range(10, 31, 2))}
HOOKS = ("allreduce", "fp16_compress", "powersgd")


def _train_ok(precision: str, device: str) -> bool:
    return not unsupported_reason(matmul_precision_of(canonical_precision(precision)), device)


def gpu_plan(mode: str, device: str, gpu_count: int | None = None) -> Plan:
    """The battery of `mode` on the box whose first card is `device` (see the module doc)."""
    full = mode == "full"
    count = torch.cuda.device_count() if gpu_count is None else gpu_count
    index = int(device.split(":")[1])
    cards = [device] + [f"cuda:{i}" for i in range(count) if i != index]
    supported = [p for p in MATMUL_PRECISIONS if not unsupported_reason(p, device)]
    untestable: dict[str, str] = {}
    for claim, needs in (("tf32_speed", "tf32"), ("tf32_accuracy", "tf32"),
                         ("half_speed", "tf32"), ("fp8_speed", "fp8")):
        reason = unsupported_reason(needs, device)
        if reason:
            untestable[claim] = reason
    steps = [Step("peak", "peak", tuple({"device": device, "precision": p, "size": PEAK_SIZE}
                                        for p in supported), {"budget_s": 0.3}, 2.0,
                  ("health", "tf32_speed", "half_speed", "fp8_speed", "unit_util",
                   "unit_util_mfu"),
                  f"matmul rate per precision and copy bandwidth on {device}")]
    if len(cards) > 1:
        sibling_precisions = supported if full else ["bf16" if "bf16" in supported else "fp32"]
        steps.append(Step("siblings", "peak", tuple(
            {"device": c, "precision": p, "size": PEAK_SIZE}
            for c in cards[1:] for p in sibling_precisions), {"budget_s": 0.3}, 2.0,
            ("health",), "the same on every other card, for the sibling check"))
    steps += _tile_steps(full, device, supported, untestable)
    steps += _sparsity_step(full, device, untestable)
    steps += _training_steps(full, device, untestable)
    steps += _systems_steps(full, device, count, untestable)
    return Plan(mode, device, count, tuple(steps), untestable)


def _tile_steps(full: bool, device: str, supported: list[str], untestable: dict) -> list[Step]:
    tile_precision = "bf16" if "bf16" in supported else "fp16"
    shape = {"m": TILE_SIZE, "n": TILE_SIZE, "k": TILE_SIZE}
    cublas = tuple({**shape, "precision": p, "backend": "torch"} for p in ("fp32", tile_precision))
    if not HAS_TRITON:
        untestable["tc_peak"] = untestable["tile_shape"] = why_unavailable("triton")
        return []
    configs = default_grid_points("triton") if full else QUICK_TRITON_TILES
    points, refused = fitting_points(  # the compiler's verdict for this card, first
        [{**shape, "precision": tile_precision, "backend": "triton", **c} for c in configs], device)
    left_out = f"; {refused} configs the compiler refuses here left out" if refused else ""
    return [
        Step("tiles", "tiles", tuple(points),
             {"budget_s": 0.3, "warmup_s": 0.1}, 3.0, ("tc_peak", "tile_shape"),
             f"the Triton tile kernel over tile configs, {TILE_SIZE}^3 {tile_precision}"
             f"{left_out}"),
        Step("guide_tiles", "tiles", tuple(
            {**shape, "precision": tile_precision, "backend": "triton", **c}
            for c in GUIDE_TRITON_TILES) + cublas, {"budget_s": 0.3, "warmup_s": 0.1}, 3.0,
             ("tile_shape", "tc_peak"), "the guide's 16x16 and 32x16 tiles, and cuBLAS in "
             f"IEEE fp32 and {tile_precision}"),
    ]


def _sparsity_step(full: bool, device: str, untestable: dict) -> list[Step]:
    sparse = [{"m": s, "n": s, "k": s, "precision": p}
              for s in ((SPARSE_SIZE,) if not full else (4096, SPARSE_SIZE))
              for p in (("fp16",) if not full else ("fp16", "bf16"))
              if not sparsity_unsupported_reason(s, s, p, device)]
    if not sparse:
        untestable["sparsity_speed"] = untestable["sparsity_util"] = \
            sparsity_unsupported_reason(SPARSE_SIZE, SPARSE_SIZE, "fp16", device)
        return []
    return [Step("sparsity", "sparsity", tuple(sparse), {"budget_s": 0.3}, 4.0,
                 ("sparsity_speed", "sparsity_util"), "dense vs 2:4-sparse matmul")]


def _training_steps(full: bool, device: str, untestable: dict) -> list[Step]:
    models = dict(AMP_MODELS)
    no_vision = torchvision_reason()
    if no_vision:
        del models["resnet50"]
        untestable["buffers_resnet50"] = f"ResNet-50 comes from torchvision: {no_vision}"
    precisions = ("fp32_default", "tf32", "fp16") if not full else \
        ("fp32_default", "fp32", "tf32", "fp16", "bf16")
    precisions = tuple(p for p in precisions if _train_ok(p, device))
    steps = [Step("amp", "train", train_points(models, precisions),
                  {"train_steps": 10 if not full else 30, "budget_s": 0.5,
                   "predict_memory": False}, 10.0,
                  ("mp_memory", "buffers_resnet50", "amp_speed", "nlp_speed_memory", "overall",
                   "amp_trains", "unit_util_mfu"), "training steps of the guide's models: AMP "
                  "against the framework's default fp32, TF32 beside")]
    if "tf32_accuracy" not in untestable:
        steps.append(Step("tf32_loss", "held_out", tuple(
            {"precision": p, "model": "transformer", "size": "medium", "batch_size": 32,
             "seed": s} for p in ("fp32", "tf32") for s in (0, 1)),
            {"train_steps": 100 if not full else 300}, 6.0, ("tf32_accuracy",),
            "held-out loss after the same steps, TF32 against IEEE fp32"))
    steps += [
        Step("embeddings", "embedding", embedding_points("transformer", "medium", 32),
             {"train_steps": 100 if not full else 300}, 4.0, ("embeddings_fp32",),
             "embedding tables in fp16 against fp32: loss reached, updates lost"),
        Step("accumulation", "accumulation", accumulation_points("transformer", "medium", 64, 4),
             {"train_steps": 5, "budget_s": 0.5}, 6.0, ("accum_snippet",),
             "large batch vs accumulated micro-batches, and the guide's snippet"),
        Step("max_batch", "max_batch", tuple(
            {"model": m, "size": "medium", "precision": p,
             "limit_mib": None if full else QUICK_GPU_MAX_BATCH_MIB}
            for m in (("transformer",) if not full else ("mlp", "transformer", "cnn"))
            for p in ("fp32", "bf16") if _train_ok(p, device)),
            {}, 15.0 if not full else 40.0, ("max_batch",),
            "largest micro-batch, verified, with the memory model's prediction"),
    ]
    return steps


def _systems_steps(full: bool, device: str, count: int, untestable: dict) -> list[Step]:
    sparse_ok = not sparsity_unsupported_reason(ENERGY_SIZE, ENERGY_SIZE, "fp16", device)
    duration = {"duration_s": 3.0 if not full else 5.0}
    steps = [
        Step("pipeline", "pipeline", pipeline_ladder(PIPELINE, 4, gpu=True), {"budget_s": 0.5},
             4.0, ("idle_cut",), "the input pipeline, one lever added at a time"),
        Step("placement", "placement", tuple(
            {"placement": p, "num_rows": 2_000_000 if not full else 10_000_000, "dim": 128,
             "batch_size": 4096} for p in ("all_on_device", "embedding_on_cpu")),
            {"budget_s": 0.5}, 4.0, ("placement",), "an embedding table on the CPU or the GPU"),
    ]
    steps.append(Step("energy", "matmul_usage", tuple(
        {"size": ENERGY_SIZE, "precision": p} for p in ("fp32", "fp16")), duration,
        duration["duration_s"] + 2.0, ("energy",), "dense matmuls under the energy meter"))
    if sparse_ok:
        steps.append(Step("energy_sparse", "sparse_usage",
                          ({"size": ENERGY_SIZE, "precision": "fp16"},), duration,
                          duration["duration_s"] + 2.0, ("energy",),
                          "a 2:4-sparse matmul under the energy meter"))
    if count >= 2:
        # the comm workers' records name their world and backend: so do the points, or resume
        # and the report would never match them
        steps += comm_steps({"world_size": count, "backend": "nccl"}, COMM_SIZES[
            "full" if full else "quick"], HOOKS, quick_ddp=not full, est_s=3.0)
    else:
        why = (f"one GPU here: it needs 2 or more GPUs in this box (NCCL), CUDA sees {count}; "
               "a CPU report counts the communication claims on 2 gloo ranks")
        for claim in ("compression", "hierarchical", "accum_traffic", "accum_frequency",
                      "busbw"):
            untestable[claim] = why
    return steps
