"""2:4 sparsity on CPU: pruning, torch's shape minimums, and plain refusals where it cannot run
(the dense vs sparse timing itself runs on a GPU: tests/test_gpu.py)."""

import pytest
import torch

from a800lab.core.sweep import run_sweep
from a800lab.workloads import sparsity
from a800lab.workloads.sparsity import (
    prune_2to4,
    shape_minimums,
    sparse_point,
    sparsity_unsupported_reason,
)


def test_pruning_keeps_the_two_largest_of_every_four():
    a = torch.tensor([[1.0, -5.0, 3.0, 0.5, 0.125, 0.25, -0.375, 0.5]])
    assert prune_2to4(a).tolist() == [[0.0, -5.0, 3.0, 0.0, 0.0, 0.0, -0.375, 0.5]]
    big = prune_2to4(torch.randn(64, 128))
    assert ((big.reshape(64, 32, 4) != 0).sum(-1) <= 2).all()
    with pytest.raises(ValueError, match="multiple of 4, got 6"):
        prune_2to4(torch.randn(2, 6))


def test_shape_minimums_come_from_torch():
    cutlass = shape_minimums("cutlass")
    assert cutlass["fp16"] == (32, 64) and cutlass["fp32"] == (32, 32)
    assert shape_minimums("cusparselt")["bf16"] == (16, 16)


def test_reasons_say_what_is_needed(monkeypatch):
    monkeypatch.setattr(torch.backends.cusparselt, "is_available", lambda: True)
    assert "compute capability >= 8.0" in sparsity_unsupported_reason(4096, 4096, "fp16", "cpu")
    assert "this GPU has 7.5" in sparsity_unsupported_reason(4096, 4096, "fp16", "cuda",
                                                             capability=(7, 5))
    assert sparsity_unsupported_reason(4096, 4096, "fp16", "cuda", capability=(8, 0)) == ""


def test_shape_and_precision_refusals_name_the_backend(monkeypatch):
    monkeypatch.setattr(sparsity, "backend_name", lambda: "cutlass")
    reason = sparsity_unsupported_reason(4096, 100, "fp16", "cuda", capability=(8, 0))
    assert reason == ("the cutlass back end needs A's rows (m=4096) to be a multiple of 32 and "
                      "its columns (k=100) a multiple of 64 for fp16; round them up")
    assert "takes fp16, bf16 inputs, not fp32" in sparsity_unsupported_reason(
        4096, 4096, "fp32", "cuda", capability=(8, 0))


def test_on_cpu_the_point_is_an_error_record_that_says_why():
    res = run_sweep(sparse_point, {"m": [256]}, fixed={"n": 256, "k": 256}, device="cpu")
    record = res.records[0]
    assert record.outcome == "error" and "needs sparse tensor cores" in record.message
    assert record.throughput is None
