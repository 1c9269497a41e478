"""Matmul operands: seeded inputs per precision, the float64 check rebuilt from the seed."""

import pytest
import torch

from a800lab.core.operands import (
    check_rows,
    make_operands,
    needed_bytes,
    operand_bytes,
    relative_error,
)
from a800lab.core.precision import matmul_precision, parse_precision


@pytest.mark.parametrize("name", ["fp64", "fp32", "fp16", "bf16"])
def test_operands_pass_their_tolerance_on_cpu(name):
    ops = make_operands(48, 80, 64, name, "cpu")
    assert ops.a.dtype == parse_precision(name).dtype and ops.a.shape == (48, 64)
    with matmul_precision(name):
        c = ops.run()
    assert c.shape == (48, 80)
    assert ops.rel_error(c) <= ops.precision.rtol


def test_operands_are_seeded_and_check_edge_rows():
    one, two = make_operands(600, 16, 16, "fp32", "cpu"), make_operands(600, 16, 16, "fp32", "cpu")
    assert torch.equal(one.a, two.a)
    assert not torch.equal(one.a, make_operands(600, 16, 16, "fp32", "cpu", seed=1).a)
    rows = check_rows(600, "cpu").tolist()
    assert len(rows) == 512 and rows[0] == 0 and rows[-1] == 599


def test_the_check_catches_a_wrong_last_row_and_keeps_nothing():
    ops = make_operands(600, 16, 16, "fp32", "cpu")
    c = ops.run()
    assert ops.rel_error(c) < 1e-6
    c[-1] += 1.0  # an edge-tile bug
    assert ops.rel_error(c) > 1e-3
    # only what the workload needs is held between check and timing: A, B and the call
    assert {f for f in vars(ops) if isinstance(getattr(ops, f), torch.Tensor)} == {"a", "b"}


def test_byte_counts():
    assert operand_bytes(1024, 1024, 1024, "fp32") == 12 * 2**20
    assert operand_bytes(1024, 1024, 1024, "bf16") == 6 * 2**20
    assert operand_bytes(64, 64, 64, "fp8") == 64 * 64 * (1 + 1 + 2)  # C is bf16
    assert needed_bytes(1024, 1024, 1024, "fp32") > operand_bytes(1024, 1024, 1024, "fp32")


def test_fp8_operands_need_multiples_of_16():
    with pytest.raises(ValueError, match="multiples of 16"):
        make_operands(100, 64, 64, "fp8", "cpu")


def test_fp8_product_is_within_tolerance_where_scaled_mm_runs():
    ops = make_operands(64, 32, 48, "fp8", "cpu")
    assert ops.a.dtype == torch.float8_e4m3fn and ops.b.stride() == (1, 48)  # B column-major
    try:
        c = ops.run()
    except (RuntimeError, NotImplementedError) as exc:
        pytest.skip(f"torch._scaled_mm does not run on this CPU build: {exc}")
    assert 1e-3 < ops.rel_error(c) <= ops.precision.rtol  # e4m3 rounding is visible


def test_relative_error():
    ref = torch.ones(4, 4, dtype=torch.float64)
    assert relative_error(ref.float(), ref) == 0.0
    assert relative_error(torch.zeros(4, 4), ref) == pytest.approx(1.0)
    assert relative_error(torch.full((4, 4), float("nan")), ref) == float("inf")
