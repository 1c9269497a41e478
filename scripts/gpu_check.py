"""Run every GPU path of a800lab briefly on a real device, judge it, and write one JSON report.

    python scripts/gpu_check.py [--out data/gpu_check-<device>.json] [--only timing peak ...]
    python scripts/gpu_check.py --record data/matmul-<device>.jsonl   # also a recorded sweep
    python scripts/gpu_check.py --report data/report-<device>/        # also `a800lab report`

Each check states its expectation, measures, and passes or fails; one line per check is printed
("PASS timing: measure()/do_bench 0.98, ..."), and the exit status is 1 when any expectation
fails or there is no GPU. Checks are independent: one failing or crashing does not stop the
others, and the report is rewritten after each, so a crash keeps what was measured. About two
minutes on one GPU. The report carries the environment it came from; commit it under data/.

Checks: doctor (report builds inside matmul_precision, CUDA <-> NVML mapping by UUID), timing
(measure() vs triton's do_bench and do_bench_cudagraph), tf32 (TF32 engages and the settings are
restored), peak (measured / datasheet), topology (vs `nvidia-smi topo -m`), sampler (sample
count, power source), memory (a point's peak is its operands), oom (memory really freed after an
out-of-memory point), device (the sweep's device reaches the workload), tiles (the Triton tile
kernel right in every precision, oversized pipelines refused), sparsity (2:4 products right),
training (precisions train, memory model), energy (the counter), health (read-only, stress),
overlap (streams, pipeline), comm (NCCL collectives, on two or more GPUs).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from a800lab.core.backends import HAS_CUDA, HAS_TRITON, why_unavailable  # noqa: E402
from a800lab.core.environment import environment, fingerprint  # noqa: E402

MIB = 2**20


class Failed(AssertionError):
    """An expectation that did not hold (the check's own measurements are kept)."""


def expect_between(name: str, value: float, low: float, high: float) -> str:
    """"name 0.98 (expect 0.9-1.1)"; raises Failed when value is outside [low, high]."""
    text = f"{name} {value:.3g} (expect {low:g}-{high:g})"
    if not low <= value <= high:
        raise Failed(text)
    return text


# ---- checks: each returns (summary, details) or raises Failed ------------------------------------
def check_doctor() -> tuple[str, dict]:
    """Doctor's report builds, also inside matmul_precision fp32/tf32 (torch's new TF32 API
    set, which made the legacy getters raise); cuda:0 maps to the NVML GPU with its UUID."""
    from a800lab.core.doctor import build_report
    from a800lab.core.gpu_map import nvml_index
    from a800lab.core.nvml import device_handle, nvml_call
    from a800lab.core.precision import matmul_precision

    reports = {"plain": build_report()}
    for name in ("fp32", "tf32"):
        with matmul_precision(name):
            reports[f"inside matmul_precision({name})"] = build_report()
    if not reports["plain"]["gpu_found"]:
        raise Failed(f"doctor found no GPU: {reports['plain']['no_gpu_reason']}")
    index = nvml_index("cuda:0")
    if not isinstance(index, int):
        raise Failed(f"cuda:0 has no NVML index: {index}")
    nvml_uuid = str(nvml_call("nvmlDeviceGetUUID", device_handle(index)))
    torch_uuid = str(torch.cuda.get_device_properties(0).uuid)
    if nvml_uuid.lower().removeprefix("gpu-") != torch_uuid.lower().removeprefix("gpu-"):
        raise Failed(f"cuda:0 -> NVML {index} whose UUID {nvml_uuid} is not torch's {torch_uuid}")
    details = {"report": reports["plain"], "nvml_index_of_cuda0": index,
               "advice": reports["plain"]["advice"],
               "tf32_settings_seen": {k: r["system"] for k, r in reports.items()}}
    return (f"{len(reports['plain']['gpus'])} GPU(s); report builds inside "
            f"matmul_precision fp32/tf32; cuda:0 -> NVML {index} by UUID"), details


def _matmul_fn(size: int, dtype: torch.dtype):
    a = torch.randn(size, size, device="cuda", dtype=dtype)
    b = torch.randn(size, size, device="cuda", dtype=dtype)
    return lambda: torch.matmul(a, b)


def check_timing() -> tuple[str, dict]:
    """measure() agrees with triton's do_bench on a 4096^3 bf16 matmul (both flush L2) and with
    do_bench_cudagraph on a tiny write-only kernel (launch overhead must not count)."""
    if not HAS_TRITON:
        raise Failed(f"triton is needed for this check: {why_unavailable('triton')}")
    import triton.testing

    from a800lab.core.timing import measure

    big = _matmul_fn(4096, torch.bfloat16)
    tiny_tensor = torch.empty(1024, device="cuda")

    def tiny():
        return tiny_tensor.fill_(1.0)  # writes only: the L2 flush cannot change its time

    rows = {"matmul_4096_bf16": [], "tiny_fill": []}
    for _ in range(3):  # interleaved rounds: drift hits both timers alike
        rows["matmul_4096_bf16"].append(
            (measure(big, device="cuda", budget_s=0.3).median_ms,
             triton.testing.do_bench(big, rep=300, return_mode="median")))
        rows["tiny_fill"].append(
            (measure(tiny, device="cuda", budget_s=0.3).median_ms,
             triton.testing.do_bench_cudagraph(tiny, rep=100, return_mode="median")))
    ratios = {name: statistics.median(ours / ref for ours, ref in pairs)
              for name, pairs in rows.items()}
    details = {"median_ms_pairs_measure_vs_reference": rows, "ratios": ratios}
    summary = "; ".join([
        expect_between("measure()/do_bench (4096^3 bf16)", ratios["matmul_4096_bf16"], 0.9, 1.1),
        expect_between("measure()/do_bench_cudagraph (tiny fill)", ratios["tiny_fill"], 0.9,
                       1.1)])
    return summary, details


def _tf32_settings() -> dict:
    from a800lab.core.precision import tf32_settings

    return tf32_settings()


def check_tf32() -> tuple[str, dict]:
    """TF32 engages (its error vs float64 clearly above fp32's) and the settings are restored."""
    from a800lab.workloads.matmul import matmul_point

    before = _tf32_settings()
    points = {p: matmul_point(2048, 2048, 2048, p, device="cuda", budget_s=0.1)
              for p in ("fp32", "tf32")}
    after = _tf32_settings()
    errors = {p: out["rel_error"] for p, out in points.items()}
    details = {"rel_error": errors, "tflops": {p: out.get("tflops") for p, out in points.items()},
               "settings_before": before, "settings_after": after}
    if after != before:
        raise Failed(f"TF32 settings changed: {before} -> {after}")
    ratio = errors["tf32"] / max(errors["fp32"], 1e-300)
    summary = expect_between("tf32/fp32 relative error", ratio, 10, float("inf"))
    return summary + f"; settings restored ({before})", details


def check_peak() -> tuple[str, dict]:
    """Every measured peak (matmul per precision, copy bandwidth) is 50-105% of the datasheet."""
    from a800lab.workloads.peak import measure_peak

    report = measure_peak(device="cuda")
    details = report.to_dict()
    verdicts, failures = [], []
    for entry in report.entries:
        if entry.outcome == "unsupported":
            verdicts.append(f"{entry.precision} unsupported")
        elif entry.outcome != "ok":
            failures.append(f"{entry.precision} {entry.outcome}: {entry.message}")
        elif entry.ratio is None:
            verdicts.append(f"{entry.precision} {entry.tflops:.1f} TFLOP/s (no datasheet)")
        else:
            try:
                verdicts.append(expect_between(f"{entry.precision}", entry.ratio, 0.5, 1.05))
            except Failed as exc:
                failures.append(str(exc))
    if report.mem_bw_ratio is not None:
        try:
            verdicts.append(expect_between("copy bandwidth", report.mem_bw_ratio, 0.5, 1.05))
        except Failed as exc:
            failures.append(str(exc))
    if failures:
        raise Failed("; ".join(failures + verdicts))
    return f"{report.spec_name or report.device_name}: " + "; ".join(verdicts), details


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def parse_topo_matrix(text: str) -> tuple[list[str], list[list[str]]]:
    """GPU labels and the GPU-to-GPU cells of `nvidia-smi topo -m` output (tab separated;
    other columns such as NICs, CPU/NUMA affinity are dropped)."""
    lines = [_ANSI.sub("", line).rstrip() for line in text.splitlines()]
    header = next((line for line in lines if re.search(r"\tGPU\d+", line)), None)
    if header is None:
        raise ValueError("no GPU header line in the nvidia-smi topo -m output")
    labels = [c.strip() for c in header.split("\t") if re.fullmatch(r"GPU\d+", c.strip())]
    matrix = []
    for line in lines:
        cells = [c.strip() for c in line.split("\t")]
        if cells and re.fullmatch(r"GPU\d+", cells[0]):
            matrix.append(cells[1:1 + len(labels)])
    return labels, matrix


def check_topology() -> tuple[str, dict]:
    """The lab's topology matrix equals `nvidia-smi topo -m`'s GPU-to-GPU cells."""
    from a800lab.core.device import discover_gpus, topology

    ours = topology(discover_gpus()).to_dict()
    if shutil.which("nvidia-smi") is None:
        return "skip: no nvidia-smi on this machine", {"ours": ours}
    text = subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True, text=True,
                          timeout=60).stdout
    labels, matrix = parse_topo_matrix(text)
    details = {"ours": ours, "nvidia_smi": {"labels": labels, "matrix": matrix, "raw": text}}
    if labels != list(ours["labels"]) or matrix != [list(row) for row in ours["matrix"]]:
        raise Failed(f"topology differs: ours {ours['matrix']} vs nvidia-smi {matrix}")
    return f"{len(labels)}x{len(labels)} matrix equals nvidia-smi topo -m", details


def check_sampler() -> tuple[str, dict]:
    """The sampler on cuda:0 takes about duration/interval samples (+ first and last) while a
    bf16 matmul loop runs, reads the GPU busy, and says where its power reading comes from."""
    from a800lab.core.telemetry import TelemetrySampler

    fn, interval_s, calls = _matmul_fn(8192, torch.bfloat16), 0.05, 0
    t0 = time.perf_counter()
    with TelemetrySampler(cuda_device="cuda:0", interval_s=interval_s) as sampler:
        while time.perf_counter() - t0 < 4.0:
            for _ in range(20):
                fn()
            torch.cuda.synchronize()
            calls += 20
    summary = sampler.summary()
    samples = sampler.samples
    expected = summary["duration_s"] / interval_s + 2
    details = {"summary": summary, "expected_samples": expected, "matmul_calls": calls,
               "tflops": 2 * 8192**3 * calls / summary["duration_s"] / 1e12,
               "first_samples": samples[:3]}
    texts = [expect_between("samples / expected", len(samples) / expected, 0.75, 1.1)]
    util = summary["gpu_util_pct"]["mean"]
    if util is not None:
        texts.append(expect_between("mean GPU util %", util, 50, 100))
    texts.append(f"power source {samples[-1].get('power_source', 'unstated')}")
    return "; ".join(texts), details


def check_memory() -> tuple[str, dict]:
    """A matmul point's recorded peak is its own operands (A, B, C), not the harness's: no
    256 MiB L2-flush buffer, no float64 reference."""
    from a800lab.core.sweep import run_sweep
    from a800lab.workloads.matmul import matmul_point

    _matmul_fn(256, torch.float32)()  # cuBLAS makes its workspace at its first call: not here
    res = run_sweep(matmul_point, {"m": [1024, 4096]}, fixed={"n": 1024, "k": 1024,
                                                              "precision": "fp32"},
                    device="cuda:0")
    rows, texts = [], []
    for record in res.records:
        if record.outcome != "ok":
            raise Failed(f"{record.params}: {record.outcome}: {record.message}")
        peak, operands = record.memory["peak_allocated_bytes"], record.metrics["operand_bytes"]
        rows.append({"params": record.params, "peak_allocated_bytes": peak,
                     "operand_bytes": operands, "memory": record.memory})
        texts.append(expect_between(f"m={record.params['m']} (peak - operands) MiB",
                                    (peak - operands) / MIB, -0.5, 4))
    return "; ".join(texts), {"points": rows}


def check_oom() -> tuple[str, dict]:
    """A point holding ~60% of free memory that asks for ~60% more is an "oom" record; after it
    memory_allocated is back where it was, the cache is released, and 60% allocates again."""
    from a800lab.core.sweep import run_sweep

    torch.cuda.empty_cache()
    free_before, _ = torch.cuda.mem_get_info(0)
    chunk = int(0.6 * free_before)
    allocated_before = torch.cuda.memory_allocated(0)

    def hog(step):
        held = torch.empty(chunk, dtype=torch.uint8, device="cuda")
        more = torch.empty(chunk, dtype=torch.uint8, device="cuda")
        return {"throughput": float(held.numel() + more.numel())}

    res = run_sweep(hog, {"step": [1]}, device="cuda:0")
    free_after, _ = torch.cuda.mem_get_info(0)
    details = {"chunk_bytes": chunk, "outcome": res.records[0].outcome,
               "message": res.records[0].message[:300],
               "allocated_before": allocated_before,
               "allocated_after": torch.cuda.memory_allocated(0),
               "free_before": free_before, "free_after": free_after}
    if res.records[0].outcome != "oom":
        raise Failed(f"expected an oom record, got {res.records[0].outcome}")
    if details["allocated_after"] != allocated_before:
        raise Failed(f"memory_allocated {allocated_before} -> {details['allocated_after']}")
    again = torch.empty(chunk, dtype=torch.uint8, device="cuda")
    del again
    text = expect_between("free memory after / before", free_after / free_before, 0.98, 1.02)
    return f"oom recorded; allocated back to {allocated_before} B; {text}; 60% allocates", details


def check_device() -> tuple[str, dict]:
    """The sweep's device reaches the workload: as an argument, or as torch's current device."""
    from a800lab.core.sweep import run_sweep

    seen = {}

    def takes_device(m, device="auto"):
        seen["argument"] = device
        return {"throughput": 1.0}

    def allocates(m):
        seen["current"] = str(torch.empty(1, device="cuda").device)
        return {"throughput": 1.0}

    last = torch.cuda.device_count() - 1
    run_sweep(takes_device, {"m": [1]}, device=f"cuda:{last}")
    run_sweep(allocates, {"m": [1]}, device=f"cuda:{last}")
    if seen != {"argument": f"cuda:{last}", "current": f"cuda:{last}"}:
        raise Failed(f"workloads saw {seen}, the sweep ran on cuda:{last}")
    return f"cuda:{last} reached both workloads", {"seen": seen}


def check_tiles() -> tuple[str, dict]:
    """The Triton tile kernel is right against float64 at a ragged shape (1000 x 1000 x 1000,
    masked edges) in every precision the card has, and a pipeline over the card's shared
    memory is refused before launch; the tuned 2048^3 bf16 tile is reported next to cuBLAS."""
    from a800lab.core.precision import unsupported_reason
    from a800lab.workloads.matmul import MatmulSpec
    from a800lab.workloads.tiles.config import check_config
    from a800lab.workloads.tiles.point import tiled_matmul_point

    details, texts = {"points": {}}, []
    for precision in ("fp32", "tf32", "fp16", "bf16", "fp8"):
        if unsupported_reason(precision, "cuda:0"):
            details["points"][precision] = "unsupported on this card"
            continue
        size = 1008 if precision == "fp8" else 1000  # fp8 needs multiples of 16
        out = tiled_matmul_point(size, size, size, precision, "triton", device="cuda:0",
                                 budget_s=0.05)  # the default tile fits every card's smem
        details["points"][precision] = {k: out.get(k) for k in (
            "outcome", "rel_error", "tflops", "tile_config", "message")}
        if out.get("outcome", "ok") != "ok":
            raise Failed(f"{precision}: {out.get('message')}")
        texts.append(f"{precision} ok (error {out['rel_error']:.1e})")
    try:
        check_config(MatmulSpec(4096, 4096, 4096, "fp32", "triton", block_m=128, block_n=128,
                                block_k=128, num_warps=8, num_stages=8), "cuda:0")  # 1 MiB
    except ValueError as exc:
        details["refused"] = str(exc)
    else:
        raise Failed("a 128x128x128 fp32 pipeline of 8 stages (1 MiB) was not refused")
    tuned = tiled_matmul_point(2048, 2048, 2048, "bf16", "triton", block_m=128, block_n=128,
                               block_k=64, num_warps=8, num_stages=3, device="cuda:0")
    cublas = tiled_matmul_point(2048, 2048, 2048, "bf16", "torch", device="cuda:0")
    details["kernel_vs_cublas_2048_bf16"] = {"triton_tflops": tuned["tflops"],
                                             "cublas_tflops": cublas["tflops"]}
    return ("; ".join(texts) + f"; oversized pipeline refused; 2048^3 bf16 128x128x64: "
            f"{tuned['tflops']:.0f} vs cuBLAS {cublas['tflops']:.0f} TFLOP/s"), details


def check_sparsity() -> tuple[str, dict]:
    """2:4 sparse fp16 and bf16 products at 4096^3 are right against float64 (the same pruned
    A as the dense product); their speed-up over dense is reported, not judged."""
    from a800lab.workloads.sparsity import sparse_point, sparsity_unsupported_reason

    reason = sparsity_unsupported_reason(4096, 4096, "fp16", "cuda:0")
    if reason:
        return f"skip: {reason}", {}
    details, texts = {}, []
    for precision in ("fp16", "bf16"):
        out = sparse_point(4096, 4096, 4096, precision, device="cuda:0", budget_s=0.2)
        details[precision] = {k: v for k, v in out.items() if k != "timing"}
        if out.get("outcome", "ok") != "ok":
            raise Failed(f"{precision}: {out['message']}")
        texts.append(f"{precision} speed-up {out['speedup']:.2f}x ({out['backend']})")
    return "; ".join(texts), details


def check_training() -> tuple[str, dict]:
    """A small Transformer trains in fp32, tf32, bf16 and fp16 (GradScaler) with a finite
    loss; the memory model's predicted peak is within 25% of the measured one; bf16 is faster
    than fp32."""
    from a800lab.workloads.training.point import train_point

    details, texts, rates = {}, [], {}
    for precision in ("fp32", "tf32", "bf16", "fp16"):
        out = train_point("transformer", "small", batch_size=32, precision=precision,
                          device="cuda:0", train_steps=20, budget_s=0.2)
        keep = ("loss", "eval_loss", "skipped_steps", "scale", "predicted_peak_bytes",
                "step_peak_bytes", "prediction_error", "throughput")
        details[precision] = {k: out.get(k) for k in keep}
        if out.get("outcome", "ok") != "ok" or not math.isfinite(out["loss"]):
            raise Failed(f"{precision}: {out.get('outcome')}: {out.get('message', out['loss'])}")
        error = out.get("prediction_error")
        if error is not None:
            texts.append(expect_between(f"{precision} memory prediction error", abs(error), 0,
                                        0.25))
        rates[precision] = out["throughput"]
    texts.append(expect_between("bf16 / fp32 samples/s", rates["bf16"] / rates["fp32"], 1.0,
                                float("inf")))
    return "; ".join(texts), details


def check_energy() -> tuple[str, dict]:
    """The energy meter reads the GPU's energy counter around 3 s of bf16 matmuls, at a mean
    power between 30 W and 1200 W, and agrees with power x time within a factor 0.5-1.5."""
    from a800lab.workloads.energy import EnergyMeter

    fn, t0 = _matmul_fn(8192, torch.bfloat16), time.perf_counter()
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
    if sampled:
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
    """NCCL collectives on every GPU (two or more: ranks cannot share one) are right and
    report busbw; a rank killed mid-run ends the group with a clear error and no process
    left."""
    count = torch.cuda.device_count()
    if count < 2:
        return f"skip: NCCL collectives need 2 or more GPUs, this machine has {count}", {}
    from a800lab.workloads.comm.runs import run_comm

    result = run_comm("comm", {"op": ["all_reduce", "all_gather", "reduce_scatter",
                                      "broadcast"], "size_bytes": [1 << 20, 1 << 28]},
                      world_size=count, backend="nccl", timeout_s=120)
    bad = [r for r in result.records if r.outcome != "ok"]
    details = {"records": [{**r.params, "outcome": r.outcome, "busbw_gbs": r.throughput,
                            "message": r.message} for r in result.records]}
    if bad:
        raise Failed(f"{len(bad)} collective points failed: {bad[0].message}")
    best = max(r.throughput for r in result.records)
    return f"{len(result.records)} points ok on {count} GPUs; best busbw {best:.0f} GB/s", details


CHECKS: dict[str, Callable[[], tuple[str, dict]]] = {
    "doctor": check_doctor, "timing": check_timing, "tf32": check_tf32, "peak": check_peak,
    "topology": check_topology, "sampler": check_sampler, "memory": check_memory,
    "oom": check_oom, "device": check_device, "tiles": check_tiles, "sparsity": check_sparsity,
    "training": check_training, "energy": check_energy, "health": check_health,
    "overlap": check_overlap, "comm": check_comm,
}


def run_check(check: Callable[[], tuple[str, dict]]) -> dict:
    """{"status": pass | fail | skip | error, "expect", "summary", "details", "duration_s"}."""
    t0 = time.perf_counter()
    result = {"expect": (check.__doc__ or "").strip()}
    try:
        summary, details = check()
        status = "skip" if summary.startswith("skip:") else "pass"
        result.update(status=status, summary=summary, details=details)
    except Failed as exc:
        result.update(status="fail", summary=str(exc))
    except Exception as exc:  # a crash is a failed expectation too, with its traceback
        result.update(status="error", summary=f"{type(exc).__name__}: {exc}",
                      traceback=traceback.format_exc())
    result["duration_s"] = round(time.perf_counter() - t0, 2)
    return result


def record_sweep(path: Path) -> int:
    """A matmul sweep (sizes x precisions) recorded as JSON Lines for the panels' overlay."""
    from a800lab.core.precision import unsupported_reason
    from a800lab.core.sweep import run_sweep
    from a800lab.workloads.matmul import matmul_point

    precisions = [p for p in ("fp32", "tf32", "bf16", "fp16", "fp8")
                  if not unsupported_reason(p, "cuda:0")]

    def point(size, precision):
        return matmul_point(size, size, size, precision, device="cuda:0", budget_s=0.3)

    res = run_sweep(point, {"size": [1024, 2048, 4096, 8192], "precision": precisions},
                    workload="matmul", out=path, device="cuda:0", sample_telemetry=True,
                    label=torch.cuda.get_device_name(0))
    return len(res.records)


def record_report(folder: Path) -> dict:
    """`a800lab report --quick` on cuda:0 into `folder` (points.jsonl, report.json/.html):
    judged complete, every point measured without an error, every claim given a verdict."""
    from a800lab.report.html import write_report_html
    from a800lab.report.run import run_report

    t0 = time.perf_counter()
    report = run_report("quick", folder, device="cuda:0", on_progress=lambda done, total, eta,
                        what: print(f"  [report {done}/{total}] {what}", flush=True))
    write_report_html(report, folder / "report.html")
    errors = [c for c in report["claims"] if not c["status"]]
    status = "pass" if report["complete"] and not report["points"]["failed"] and not errors \
        else "fail"
    return {"status": status, "wall_s": round(time.perf_counter() - t0, 1),
            "points": report["points"], "folder": str(folder),
            "verdicts": {c["id"]: c["status"] for c in report["claims"]},
            "flags": report["health"]["flags"]}


def _write(path: Path, report: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2, default=str))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default_out = Path(os.environ.get("OUT", REPO / "data")) / "gpu_check.json"
    parser.add_argument("--out", type=Path, default=default_out)
    parser.add_argument("--only", nargs="+", choices=sorted(CHECKS), help="run only these")
    parser.add_argument("--record", type=Path, help="also record a matmul sweep (JSON Lines)")
    parser.add_argument("--report", type=Path,
                        help="also run `a800lab report --quick` into this folder (~2 minutes)")
    args = parser.parse_args(argv)
    env = environment("cuda:0" if HAS_CUDA else "cpu")
    report = {"created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
              "environment": env, "fingerprint": fingerprint(env), "checks": {}}
    if not HAS_CUDA:
        report["error"] = f"no CUDA device: {why_unavailable('cuda')}"
        print(f"FAIL  gpu_check: {report['error']}")
        _write(args.out, report)
        return 1
    for name, check in CHECKS.items():
        if args.only and name not in args.only:
            continue
        print(f"[gpu_check] {name} ...", flush=True)
        report["checks"][name] = result = run_check(check)
        print(f"{result['status'].upper():<5} {name}: {result['summary']} "
              f"({result['duration_s']} s)", flush=True)
        _write(args.out, report)  # after every check: a crash keeps what was measured
    if args.record:
        report["recorded_points"] = record_sweep(args.record)
        print(f"recorded {report['recorded_points']} points to {args.record}")
    if args.report:
        report["checks"]["report"] = result = record_report(args.report)
        print(f"{result['status'].upper():<5} report: {result['points']} in "
              f"{result['wall_s']} s; {args.report}/report.html", flush=True)
    failed = [n for n, r in report["checks"].items() if r["status"] in ("fail", "error")]
    report["failed"] = failed
    _write(args.out, report)
    print(f"[gpu_check] {len(report['checks']) - len(failed)}/{len(report['checks'])} checks "
          f"passed or skipped; report written to {args.out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
