"""The lab checks of scripts/gpu_check.py: the tile kernel and its Hopper variants (the
compile-only facts against the JIT's), 2:4 sparsity, training, energy, health, overlap,
communication (a killed rank) and the `gpu`-marked tests.

Each check returns (summary, details) or raises Failed; its docstring is its expectation, one
a healthy card meets.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time

import torch
from gpu_checks_device import REPO, Failed, expect_between, matmul_fn

from a800lab.core.precision import unsupported_reason

VARIANTS = (("tile", "pointer"), ("persistent", "pointer"), ("tile", "tma"),
            ("persistent", "tma"))


def _point(m, precision, backend="triton", **tile):
    from a800lab.workloads.tiles.point import tiled_matmul_point

    out = tiled_matmul_point(m, m, m, precision, backend, device="cuda:0", budget_s=0.1, **tile)
    if out.get("outcome", "ok") != "ok":
        raise Failed(f"{m}^3 {precision} {backend} {tile}: {out.get('message')}")
    return out


def check_hopper_tiles() -> tuple[str, dict]:
    """First thing: the Hopper levers. On sm_90 the tile kernel is right against float64 with
    every schedule x loads (tile/persistent x pointer/TMA) at a ragged 1000^3 bf16 and in fp8
    (precise and fast accumulation), and each fp8 mode is compared with cuBLAS run the same way
    (precise vs use_fast_accum=False, fast vs True): both right, the kernel at 0.2-2x cuBLAS's
    rate at 4096^3. Elsewhere TMA configs are refused before launch with the reason."""
    from a800lab.workloads.matmul import MatmulSpec
    from a800lab.workloads.tiles.config import check_config

    capability = torch.cuda.get_device_capability(0)
    details, texts = {"capability": list(capability), "variants": {}}, []
    if capability < (9, 0):
        try:
            check_config(MatmulSpec(4096, 4096, 4096, "bf16", "triton", loads="tma"), "cuda:0")
        except ValueError as exc:
            details["tma_refused"] = str(exc)
            return f"skip: {capability[0]}.{capability[1]} has no TMA; refused: {exc}", details
        raise Failed("loads='tma' was not refused on a card before Hopper")
    for schedule, loads in VARIANTS:
        out = _point(1000, "bf16", block_m=128, block_n=128, block_k=64, num_warps=8,
                     schedule=schedule, loads=loads)
        details["variants"][f"bf16 {schedule} {loads}"] = {
            k: out.get(k) for k in ("rel_error", "tflops", "smem_bytes", "registers", "mma")}
    texts.append(f"bf16 x {len(VARIANTS)} schedule/loads right")
    rates = {}
    for acc in ("precise", "fast"):
        for backend, tile in (("triton", {"block_m": 128, "block_n": 128, "block_k": 128,
                                          "num_warps": 8, "loads": "tma"}), ("torch", {})):
            out = _point(4096, "fp8", backend, fp8_acc=acc, **tile)
            rates[acc, backend] = out["tflops"]
            details["variants"][f"fp8 {acc} {backend}"] = {
                k: out.get(k) for k in ("rel_error", "tflops", "mma", "registers")}
        texts.append(expect_between(f"fp8 {acc}: kernel / cuBLAS TFLOP/s",
                                    rates[acc, "triton"] / rates[acc, "torch"], 0.2, 2.0))
    return "; ".join(texts), details


def check_tiles() -> tuple[str, dict]:
    """The Triton tile kernel is right against float64 at a ragged 1000^3 (masked edges) in
    every precision the card has; a pipeline over the card's shared memory is refused before
    launch with the compiler's reason; the compile-only facts for this card (facts.tile_facts)
    equal what the JIT built at launch (the same kernel hash, so the same specialisation; its
    shared memory; registers and spills as the driver reads them) for two or three configs;
    and a tuned 4096^3 bf16 tile reaches 0.3-1.5x cuBLAS."""
    from a800lab.workloads.matmul import MatmulSpec
    from a800lab.workloads.tiles.config import check_config, device_target
    from a800lab.workloads.tiles.facts import tile_facts
    from a800lab.workloads.tiles.kernel import kernel_call

    details, texts = {"points": {}, "facts_vs_jit": []}, []
    for precision in ("fp32", "tf32", "fp16", "bf16", "fp8"):
        if unsupported_reason(precision, "cuda:0"):
            details["points"][precision] = "unsupported on this card"
            continue
        size = 1008 if precision == "fp8" else 1000  # fp8 needs multiples of 16
        out = _point(size, precision)
        details["points"][precision] = {k: out.get(k) for k in ("rel_error", "tflops",
                                                                "tile_config", "mma")}
        texts.append(f"{precision} ok")
    try:
        check_config(MatmulSpec(4096, 4096, 4096, "fp32", "triton", block_m=128, block_n=128,
                                block_k=128, num_warps=8, num_stages=8), "cuda:0")
    except ValueError as exc:
        details["refused"] = str(exc)
    else:
        raise Failed("a 128x128x128 fp32 pipeline of 8 stages was not refused")
    target = device_target("cuda:0")
    specs = [MatmulSpec(4096, 4096, 4096, "bf16", "triton", block_m=128, block_n=256,
                        block_k=64, num_warps=8, num_stages=3),
             MatmulSpec(1000, 1000, 1000, "fp16", "triton", block_m=64, block_n=64,
                        block_k=32, num_warps=4, num_stages=4)]
    if target.capability >= (9, 0):
        specs.append(MatmulSpec(4096, 4096, 4096, "bf16", "triton", block_m=128, block_n=128,
                                block_k=64, num_warps=8, schedule="persistent", loads="tma"))
    for spec in specs:
        facts = tile_facts(spec, target)
        dtype = torch.bfloat16 if spec.precision == "bf16" else torch.float16
        a = torch.randn(spec.m, spec.k, device="cuda:0", dtype=dtype)
        b = torch.randn(spec.k, spec.n, device="cuda:0", dtype=dtype)
        c = torch.empty(spec.m, spec.n, device="cuda:0", dtype=dtype)
        call = kernel_call(spec, a, b, c, scale=None, num_programs=target.sm_count)
        with torch.cuda.device(0):
            jit = call.kernel[call.grid](*call.args, **call.constexprs, **call.options)
        row = {"spec": spec.tile, "facts": [facts.kernel_hash, facts.smem_bytes,
                                            facts.registers, facts.spill_bytes],
               "jit": [jit.hash, jit.metadata.shared, jit.n_regs, 4 * jit.n_spills]}
        details["facts_vs_jit"].append(row)
        if row["facts"] != row["jit"]:
            raise Failed(f"compile-only facts {row['facts']} != the JIT's {row['jit']} for "
                         f"{spec.tile} (kernel hash, shared B, registers, spill B)")
    texts.append(f"facts = JIT for {len(specs)} configs")
    tuned = _point(4096, "bf16", block_m=128, block_n=256, block_k=64, num_warps=8,
                   num_stages=3)
    cublas = _point(4096, "bf16", "torch")
    details["kernel_vs_cublas_4096_bf16"] = {"triton_tflops": tuned["tflops"],
                                             "cublas_tflops": cublas["tflops"]}
    texts.append(expect_between("tuned kernel / cuBLAS (4096^3 bf16)",
                                tuned["tflops"] / cublas["tflops"], 0.3, 1.5))
    return "; ".join(texts), details


def check_sparsity() -> tuple[str, dict]:
    """2:4 sparse fp16 and bf16 products at 8192^3 (cuSPARSELt, torch's default) are right
    against float64 (the same pruned A as the dense product) and not slower than dense
    (speed-up >= 0.9), timed back to back with measure()'s launch guard: its per-call time is
    0.8-1.3x that of 20 back-to-back calls (the L2 flush no longer hides the host's dispatch).
    The CUTLASS path is reported as untestable where it cannot run (sm_90), with why."""
    from torch.sparse import SparseSemiStructuredTensor

    from a800lab.core.timing import measure
    from a800lab.workloads.sparsity import (
        prune_2to4,
        sparse_point,
        sparsity_unsupported_reason,
    )

    reason = sparsity_unsupported_reason(8192, 8192, "fp16", "cuda:0")
    if reason:
        return f"skip: {reason}", {}
    details, texts = {}, []
    for precision in ("fp16", "bf16"):
        out = sparse_point(8192, 8192, 8192, precision, device="cuda:0", budget_s=0.2)
        details[precision] = {k: v for k, v in out.items() if k != "timing"}
        if out.get("outcome", "ok") != "ok":
            raise Failed(f"{precision}: {out['message']}")
        texts.append(expect_between(f"{precision} sparse speed-up", out["speedup"], 0.9, 10))
    a = torch.sparse.to_sparse_semi_structured(
        prune_2to4(torch.randn(8192, 8192, device="cuda:0")).half())
    b = torch.randn(8192, 8192, device="cuda:0").half()
    per_call = measure(lambda: a @ b, device="cuda:0", budget_s=0.2).median_ms
    start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
    start.record()
    for _ in range(20):
        a @ b
    end.record()
    end.synchronize()
    back_to_back = start.elapsed_time(end) / 20
    details["per_call_over_back_to_back"] = per_call / back_to_back
    texts.append(expect_between("measure() / back-to-back (sparse fp16)", per_call /
                                back_to_back, 0.8, 1.3))
    saved = SparseSemiStructuredTensor._FORCE_CUTLASS
    SparseSemiStructuredTensor._FORCE_CUTLASS = True
    try:
        details["cutlass"] = sparsity_unsupported_reason(8192, 8192, "fp16", "cuda:0") or \
            "can run here"
    finally:
        SparseSemiStructuredTensor._FORCE_CUTLASS = saved
    texts.append(f"CUTLASS path: {details['cutlass'][:80]}")
    return "; ".join(texts), details


def check_training() -> tuple[str, dict]:
    """A small Transformer trains in fp32, tf32, bf16 and fp16 (GradScaler) with a finite
    loss and the memory model's predicted peak within 25% of the measured one; on a
    compute-bound step (the large Transformer, 16 x 512 tokens) bf16 autocast trains at least
    1.5x fp32's samples/s."""
    from a800lab.workloads.training.point import train_point

    details, texts, rates = {"small": {}, "large": {}}, [], {}
    keep = ("loss", "skipped_steps", "predicted_peak_bytes", "step_peak_bytes",
            "prediction_error", "throughput")
    for precision in ("fp32", "tf32", "bf16", "fp16"):
        out = train_point("transformer", "small", batch_size=32, precision=precision,
                          device="cuda:0", train_steps=10, budget_s=0.1)
        details["small"][precision] = {k: out.get(k) for k in keep}
        if out.get("outcome", "ok") != "ok" or not math.isfinite(out["loss"]):
            raise Failed(f"{precision}: {out.get('outcome')}: {out.get('message', out['loss'])}")
        error = out.get("prediction_error")
        if error is None:
            raise Failed(f"{precision}: no memory prediction to judge")
        texts.append(expect_between(f"{precision} memory prediction error", abs(error), 0,
                                    0.25))
    for precision in ("fp32", "bf16"):
        out = train_point("transformer", "large", batch_size=16, precision=precision,
                          device="cuda:0", train_steps=5, budget_s=0.5, predict_memory=False)
        details["large"][precision] = {k: out.get(k) for k in keep}
        if out.get("outcome", "ok") != "ok":
            raise Failed(f"large {precision}: {out.get('outcome')}: {out.get('message')}")
        rates[precision] = out["throughput"]
    texts.append(expect_between("bf16 / fp32 samples/s (large Transformer)",
                                rates["bf16"] / rates["fp32"], 1.5, float("inf")))
    return "; ".join(texts), details


def check_energy() -> tuple[str, dict]:
    """The energy meter reads the GPU's energy counter around 3 s of bf16 matmuls, at a mean
    power between 30 W and 1200 W, and agrees with power x time within a factor 0.5-1.5."""
    from a800lab.workloads.energy import EnergyMeter

    fn, t0 = matmul_fn(8192, torch.bfloat16), time.perf_counter()
    with EnergyMeter("cuda:0", interval_s=0.05) as meter:
        while time.perf_counter() - t0 < 3.0:
            fn()
        torch.cuda.synchronize()
    reading = meter.reading()
    details = {"energy_j": reading.energy_j, "source": reading.source, "note": reading.note,
               "power_w": reading.power_w, "duration_s": reading.duration_s,
               "telemetry": reading.telemetry}
    if reading.source != "energy_counter":
        raise Failed(f"energy from {reading.source}, not the counter: {reading.note}")
    texts = [expect_between("mean power W", reading.power_w, 30, 1200)]
    sampled = (reading.telemetry or {}).get("power_w", {}).get("mean")
    if not sampled:
        raise Failed("no sampled power to compare the counter with")
    texts.append(expect_between("sampled power / counter power", sampled / reading.power_w,
                                0.5, 1.5))
    return "; ".join(texts) + f" ({reading.energy_j:.0f} J)", details


def check_health() -> tuple[str, dict]:
    """ECC, remapped rows and retired pages read without error (read-only), and a short
    stress run leaves no card flagged below its siblings or its datasheet."""
    from a800lab.workloads.health import health_report
    from a800lab.workloads.stress import stress_report

    health = health_report()
    stress = stress_report()
    details = {"health": health, "stress": stress.to_dict()}
    if stress.flags:
        raise Failed("stress flagged: " + "; ".join(flag.message for flag in stress.flags))
    return (f"health read for {len(health.get('gpus', []))} GPU(s); {len(stress.cards)} "
            "card(s) stressed, none flagged"), details


def check_overlap() -> tuple[str, dict]:
    """Copy and compute on two streams overlap (their time under 0.9x of both in series),
    and the input pipeline with pinned memory and non-blocking copies runs on the GPU with an
    idle fraction in [0, 1]."""
    from a800lab.workloads.pipeline import pipeline_point
    from a800lab.workloads.streams import stream_overlap

    streams = stream_overlap(device="cuda:0")
    pipe = pipeline_point(num_workers=2, pin_memory=True, non_blocking=True, device="cuda:0",
                          budget_s=0.5)
    details = {"streams": {k: v for k, v in streams.items() if k != "timing"},
               "pipeline": {k: v for k, v in pipe.items() if k not in ("timing", "timeline")}}
    texts = [expect_between("two streams / serial", streams["overlapped_ms"] /
                            streams["serial_ms"], 0, 0.9)]
    texts.append(expect_between("pipeline idle fraction", pipe["idle_fraction"], 0, 1))
    return "; ".join(texts), details


def check_comm() -> tuple[str, dict]:
    """A rank killed mid-run ends its group within 10 s with an error naming it, and no rank
    process is left (NCCL ranks on two or more GPUs, else 2 gloo ranks: the launcher is the
    same); with two or more GPUs the NCCL collectives are also right and report busbw."""
    from a800lab.workloads.comm.launcher import RankGroup, RankGroupError, process_state
    from a800lab.workloads.comm.runs import WORKER, run_comm

    count = torch.cuda.device_count()
    backend = "nccl" if count >= 2 else "gloo"
    world = count if count >= 2 else 2
    details, texts = {"backend": backend, "world_size": world}, []
    point = {"job": "point", "workload": "comm", "settings": {"budget_s": 0.02},
             "params": {"op": "all_reduce", "size_bytes": 1 << 20, "world_size": world,
                        "backend": backend}}
    group = RankGroup(WORKER, world_size=world, env={"A800LAB_BACKEND": backend}, timeout_s=60)
    group.start()
    if json.loads(group.request(point))["outcome"] != "ok":
        group.close()
        raise Failed(f"an all_reduce on {world} {backend} ranks failed before the kill")
    os.kill(group.pids[-1], signal.SIGKILL)
    started = time.perf_counter()
    try:
        group.request(point)
    except RankGroupError as exc:
        details["error"] = str(exc)
    else:
        raise Failed("the group went on after a rank was killed")
    noticed_s = time.perf_counter() - started
    left = [pid for pid in group.pids if process_state(pid) not in ("gone", "exited (zombie)")]
    if left or "killed by signal SIGKILL" not in details["error"]:
        raise Failed(f"after the kill: {details['error']}; processes left: {left}")
    texts.append(expect_between(f"killed {backend} rank noticed after s", noticed_s, 0, 10))
    if count < 2:
        texts.append(f"NCCL collectives not run: they need 2 or more GPUs, this machine has "
                     f"{count}")
        return "; ".join(texts), details
    result = run_comm("comm", {"op": ["all_reduce", "all_gather", "reduce_scatter",
                                      "broadcast"], "size_bytes": [1 << 20, 1 << 28]},
                      world_size=count, backend="nccl", timeout_s=120)
    bad = [r for r in result.records if r.outcome != "ok"]
    details["records"] = [{**r.params, "outcome": r.outcome, "busbw_gbs": r.throughput,
                           "message": r.message} for r in result.records]
    if bad:
        raise Failed(f"{len(bad)} collective points failed: {bad[0].message}")
    best = max(r.throughput for r in result.records)
    texts.append(f"{len(result.records)} NCCL points ok on {count} GPUs; best busbw "
                 f"{best:.0f} GB/s")
    return "; ".join(texts), details


def check_gpu_tests(timeout_s: float = 150.0) -> tuple[str, dict]:
    """The test suite's `gpu`-marked tests pass on this card (collected without ipywidgets:
    the panels' modules are left out), within the time left."""
    command = [sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider",
               "-p", "no:nbval", str(REPO / "tests")]
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s,
                              env=env, cwd=REPO)
    except subprocess.TimeoutExpired as exc:
        raise Failed(f"the gpu tests ran past {timeout_s:.0f} s: "
                     f"{(exc.stdout or b'')[-400:]!r}") from None
    tail = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else proc.stderr[-300:]
    details = {"returncode": proc.returncode, "tail": proc.stdout[-4000:]}
    if proc.returncode != 0:
        raise Failed(f"pytest -m gpu exited {proc.returncode}: {tail}")
    return f"pytest -m gpu: {tail}", details
