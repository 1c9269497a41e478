"""GPU paths (marker `gpu`): skipped without CUDA; scripts/gpu_check.py covers them in depth."""

import pytest
import torch

from a800lab.core.memory import read_memory
from a800lab.core.sweep import run_sweep
from a800lab.core.timing import measure
from a800lab.workloads.matmul import matmul_point

pytestmark = pytest.mark.gpu


def test_cuda_events_time_a_matmul():
    a = torch.randn(2048, 2048, device="cuda")
    t = measure(lambda: a @ a, device="cuda", budget_s=0.1)
    assert t.device == "cuda" and t.median_ms > 0 and len(t.samples_ms) >= 5


@pytest.mark.parametrize("precision", ["fp32", "tf32", "bf16", "fp16"])
def test_matmul_point_is_checked_then_timed(precision):
    out = matmul_point(1024, 1024, 1024, precision, device="cuda", budget_s=0.05)
    assert out["tflops"] > 0 and out["rel_error"] < 0.05


def test_out_of_memory_is_a_record_and_the_sweep_goes_on():
    capacity = torch.cuda.get_device_properties(0).total_memory

    def allocate(nbytes):
        x = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
        return {"throughput": float(x.numel())}

    res = run_sweep(allocate, {"nbytes": [2**20, 2 * capacity, 2**20]}, device="cuda")
    assert [r.outcome for r in res.records] == ["ok", "oom", "ok"]
    assert read_memory("cuda")["capacity_bytes"] > 0
