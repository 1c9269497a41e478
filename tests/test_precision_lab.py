"""The precision chapter's measurements on CPU: formats, rounding error vs K, fp8 refusals."""

import math

import pytest

from a800lab.figures.tiles import error_figure
from a800lab.workloads.precision import error_vs_k, formats, fp8_point


def test_formats_come_from_their_bits():
    table = formats().set_index("format")
    assert list(table.index) == ["fp32", "tf32", "fp16", "bf16", "fp8 e4m3"]
    assert table.loc["fp16", "max"] == 65504 and table.loc["fp8 e4m3", "max"] == 448
    for name, row in table.iterrows():
        assert row["eps"] == 2.0 ** -row["mantissa_bits"], name
    # bf16 keeps fp32's range with fewer digits; fp16 the reverse
    assert table.loc["bf16", "smallest_normal"] == table.loc["fp32", "smallest_normal"]
    assert table.loc["fp16", "eps"] < table.loc["bf16", "eps"]


def test_rounding_error_orders_the_formats_and_refuses_tf32_on_cpu():
    df = error_vs_k([64, 1024], ["fp32", "tf32", "fp16", "bf16"], device="cpu")
    for k, rows in df.groupby("k"):
        err = rows.set_index("precision")["rel_error"]
        assert err["fp32"] < 1e-5 < err["fp16"] < err["bf16"] < 3e-2, k
        assert math.isnan(err["tf32"])
    assert "CUDA tensor-core mode" in df.loc[df["precision"] == "tf32", "unsupported"].iloc[0]
    figure = error_figure(df, "k")
    labels = [t.get_text() for t in figure.axes[0].get_legend().get_texts()]
    assert labels == ["fp32", "fp16", "bf16"]  # no line for what could not run
    assert figure.get_suptitle().startswith("CPU: ")


def test_fp8_says_what_it_needs():
    with pytest.raises(ValueError, match="compute capability >= 8.9"):
        fp8_point(64, 64, 64, device="cpu")
