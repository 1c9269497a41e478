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
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch
from gpu_checks_device import REPO, Failed, data_file, expect_between, matmul_fn

from a800lab.core.precision import unsupported_reason

VARIANTS = (("tile", "pointer"), ("persistent", "pointer"), ("tile", "tma"),
            ("persistent", "tma"))
PRECISIONS = ("fp32", "tf32", "fp16", "bf16", "fp8")
TUNED = dict(block_m=128, block_n=256, block_k=64, num_warps=8, num_stages=3)
HOPPER = dict(block_m=128, block_n=128, block_k=64, num_warps=8)
FP8_TMA = dict(block_m=128, block_n=128, block_k=128, num_warps=8, loads="tma")


def _spec(size, precision, backend="triton", **tile):
    from a800lab.workloads.matmul import MatmulSpec

    return MatmulSpec(size, size, size, precision, backend, **tile)


def tile_launches(capability: tuple[int, int]) -> dict[str, list]:
    """Every Triton tile launch the checks make on a card of `capability`, by what they are
    for; the rehearsal (scripts/gpu_rehearsal.py) compiles each for sm_80 and sm_90 without a
    GPU and compares the compile-only facts with the JIT's build."""
    has = [p for p in PRECISIONS if not unsupported_reason(p, "cuda", capability)]
    hopper = tuple(capability) >= (9, 0)
    return {
        "device": [_spec(512, "fp16")],
        "tiles: right in every precision": [_spec(1008 if p == "fp8" else 1000, p)
                                            for p in has],
        "tiles: facts == JIT (the first also against cuBLAS)": [
            _spec(4096, "bf16", **TUNED),
            _spec(1000, "fp16", block_m=64, block_n=64, block_k=32, num_warps=4, num_stages=4)]
        + ([_spec(4096, "bf16", **HOPPER, schedule="persistent", loads="tma")] if hopper
           else []),
        "hopper_tiles": [_spec(1000, "bf16", **HOPPER, schedule=schedule, loads=loads)
                         for schedule, loads in VARIANTS]
        + [_spec(4096, "fp8", **FP8_TMA, fp8_acc=acc) for acc in ("precise", "fast")]
        if hopper else []}


def _point(spec):
    from a800lab.workloads.tiles.point import tiled_matmul_point

    tile = {k: getattr(spec, k) for k in ("block_m", "block_n", "block_k", "group_m",
                                          "num_warps", "num_stages", "schedule", "loads",
                                          "fp8_acc")} if spec.backend == "triton" else \
        {"fp8_acc": spec.fp8_acc}
    out = tiled_matmul_point(spec.m, spec.n, spec.k, spec.precision, spec.backend,
                             device="cuda:0", budget_s=0.1, **tile)
    if out.get("outcome", "ok") != "ok":
        raise Failed(f"{spec.m}^3 {spec.precision} {spec.backend} {spec.tile}: "
                     f"{out.get('message')}")
    return out


def check_hopper_tiles() -> tuple[str, dict]:
    """The Hopper levers. On sm_90 the tile kernel is right against float64 with every
    schedule x loads (tile/persistent x pointer/TMA) at a ragged 1000^3 bf16 and in fp8
    (precise and fast accumulation), and each fp8 mode is compared with cuBLAS run the same way
    (precise vs use_fast_accum=False, fast vs True): both right, the kernel at 0.2-2x cuBLAS's
    rate at 4096^3. Elsewhere TMA configs are refused before launch with the reason."""
    from a800lab.workloads.tiles.config import check_config

    capability = torch.cuda.get_device_capability(0)
    details, texts = {"capability": list(capability), "variants": {}}, []
    if capability < (9, 0):
        try:
            check_config(_spec(4096, "bf16", loads="tma"), "cuda:0")
        except ValueError as exc:
            details["tma_refused"] = str(exc)
            return f"skip: {capability[0]}.{capability[1]} has no TMA; refused: {exc}", details
        raise Failed("loads='tma' was not refused on a card before Hopper")
    rates = {}
    for spec in tile_launches(capability)["hopper_tiles"]:
        out = _point(spec)
        details["variants"][f"{spec.precision} {spec.tile}"] = {
            k: out.get(k) for k in ("rel_error", "tflops", "smem_bytes", "registers", "mma")}
        if spec.precision == "fp8":
            cublas = _point(_spec(4096, "fp8", "torch", fp8_acc=spec.fp8_acc))
            details["variants"][f"fp8 {spec.fp8_acc} cuBLAS"] = {
                k: cublas.get(k) for k in ("rel_error", "tflops")}
            rates[spec.fp8_acc] = out["tflops"] / cublas["tflops"]
    texts.append(f"bf16 x {len(VARIANTS)} schedule/loads right")
    for acc, ratio in rates.items():
        texts.append(expect_between(f"fp8 {acc}: kernel / cuBLAS TFLOP/s", ratio, 0.2, 2.0))
    return "; ".join(texts), details


def check_tiles() -> tuple[str, dict]:
    """The Triton tile kernel is right against float64 at a ragged 1000^3 (masked edges) in
    every precision the card has; a pipeline over the card's shared memory is refused before
    launch with the compiler's reason; the compile-only facts for this card (facts.tile_facts)
    equal what the JIT built at launch (the same kernel hash, so the same specialisation; its
    shared memory; registers and local (spill) bytes as the driver reads them) for two or three
    configs; and a tuned 4096^3 bf16 tile reaches 0.3-1.5x cuBLAS."""
    from a800lab.workloads.tiles.config import check_config, device_target
    from a800lab.workloads.tiles.facts import tile_facts
    from a800lab.workloads.tiles.kernel import kernel_call

    target = device_target("cuda:0")
    launches = tile_launches(target.capability)
    details, texts = {"points": {}, "facts_vs_jit": []}, []
    for spec in launches["tiles: right in every precision"]:
        out = _point(spec)
        details["points"][spec.precision] = {k: out.get(k) for k in (
            "rel_error", "tflops", "tile_config", "mma")}
        texts.append(f"{spec.precision} ok")
    try:  # over every card's shared memory, and compiled in under a second
        check_config(_spec(4096, "fp16", block_m=128, block_n=256, block_k=64, num_warps=8,
                           num_stages=6), "cuda:0")
    except ValueError as exc:
        details["refused"] = str(exc)
    else:
        raise Failed("a 128x256x64 fp16 pipeline of 6 stages was not refused")
    compared = launches["tiles: facts == JIT (the first also against cuBLAS)"]
    for spec in compared:
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
                         f"{spec.tile} (kernel hash, shared B, registers, local B)")
    texts.append(f"facts = JIT for {len(details['facts_vs_jit'])} configs")
    tuned = _point(compared[0])
    cublas = _point(_spec(4096, "bf16", "torch"))
    details["kernel_vs_cublas_4096_bf16"] = {"triton_tflops": tuned["tflops"],
                                             "cublas_tflops": cublas["tflops"]}
    texts.append(expect_between("tuned kernel / cuBLAS (4096^3 bf16)",
                                tuned["tflops"] / cublas["tflops"], 0.3, 1.5))
    return "; ".join(texts), details


def check_sparsity() -> tuple[str, dict]:
    """2:4 sparse fp16 and bf16 products at 8192^3 (cuSPARSELt, torch's default) are right
    against float64 (the same pruned A as the dense product); their speed-up over dense is
    recorded, not judged (pytorch/pytorch#153825 reports torch's 2:4 path slower than dense on
    H100; cuSPARSELt's own sample ran 1.2x dense at 8192^3 there, NVIDIA/CUDALibrarySamples#203:
    no figure says what to expect); timed with measure()'s launch guard, whose per-call
    time is 0.8-1.3x that of 20 back-to-back calls (the L2 flush no longer hides the host's
    dispatch). The CUTLASS path is reported as untestable where it cannot run, with why."""
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
        texts.append(f"{precision} right; 2:4 speed-up over dense {out['speedup']:.3g}x "
                     f"({'faster' if out['speedup'] > 1 else 'not faster'} than dense here)")
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
    """The test suite's `gpu`-marked tests pass on this card, within the time left (without
    ipywidgets, tests that open a panel are left out or skipped with that reason)."""
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


def check_record() -> tuple[str, dict]:
    """A cuBLAS matmul sweep (1024-8192 cubed x every precision the card has) recorded as JSON
    Lines for the chapters' overlays, to data/matmul-<device>-<date>.jsonl (a copy in $OUT):
    every point right against float64 and timed, each record carrying its device and
    environment."""
    from a800lab.core.sweep import run_sweep
    from a800lab.workloads.matmul import matmul_point

    path = data_file("matmul", torch.cuda.get_device_name(0), ".jsonl")
    path.unlink(missing_ok=True)  # one sitting per file: never resumed into an older one
    precisions = [p for p in PRECISIONS if not unsupported_reason(p, "cuda:0")]

    def point(size, precision):
        return matmul_point(size, size, size, precision, device="cuda:0", budget_s=0.15)

    result = run_sweep(point, {"size": [1024, 2048, 4096, 8192], "precision": precisions},
                       workload="matmul", out=path, device="cuda:0", sample_telemetry=True,
                       label=torch.cuda.get_device_name(0))
    if os.environ.get("OUT"):
        shutil.copy(path, Path(os.environ["OUT"]) / path.name)
    bad = [r for r in result.records if r.outcome != "ok"]
    details = {"path": str(path.relative_to(REPO)), "points": len(result.records),
               "tflops": {f"{r.params['size']} {r.params['precision']}": r.throughput
                          for r in result.records}}
    if bad:
        raise Failed(f"{len(bad)} of {len(result.records)} points not ok: {bad[0].outcome}: "
                     f"{bad[0].message[:200]}")
    return f"{len(result.records)} points recorded to {details['path']}", details
