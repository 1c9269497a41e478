"""Matmul workload: spec validation and the checked, timed point function on CPU."""

import re

import pytest
import torch

from a800lab.core import precision as precision_module
from a800lab.core.cancel import Cancelled, CancelToken
from a800lab.core.sweep import run_sweep
from a800lab.core.timing import Timing
from a800lab.workloads.matmul import (
    DEFAULT_CPU_SIZES,
    DEFAULT_TILES,
    TILE_FIELDS,
    MatmulSpec,
    default_sizes,
    matmul_point,
)


@pytest.mark.parametrize("kwargs, fragment", [
    ({"m": 0}, "m=0 must be a positive int"),
    ({"n": -4}, "n=-4"),
    ({"k": 1.5}, "k=1.5"),
    ({"m": True}, "m=True"),
    ({"precision": "fp12"}, "unknown precision 'fp12'"),
    ({"backend": "cutlass"}, "backend='cutlass' is not a choice"),
    ({"block_m": 64}, "only apply to backend='triton'"),
    ({"backend": "triton", "block_m": 48}, "block_m=48 must be a power of two"),
    ({"backend": "triton", "block_k": 8}, "block_k=8 must be a power of two >= 16"),
    ({"backend": "triton", "num_warps": 3}, "num_warps=3 must be a power of two from 1 to 16"),
    ({"backend": "triton", "num_warps": True}, "num_warps=True"),
    ({"backend": "triton", "num_stages": 0}, "num_stages=0"),
    ({"backend": "triton", "num_stages": 12}, "num_stages=12 must be an int from 1 to 8"),
    ({"backend": "triton", "group_m": 0}, "group_m=0"),
    ({"m": 100, "precision": "fp8"}, "multiples of 16"),
    ({"backend": "cpu_blocked", "num_warps": 4}, "['num_warps'] have no meaning for "
                                                 "backend='cpu_blocked'"),
    ({"backend": "cpu_blocked", "num_stages": 2}, "the CPU stand-in has no warps"),
    ({"backend": "cpu_blocked", "precision": "tf32"}, "tf32 is a CUDA tensor-core format"),
    ({"backend": "triton", "precision": "fp64"}, "use backend='torch' for fp64"),
    ({"backend": "triton", "precision": "fp8", "block_k": 16},
     "block_k=16 is too small for fp8: 8-bit tensor-core instructions take K in steps of 32"),
    ({"backend": "triton", "block_m": 256, "block_n": 256},
     "block_m=256 x block_n=256 needs 512 accumulator registers per thread with num_warps=4 "
     "(128 threads); a thread has at most 255: raise num_warps or shrink the tile"),
    ({"backend": "triton", "m": 65536, "k": 32768}, "has a matrix of 2147483648 elements"),
])
def test_spec_validation_messages(kwargs, fragment):
    args = {"m": 64, "n": 64, "k": 64, **kwargs}
    with pytest.raises(ValueError, match=re.escape(fragment)):
        MatmulSpec(**args)


def test_spec_is_canonical_hashable_and_counts_work():
    half = MatmulSpec(128, 256, 64, precision="half")
    assert half.precision == "fp16" and half == MatmulSpec(128, 256, 64, "fp16")
    assert len({half, MatmulSpec(128, 256, 64, "fp16")}) == 1
    assert half.flop_count == 2 * 128 * 256 * 64
    assert half.bytes_moved == (128 * 64 + 64 * 256 + 128 * 256) * 2
    assert half.arithmetic_intensity == pytest.approx(half.flop_count / half.bytes_moved)
    assert MatmulSpec(16, 16, 16, "fp8").bytes_moved == (2 * 256) * 1 + 256 * 2  # bf16 out
    tiled = MatmulSpec(512, 512, 512, "bf16", backend="triton", block_m=128, block_n=64,
                       block_k=32, num_warps=8, num_stages=3, group_m=8)
    assert tiled.to_dict()["block_m"] == 128 and tiled.to_dict()["group_m"] == 8
    with pytest.raises(AttributeError):
        tiled.m = 1


def test_tile_back_ends_fill_defaults_so_a_spec_names_its_tile():
    triton = MatmulSpec(64, 64, 64, "fp16", backend="triton", block_n=64)
    assert triton.tile == {**DEFAULT_TILES["triton"], "block_n": 64}
    assert (triton.schedule, triton.loads, triton.fp8_acc) == ("tile", "pointer", None)
    blocked = MatmulSpec(64, 64, 64, backend="cpu_blocked", group_m=4)
    assert blocked.tile == {**DEFAULT_TILES["cpu_blocked"], "group_m": 4}
    assert blocked.num_warps is None and blocked.schedule is None
    plain = MatmulSpec(64, 64, 64)
    assert plain.tile == {} and plain.block_m is None
    assert set(TILE_FIELDS["cpu_blocked"]) < set(TILE_FIELDS["triton"])


def test_the_hopper_levers_and_fp8_accumulation_are_named_choices():
    spec = MatmulSpec(64, 64, 64, "fp8", "triton", block_k=32, schedule="persistent",
                      loads="tma")
    assert spec.tile["schedule"] == "persistent" and spec.tile["loads"] == "tma"
    assert spec.fp8_acc == "precise"  # cuBLAS's default, so the two compare like with like
    assert MatmulSpec(64, 64, 64, "fp8", fp8_acc="fast").fp8_acc == "fast"
    with pytest.raises(ValueError, match=r"schedule='ring' is not a choice: use one of \('tile'"):
        MatmulSpec(64, 64, 64, "fp16", "triton", schedule="ring")
    with pytest.raises(ValueError, match="fp8_acc='fast' is fp8's accumulation choice"):
        MatmulSpec(64, 64, 64, "bf16", "triton", fp8_acc="fast")
    with pytest.raises(ValueError, match=r"fp8_acc='sloppy' is not a choice: use one of \('prec"):
        MatmulSpec(64, 64, 64, "fp8", fp8_acc="sloppy")
    with pytest.raises(ValueError, match=r"\['loads'\] have no meaning for backend='cpu_blocked'"):
        MatmulSpec(64, 64, 64, "fp32", "cpu_blocked", loads="tma")


def test_default_sizes_on_cpu():
    assert default_sizes("cpu") == DEFAULT_CPU_SIZES
    assert max(DEFAULT_CPU_SIZES) <= 512


def test_point_on_cpu_is_checked_and_timed():
    point = matmul_point(128, 128, 128, device="cpu", budget_s=0.02)
    assert point["throughput"] > 0 and point["throughput"] == point["tflops"]
    assert point["throughput_unit"] == "TFLOP/s"
    assert isinstance(point["timing"], Timing) and point["timing"].device == "cpu"
    assert point["rel_error"] < 1e-5
    assert point["flop_count"] == 2 * 128**3
    assert point["bytes_moved"] == 3 * 128 * 128 * 4
    expected = point["flop_count"] / (point["timing"].median_ms * 1e-3) / 1e12
    assert point["tflops"] == pytest.approx(expected)
    assert "outcome" not in point  # ok is the sweep's default


def test_non_square_bf16_point():
    point = matmul_point(96, 64, 80, "bfloat16", device="cpu", budget_s=0.01)
    assert point["tflops"] > 0 and 1e-4 < point["rel_error"] < 3e-2


def _garbage(a, b):
    return torch.full((a.shape[0], b.shape[1]), 3.0, dtype=a.dtype)


def test_wrong_result_is_recorded_as_wrong_without_throughput(monkeypatch):
    monkeypatch.setattr(precision_module.torch, "matmul", _garbage)
    point = matmul_point(64, 64, 64, device="cpu", budget_s=0.01)
    assert point["outcome"] == "wrong"
    assert "throughput" not in point and "timing" not in point and "tflops" not in point
    assert point["rel_error"] > 0.5
    assert "tolerance" in point["message"] and "not timed" in point["message"]


def test_nan_result_is_wrong(monkeypatch):
    monkeypatch.setattr(precision_module.torch, "matmul",
                        lambda a, b: torch.full((a.shape[0], b.shape[1]), float("nan")))
    assert matmul_point(32, 32, 32, device="cpu")["outcome"] == "wrong"


def test_unsupported_precision_raises_with_advice():
    with pytest.raises(ValueError, match="'fp32'"):
        matmul_point(64, 64, 64, "tf32", device="cpu")


def test_cancelled_point_raises():
    token = CancelToken()
    token.cancel()
    with pytest.raises(Cancelled):
        matmul_point(64, 64, 64, device="cpu", cancel=token)


def test_point_runs_inside_a_sweep(monkeypatch):
    result = run_sweep(matmul_point, {"m": [32, 64], "precision": ["fp32"]},
                       fixed={"n": 32, "k": 32, "device": "cpu", "budget_s": 0.005},
                       workload="matmul", device="cpu")
    assert [r.outcome for r in result.records] == ["ok", "ok"]
    assert all(r.throughput > 0 and r.throughput_unit == "TFLOP/s" for r in result.records)
    assert result.records[0].metrics["flop_count"] == 2 * 32**3
    monkeypatch.setattr(precision_module.torch, "matmul", _garbage)
    wrong = run_sweep(matmul_point, {"m": [32]}, fixed={"n": 32, "k": 32, "device": "cpu"},
                      workload="matmul", device="cpu")
    assert wrong.records[0].outcome == "wrong" and wrong.records[0].throughput is None


def test_numpy_integers_are_dimensions():
    import numpy as np

    spec = MatmulSpec(np.int64(64), np.int32(32), 16, backend="triton", block_m=np.int64(64),
                      num_warps=np.int64(8), num_stages=np.int32(2), group_m=np.int64(4))
    assert (spec.m, spec.n, spec.block_m) == (64, 32, 64) and type(spec.m) is int
    assert all(type(v) is int for k, v in spec.tile.items() if k not in ("schedule", "loads"))
    assert spec == MatmulSpec(64, 32, 16, backend="triton", block_m=64, num_warps=8,
                              num_stages=2, group_m=4)


def test_a_point_that_cannot_fit_is_an_oom_record_without_allocating(monkeypatch):
    from a800lab.core import memory as memory_mod
    from a800lab.core.operands import needed_bytes

    allocated = []
    monkeypatch.setattr(memory_mod, "available_bytes", lambda device: 8 * 2**30)
    monkeypatch.setattr("a800lab.workloads.matmul.make_operands",
                        lambda *a, **k: allocated.append(a))
    res = run_sweep(matmul_point, {"m": [50000]}, fixed={"n": 50000, "k": 50000},
                    device="cpu")
    record = res.records[0]
    assert record.outcome == "oom" and allocated == []
    assert record.message.startswith("out of memory (not attempted): a 50000x50000x50000 fp32")
    assert "needs 65.96 GiB, cpu has 8.00 GiB available" in record.message
    assert needed_bytes(50000, 50000, 50000, "fp32") > 3 * 50000**2 * 4  # operands and check


def test_cpu_slowdown_note_names_the_missing_instructions(monkeypatch):
    from a800lab.workloads import matmul as matmul_mod

    assert matmul_mod.cpu_slowdown_note("fp32") == ""
    monkeypatch.setattr(matmul_mod.torch.backends.cpu, "get_cpu_capability", lambda: "AVX2")
    note = matmul_mod.cpu_slowdown_note("bfloat16")
    assert note.startswith("bf16 on this CPU (torch capability AVX2, no usable "
                           "avx512_bf16/amx_bf16)")
