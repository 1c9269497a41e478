"""GPU paths (marker `gpu`): skipped without CUDA. scripts/gpu_check.py judges the same paths in
more depth (timing against triton, peaks against the datasheet, topology against nvidia-smi)."""

import pytest
import torch

from a800lab.core.gpu_map import nvml_index
from a800lab.core.memory import read_memory
from a800lab.core.precision import tf32_settings
from a800lab.core.sweep import run_sweep
from a800lab.core.timing import measure
from a800lab.workloads.matmul import matmul_point

pytestmark = pytest.mark.gpu
MIB = 2**20


def test_cuda_events_time_a_matmul():
    a = torch.randn(2048, 2048, device="cuda")
    t = measure(lambda: a @ a, device="cuda", budget_s=0.1)
    assert t.device == "cuda" and t.median_ms > 0 and len(t.samples_ms) >= 5


@pytest.mark.parametrize("precision", ["fp32", "tf32", "bf16", "fp16"])
def test_matmul_point_is_checked_then_timed(precision):
    out = matmul_point(1024, 1024, 1024, precision, device="cuda", budget_s=0.05)
    assert out["tflops"] > 0 and out["rel_error"] < 0.05


def test_tf32_engages_and_settings_are_restored():
    before = tf32_settings()
    fp32 = matmul_point(2048, 2048, 2048, "fp32", device="cuda", budget_s=0.05)
    tf32 = matmul_point(2048, 2048, 2048, "tf32", device="cuda", budget_s=0.05)
    assert tf32["rel_error"] > 10 * fp32["rel_error"]  # TF32's 10-bit mantissa shows
    assert tf32_settings() == before


def test_a_points_peak_memory_is_its_operands():
    torch.randn(64, 64, device="cuda") @ torch.randn(64, 64, device="cuda")  # cuBLAS workspace
    res = run_sweep(matmul_point, {"m": [1024, 4096]}, fixed={"n": 1024, "k": 1024,
                                                              "precision": "fp32"},
                    device="cuda")
    for record in res.records:
        assert record.outcome == "ok", record.message
        extra = record.memory["peak_allocated_bytes"] - record.metrics["operand_bytes"]
        assert -MIB / 2 <= extra <= 4 * MIB, (record.params, record.memory)  # no 256 MiB flush


def test_out_of_memory_is_freed_and_the_sweep_goes_on():
    torch.cuda.empty_cache()
    free_before, _ = torch.cuda.mem_get_info()
    chunk = int(0.6 * free_before)
    allocated_before = torch.cuda.memory_allocated()

    def hog(step):
        held = torch.empty(chunk if step == 2 else MIB, dtype=torch.uint8, device="cuda")
        more = torch.empty(chunk if step == 2 else MIB, dtype=torch.uint8, device="cuda")
        return {"throughput": float(held.numel() + more.numel())}

    res = run_sweep(hog, {"step": [1, 2, 3]}, device="cuda")
    assert [r.outcome for r in res.records] == ["ok", "oom", "ok"]
    assert torch.cuda.memory_allocated() == allocated_before
    assert torch.cuda.mem_get_info()[0] >= 0.98 * free_before  # the cache was released
    again = torch.empty(chunk, dtype=torch.uint8, device="cuda")  # 60% allocates again
    del again
    assert read_memory("cuda")["capacity_bytes"] > 0


def test_the_sweeps_device_reaches_the_workload_and_its_telemetry():
    seen = []
    res = run_sweep(lambda m, device="auto": seen.append(device) or {"throughput": 1.0},
                    {"m": [1]}, device="cuda:0", sample_telemetry=True)
    assert seen == ["cuda:0"]
    assert isinstance(nvml_index("cuda:0"), int)
    assert res.records[0].telemetry["available"], res.records[0].telemetry


def test_2to4_sparse_matmul_is_checked_then_timed():
    from a800lab.workloads.sparsity import sparse_point, sparsity_unsupported_reason

    reason = sparsity_unsupported_reason(4096, 4096, "fp16", "cuda")
    if reason:
        pytest.skip(reason)
    out = sparse_point(4096, 4096, 4096, "fp16", device="cuda", budget_s=0.1)
    assert out["rel_error"] <= 5e-3 and out["dense_rel_error"] <= 5e-3
    assert out["dense_tflops"] > 0 and out["sparse_tflops"] > 0 and out["speedup"] > 0


def test_fp8_with_and_without_fast_accumulation():
    from a800lab.core.precision import unsupported_reason
    from a800lab.workloads.precision import fp8_point

    reason = unsupported_reason("fp8", "cuda")
    if reason:
        pytest.skip(reason)
    exact = fp8_point(4096, 4096, 4096, fast_accum=False, device="cuda", budget_s=0.1)
    fast = fp8_point(4096, 4096, 4096, fast_accum=True, device="cuda", budget_s=0.1)
    assert exact["rel_error"] <= 0.2 and fast["rel_error"] <= 0.2
    assert exact["tflops"] > 0 and fast["tflops"] > 0
