"""Precision names, support checks, the TF32 settings and the TF32 context manager."""

import pytest
import torch

from a800lab.core import precision as precision_mod
from a800lab.core.precision import (
    PRECISIONS,
    Precision,
    check_supported,
    matmul_precision,
    parse_precision,
    tf32_settings,
    unsupported_reason,
)
from tests.tf32_state import reset_to_defaults, snapshot


@pytest.fixture
def tf32_defaults():
    """Start and end with torch's default TF32 settings (the tests below change them)."""
    reset_to_defaults()
    yield
    reset_to_defaults()


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


def test_matmul_precision_sets_and_restores_flags(tf32_defaults):
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


def test_tf32_settings_read_either_api_without_raising(tf32_defaults):
    assert tf32_settings() == {"matmul_fp32_precision": "ieee", "conv_fp32_precision": "tf32",
                               "tf32_api": "fp32_precision"}
    torch.backends.cuda.matmul.fp32_precision = "tf32"  # the legacy getter now raises ...
    with pytest.raises(RuntimeError, match="mix of the legacy and new APIs"):
        torch.get_float32_matmul_precision()
    assert tf32_settings()["matmul_fp32_precision"] == "tf32"  # ... this does not
    torch.backends.cudnn.conv.fp32_precision = "ieee"
    assert tf32_settings()["conv_fp32_precision"] == "ieee"
    reset_to_defaults()
    torch.set_float32_matmul_precision("medium")  # the legacy API
    torch.backends.cudnn.allow_tf32 = False
    assert tf32_settings()["matmul_fp32_precision"] == "tf32"
    assert tf32_settings()["conv_fp32_precision"] == "ieee"


def _set_new_api_matmul_tf32():
    torch.backends.cuda.matmul.fp32_precision = "tf32"


def _set_new_api_conv_ieee():
    torch.backends.cudnn.conv.fp32_precision = "ieee"


def _set_legacy_medium_no_cudnn_tf32():
    torch.set_float32_matmul_precision("medium")
    torch.backends.cudnn.allow_tf32 = False


def _set_legacy_high():
    torch.set_float32_matmul_precision("high")


def _set_cuda_wide_tf32():
    torch.backends.cudnn.fp32_precision = "tf32"  # the "cuda"/"all" parent of matmul and conv


def _set_generic_tf32():
    torch.backends.fp32_precision = "tf32"  # the parent of "cuda"/"all"


@pytest.mark.parametrize("user_setting", [
    lambda: None, _set_new_api_matmul_tf32, _set_new_api_conv_ieee,
    _set_legacy_medium_no_cudnn_tf32, _set_legacy_high, _set_cuda_wide_tf32, _set_generic_tf32])
@pytest.mark.parametrize("mode", ["fp32", "tf32"])
def test_matmul_precision_restores_exactly_what_the_user_set(tf32_defaults, user_setting, mode):
    user_setting()
    before = snapshot()
    with matmul_precision(mode):
        assert tf32_settings()["matmul_fp32_precision"] == ("tf32" if mode == "tf32" else "ieee")
        assert tf32_settings()["conv_fp32_precision"] == ("tf32" if mode == "tf32" else "ieee")
    assert snapshot() == before


@pytest.mark.parametrize("parent", [torch.backends.cudnn, torch.backends],
                         ids=["cuda-wide", "generic"])
def test_inherited_settings_stay_inherited(tf32_defaults, parent):
    parent.fp32_precision = "tf32"  # matmul (which holds "none") now reports "tf32"
    with matmul_precision("fp32"):
        pass
    parent.fp32_precision = "ieee"
    assert torch.backends.cuda.matmul.fp32_precision == "ieee"  # still follows, not pinned
    assert torch.backends.cudnn.conv.fp32_precision == "tf32"   # conv holds its own "tf32"
    assert torch.backends.cudnn.fp32_precision == "ieee"


def test_matmul_precision_with_only_the_legacy_api(tf32_defaults, monkeypatch):
    monkeypatch.setattr(precision_mod, "_FP32_PRECISION_API", False)  # torch before fp32_precision
    torch.set_float32_matmul_precision("medium")
    torch.backends.cudnn.allow_tf32 = False
    assert tf32_settings() == {"matmul_fp32_precision": "tf32", "conv_fp32_precision": "ieee",
                               "tf32_api": "allow_tf32"}
    with matmul_precision("fp32"):
        assert not torch.backends.cuda.matmul.allow_tf32 and not torch.backends.cudnn.allow_tf32
    with matmul_precision("tf32"):
        assert torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32
    assert torch.get_float32_matmul_precision() == "medium"  # not flattened to "high"
    assert torch.backends.cudnn.allow_tf32 is False
