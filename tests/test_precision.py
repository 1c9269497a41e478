"""Precision names, support checks, the TF32 context manager and the float64 check."""

import pytest
import torch

from a800lab.core.precision import (
    PRECISIONS,
    Precision,
    check_supported,
    make_operands,
    matmul_precision,
    parse_precision,
    relative_error,
    unsupported_reason,
)


@pytest.mark.parametrize("alias, name", [
    ("fp32", "fp32"), ("float32", "fp32"), ("FLOAT", "fp32"), (" fp16 ", "fp16"),
    ("half", "fp16"), ("float16", "fp16"), ("bfloat16", "bf16"), ("torch.bfloat16", "bf16"),
    ("double", "fp64"), ("tf32", "tf32"), ("float8_e4m3fn", "fp8"), ("e4m3", "fp8"),
])
def test_parse_aliases(alias, name):
    assert parse_precision(alias).name == name


def test_every_precision_parses_to_its_dtype():
    dtypes = {"fp64": torch.float64, "fp32": torch.float32, "tf32": torch.float32,
              "fp16": torch.float16, "bf16": torch.bfloat16, "fp8": torch.float8_e4m3fn}
    for name in PRECISIONS:
        prec = parse_precision(name)
        assert prec.dtype == dtypes[name]
        assert prec.bytes_per_element == torch.empty(0, dtype=prec.dtype).element_size()
        assert prec.tf32 == (name == "tf32")
    assert parse_precision(parse_precision("bf16")) is parse_precision("bf16")


def test_tolerances_follow_the_mantissa_width():
    rtol = [parse_precision(p).rtol for p in ("fp64", "fp32", "tf32", "bf16", "fp8")]
    assert rtol == sorted(rtol) and len(set(rtol)) == len(rtol)


@pytest.mark.parametrize("bad", ["fp12", "", "int4"])
def test_bad_name_names_value_and_choices(bad):
    with pytest.raises(ValueError) as err:
        parse_precision(bad)
    assert repr(bad) in str(err.value)
    assert all(p in str(err.value) for p in PRECISIONS)


def test_non_string_precision_is_rejected_clearly():
    with pytest.raises(ValueError, match="string"):
        parse_precision(torch.float16)


def test_cpu_support():
    for name in ("fp64", "fp32", "fp16", "bf16"):
        check_supported(name, "cpu")
    with pytest.raises(ValueError, match="use precision 'fp32'"):
        check_supported("tf32", "cpu")
    with pytest.raises(ValueError, match="8.9"):
        check_supported("fp8", "cpu")


@pytest.mark.parametrize("name, capability, fragment", [
    ("bf16", (7, 0), "8.0"), ("tf32", (7, 5), "'fp32'"), ("fp8", (8, 0), "8.9"),
    ("bf16", (7, 5), "'fp16'"),
])
def test_gpu_capability_rules(name, capability, fragment):
    reason = unsupported_reason(name, "cuda", capability=capability)
    assert fragment in reason
    with pytest.raises(ValueError, match=name):
        check_supported(name, "cuda", capability=capability)


@pytest.mark.parametrize("name, capability", [
    ("fp16", (7, 0)), ("fp32", (6, 0)), ("bf16", (8, 0)), ("tf32", (9, 0)), ("fp8", (8, 9)),
    ("fp8", (9, 0)),
])
def test_gpu_capability_allows(name, capability):
    assert unsupported_reason(name, "cuda", capability=capability) == ""


def _tf32_state():
    matmul = torch.backends.cuda.matmul
    if hasattr(matmul, "fp32_precision"):
        return matmul.fp32_precision, torch.backends.cudnn.conv.fp32_precision
    return matmul.allow_tf32, torch.backends.cudnn.allow_tf32


def _tf32_enabled() -> bool:
    matmul = torch.backends.cuda.matmul
    if hasattr(matmul, "fp32_precision"):
        return matmul.fp32_precision == "tf32"
    return matmul.allow_tf32


def test_matmul_precision_sets_and_restores_flags():
    before = _tf32_state()
    with matmul_precision("tf32") as prec:
        assert isinstance(prec, Precision) and _tf32_enabled()
        with matmul_precision("fp32"):
            assert not _tf32_enabled()
        assert _tf32_enabled()
    assert _tf32_state() == before
    with pytest.raises(RuntimeError), matmul_precision("tf32"):
        raise RuntimeError("boom")
    assert _tf32_state() == before


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
    rows = one.check_rows.tolist()
    assert len(rows) == 512 and rows[0] == 0 and rows[-1] == 599
    assert one.reference.dtype == torch.float64 and one.reference.shape == (512, 16)


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
