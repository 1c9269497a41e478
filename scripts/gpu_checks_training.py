"""The training-step checks of scripts/gpu_check.py: a profiled step's CUDA time split and
launch gaps (also from a thread, as the panel profiles), the compile and fused-kernel levers
with MFU against the datasheet, and the training-config tuner.

Each check returns (summary, details) or raises Failed; its docstring is its expectation, one
a healthy card meets.
"""

from __future__ import annotations

import math
import tempfile
import threading

from gpu_checks_device import Failed, expect_between


def check_profile() -> tuple[str, dict]:
    """The medium Transformer at micro-batch 64 in bf16 spends over 30% of its profiled CUDA
    time in matmul/conv kernels (cuBLAS's nvjet GEMMs on Hopper counted there); a micro-batch
    of 2 waits for launches a larger share of its step than one of 64; a profile started off
    the main thread (as the panel starts it) sees the kernels too."""
    from a800lab.workloads.training.profile import profile_step
    from a800lab.workloads.training.spec import TrainSpec

    reports = {b: profile_step(TrainSpec(model="transformer", size="medium", batch_size=b,
                                         precision="bf16"), device="cuda:0", steps=2)
               for b in (2, 64)}
    details, texts = {}, []
    for b, r in reports.items():
        details[b] = {k: v for k, v in r.to_dict().items() if k != "top_ops"}
        details[b]["top_ops"] = r.breakdown.top_ops[:5]
    big = reports[64].breakdown
    texts.append(expect_between("b=64 matmul/conv share of the profiled window",
                                big.categories_ms["matmul/conv"] / big.window_ms, 0.3, 1.0))
    wait = {b: (r.breakdown.launch_wait_ms or 0) / r.breakdown.window_ms
            for b, r in reports.items()}
    texts.append(expect_between("launch-wait share b=2 minus b=64", wait[2] - wait[64], 0.0, 1.0))
    seen = {}
    thread = threading.Thread(target=lambda: seen.update(r=profile_step(
        TrainSpec(model="transformer", size="small", batch_size=8), device="cuda:0", steps=1)))
    thread.start()
    thread.join()
    texts.append(expect_between("kernels launched per step, profiled off the main thread",
                                seen["r"].breakdown.launches or 0, 1, float("inf")))
    details["thread_log"] = seen["r"].profiler_log
    return "; ".join(texts), details


def check_levers() -> tuple[str, dict]:
    """compile reduce-overhead (Inductor and CUDA graphs) trains a small Transformer (64
    tokens) with a finite loss, the compile timed apart and no recompilation in the timed
    steps, its attention pinned to the flash back end (torch's default on Hopper with CUDA 13,
    cuDNN's, is the one pytorch/pytorch#169849 and PRs #167101 and #171627 found trouble with
    under graph capture: not the lever measured here); the fused optimizer runs; each SDPA back
    end runs eagerly or is refused with a reason; MFU against the datasheet is 0-100%."""
    from a800lab.workloads.training.point import train_point

    details, texts = {}, []
    base = dict(model="transformer", size="small", batch_size=32, precision="bf16",
                device="cuda:0", train_steps=5, budget_s=0.1, predict_memory=False)
    for mode in ("reduce-overhead",):  # default mode's Inductor path is inside it
        out = train_point(**base, compile=mode, optimizer_impl="fused", attention="flash")
        details[mode] = {k: out.get(k) for k in ("throughput", "compile_s", "recompiles",
                                                 "compiled_graphs", "graph_breaks", "loss")}
        if not math.isfinite(out["loss"]) or out["recompiles"] != 0:
            raise Failed(f"compile={mode}: loss {out['loss']}, {out['recompiles']} recompiles")
        texts.append(f"compile={mode}: {out['compile_s']:.1f} s to compile")
    for backend in ("math", "flash", "efficient", "cudnn"):
        try:
            details[backend] = {"throughput": train_point(**base, attention=backend)
                                ["throughput"]}
        except ValueError as exc:
            details[backend] = {"refused": str(exc)}
    out = train_point(**base)
    details["mfu"] = {k: out.get(k) for k in ("model_flops_per_sample", "achieved_tflops",
                                              "datasheet_peak_tflops",
                                              "mfu_pct_of_datasheet_peak")}
    texts.append(expect_between("MFU % of the datasheet", out["mfu_pct_of_datasheet_peak"],
                                0.01, 100))
    return "; ".join(texts), details


def check_tune() -> tuple[str, dict]:
    """tune_train on a small Transformer in bf16 (checkpointing off/on, foreach/fused) finds a
    winner whose verified peak is within the budget and a snippet that autocasts to bf16."""
    from a800lab.workloads.training.tune import tune_train

    with tempfile.TemporaryDirectory() as tmp:
        outcome = tune_train(model="transformer", size="small", target_batch=128,
                             device="cuda:0", budget_s=0.3, store=f"{tmp}/t.json",
                             axes={"precision": ["bf16"], "checkpointing": [False, True],
                                   "compile": ["off"], "optimizer_impl": ["foreach", "fused"]})
    entry = outcome.entry
    if not entry:
        raise Failed(f"no winner: {outcome.summary()}")
    over = [c for c in entry["candidates"] if c["peak_bytes"] > outcome.session.budget_bytes]
    if over:
        raise Failed(f"{len(over)} candidates over the budget")
    if "torch.autocast(device, dtype=torch.bfloat16)" not in entry["snippet"]:
        raise Failed("the snippet does not autocast to bf16")
    return (f"winner {entry['best']}: {entry['samples_per_s']:.4g} samples/s, "
            f"{entry['measured']} measured"), {k: entry[k] for k in ("best", "frontier",
                                                                      "within_noise")}
