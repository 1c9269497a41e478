"""The device checks of scripts/gpu_check.py: the harness on a real GPU (doctor, timing, TF32,
peaks, topology, telemetry, memory, out-of-memory, the device reaching a workload).

Each check returns (summary, details) or raises Failed; its docstring is its expectation, one
a healthy card meets. `expect_between` judges a figure and says what was expected.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import torch

from a800lab.core.backends import HAS_TRITON, why_unavailable

REPO = Path(__file__).resolve().parent.parent
MIB = 2**20


def data_file(kind: str, device_name: str, suffix: str) -> Path:
    """data/<kind>-<device>-<date><suffix>, e.g. data/gpu_check-nvidia-h200-2026-12-01.json."""
    slug = re.sub(r"[^a-z0-9]+", "-", device_name.lower()).strip("-") or "no-gpu"
    return REPO / "data" / f"{kind}-{slug}-{datetime.now(timezone.utc):%Y-%m-%d}{suffix}"


class Failed(AssertionError):
    """An expectation that did not hold (the check's own measurements are kept)."""


def expect_between(name: str, value: float, low: float, high: float) -> str:
    """"name 0.98 (expect 0.9-1.1)"; raises Failed when value is outside [low, high]."""
    text = f"{name} {value:.3g} (expect {low:g}-{high:g})"
    if not low <= value <= high:
        raise Failed(text)
    return text


def matmul_fn(size: int, dtype: torch.dtype):
    a = torch.randn(size, size, device="cuda", dtype=dtype)
    b = torch.randn(size, size, device="cuda", dtype=dtype)
    return lambda: torch.matmul(a, b)


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
               "tf32_settings_seen": {k: r["system"] for k, r in reports.items()}}
    return (f"{len(reports['plain']['gpus'])} GPU(s); report builds inside "
            f"matmul_precision fp32/tf32; cuda:0 -> NVML {index} by UUID"), details


def check_timing() -> tuple[str, dict]:
    """Like with like: measure() agrees with triton's do_bench (both per-call CUDA events
    after an L2 flush) within 0.9-1.1 on a 4096^3 bf16 matmul and 0.75-1.33 on a tiny fill
    (both pay the launch); per-call times are not below 0.9x a CUDA-graph replay of the same
    fill (the replay amortises the launch); and a call whose host side takes 0.3 ms (longer
    than the flush) times as its kernel, 0.5-2x the plain fill, not as the host's wait."""
    if not HAS_TRITON:
        raise Failed(f"triton is needed for this check: {why_unavailable('triton')}")
    import triton.testing

    from a800lab.core.timing import measure

    big = matmul_fn(4096, torch.bfloat16)
    tiny_tensor = torch.empty(1024, device="cuda")

    def tiny():
        return tiny_tensor.fill_(1.0)  # writes only: the L2 flush cannot change its time

    def slow_launch():
        time.sleep(0.0003)  # a Python-heavy dispatch: the host is busy before the launch
        return tiny_tensor.fill_(1.0)

    rows = {"matmul_4096_bf16": [], "tiny_fill": [], "tiny_fill_graph_ms": [],
            "slow_launch_over_tiny": []}
    for _ in range(3):  # interleaved rounds: drift hits both timers alike
        rows["matmul_4096_bf16"].append(
            (measure(big, device="cuda", budget_s=0.3).median_ms,
             triton.testing.do_bench(big, rep=300, return_mode="median")))
        plain = measure(tiny, device="cuda", budget_s=0.2).median_ms
        rows["tiny_fill"].append((plain, triton.testing.do_bench(tiny, rep=100,
                                                                 return_mode="median")))
        rows["tiny_fill_graph_ms"].append(
            triton.testing.do_bench_cudagraph(tiny, rep=100, return_mode="median"))
        rows["slow_launch_over_tiny"].append(
            measure(slow_launch, device="cuda", budget_s=0.2).median_ms / plain)
    ratio = {name: statistics.median(ours / ref for ours, ref in rows[name])
             for name in ("matmul_4096_bf16", "tiny_fill")}
    per_call_over_graph = statistics.median(ours for ours, _ in rows["tiny_fill"]) / \
        statistics.median(rows["tiny_fill_graph_ms"])
    slow = statistics.median(rows["slow_launch_over_tiny"])
    details = {"rows": rows, "ratios": ratio, "per_call_over_graph": per_call_over_graph,
               "slow_launch_over_tiny": slow}
    summary = "; ".join([
        expect_between("measure()/do_bench (4096^3 bf16)", ratio["matmul_4096_bf16"], 0.9, 1.1),
        expect_between("measure()/do_bench (tiny fill)", ratio["tiny_fill"], 0.75, 1.33),
        expect_between("per-call / graph replay (tiny fill)", per_call_over_graph, 0.9, 1e9),
        expect_between("0.3 ms-host-launch fill / plain fill", slow, 0.5, 2.0)])
    return summary, details


def check_tf32() -> tuple[str, dict]:
    """TF32 engages (its error vs float64 clearly above fp32's) and the settings are restored."""
    from a800lab.core.precision import tf32_settings
    from a800lab.workloads.matmul import matmul_point

    before = tf32_settings()
    points = {p: matmul_point(2048, 2048, 2048, p, device="cuda", budget_s=0.1)
              for p in ("fp32", "tf32")}
    after = tf32_settings()
    errors = {p: out["rel_error"] for p, out in points.items()}
    details = {"rel_error": errors, "tflops": {p: out.get("tflops") for p, out in points.items()},
               "settings_before": before, "settings_after": after}
    if after != before:
        raise Failed(f"TF32 settings changed: {before} -> {after}")
    ratio = errors["tf32"] / max(errors["fp32"], 1e-300)
    summary = expect_between("tf32/fp32 relative error", ratio, 10, float("inf"))
    return summary + f"; settings restored ({before})", details


def check_peak() -> tuple[str, dict]:
    """Every measured peak (matmul per precision, copy bandwidth) is 50-105% of the datasheet;
    fp8 is recorded, not judged: cuBLAS's default precise accumulation (use_fast_accum=False)
    trades rate for accuracy by an amount NVIDIA does not publish beside the datasheet peak."""
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
            failures.append(f"{entry.precision} {entry.tflops:.1f} TFLOP/s: no datasheet row "
                            "to judge it by (add the card to a800lab.core.specs)")
        elif entry.precision == "fp8":
            verdicts.append(f"fp8 {entry.ratio:.3g} of the datasheet with precise accumulation "
                            "(recorded, no floor)")
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
    proc = subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True, text=True,
                          timeout=60)
    try:
        labels, matrix = parse_topo_matrix(proc.stdout)
    except ValueError as exc:  # e.g. a virtualised GPU whose driver prints no matrix
        return (f"skip: nvidia-smi topo -m printed no matrix to compare ({exc}; exit "
                f"{proc.returncode}: {(proc.stdout + proc.stderr).strip()[:200]!r})"), {
                    "ours": ours, "nvidia_smi": proc.stdout + proc.stderr}
    text = proc.stdout
    details = {"ours": ours, "nvidia_smi": {"labels": labels, "matrix": matrix, "raw": text}}
    if labels != list(ours["labels"]) or matrix != [list(row) for row in ours["matrix"]]:
        raise Failed(f"topology differs: ours {ours['matrix']} vs nvidia-smi {matrix}")
    return f"{len(labels)}x{len(labels)} matrix equals nvidia-smi topo -m", details


def check_sampler() -> tuple[str, dict]:
    """The sampler on cuda:0 keeps its schedule, duration/interval samples (+ first and last)
    within 0.85-1.1, while a bf16 matmul loop runs, reads the GPU busy, and says where its
    power reading comes from."""
    from a800lab.core.telemetry import TelemetrySampler

    fn, interval_s, calls = matmul_fn(8192, torch.bfloat16), 0.05, 0
    t0 = time.perf_counter()
    with TelemetrySampler(cuda_device="cuda:0", interval_s=interval_s) as sampler:
        while time.perf_counter() - t0 < 3.0:
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
    texts = [expect_between("samples / expected", len(samples) / expected, 0.85, 1.1)]
    util = summary["gpu_util_pct"]["mean"]
    if util is None:
        raise Failed("no GPU utilisation read while a matmul loop ran")
    texts.append(expect_between("mean GPU util %", util, 50, 100))
    texts.append(f"power source {samples[-1].get('power_source', 'unstated')}")
    return "; ".join(texts), details


FRESH_PROCESS_POINTS = """
import json
from a800lab.core.sweep import run_sweep
from a800lab.workloads.matmul import matmul_point
res = run_sweep(matmul_point, {"m": [1024, 4096]}, fixed={"n": 1024, "k": 1024,
                "precision": "fp32"}, device="cuda:0")
print(json.dumps([{"params": r.params, "outcome": r.outcome, "message": r.message,
                   "peak": r.memory.get("peak_allocated_bytes"),
                   "operands": r.metrics.get("operand_bytes")} for r in res.records]))
"""


def check_memory() -> tuple[str, dict]:
    """In a fresh process (cuBLAS not yet made), each matmul point's recorded peak is its own
    operands (A, B, C) within -0.5..+4 MiB: not cuBLAS's lasting workspace (32 MiB on Hopper),
    not the 256 MiB L2-flush buffer, not the float64 reference."""
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.run([sys.executable, "-c", FRESH_PROCESS_POINTS], capture_output=True,
                          text=True, timeout=180, env=env)
    if proc.returncode:
        raise Failed(f"the fresh process failed: {proc.stderr[-600:]}")
    rows, texts = json.loads(proc.stdout.strip().splitlines()[-1]), []
    for row in rows:
        if row["outcome"] != "ok":
            raise Failed(f"{row['params']}: {row['outcome']}: {row['message']}")
        texts.append(expect_between(f"m={row['params']['m']} (peak - operands) MiB",
                                    (row["peak"] - row["operands"]) / MIB, -0.5, 4))
    return "; ".join(texts) + " (fresh process)", {"points": rows}


def check_oom() -> tuple[str, dict]:
    """A point holding ~60% of free memory that asks for ~60% more is an "oom" record; after it
    memory_allocated is back where it was, the cache is released, and 60% allocates again (then
    the cache is emptied, so the next checks find the card's memory free)."""
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
    torch.cuda.empty_cache()  # else the 60% stays in torch's cache for every later check
    text = expect_between("free memory after / before", free_after / free_before, 0.98, 1.02)
    return f"oom recorded; allocated back to {allocated_before} B; {text}; 60% allocates", details


def check_device() -> tuple[str, dict]:
    """The sweep's device reaches the workload: as an argument, or as torch's current device;
    the tile kernel runs on the last GPU's memory when asked to."""
    from a800lab.core.sweep import run_sweep
    from a800lab.workloads.tiles.point import tiled_matmul_point

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
    point = tiled_matmul_point(512, 512, 512, "fp16", "triton", device=f"cuda:{last}",
                               budget_s=0.02)
    if point.get("outcome", "ok") != "ok":
        raise Failed(f"the tile kernel on cuda:{last}: {point.get('message')}")
    return (f"cuda:{last} reached both workloads; the tile kernel on cuda:{last} is right "
            f"(error {point['rel_error']:.1e})"), {"seen": seen}
