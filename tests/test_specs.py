"""Datasheet table: name matching (most specific first), unknown devices, row sanity."""

import json
import warnings

import pytest

from a800lab.core import specs
from a800lab.core.specs import PEAK_KEYS, SPECS, DeviceSpec, UnknownDeviceWarning, lookup, peak_for

# torch/NVML spellings -> the row they must resolve to; together they reach every row
NAMES = {
    "NVIDIA A800-SXM4-80GB": "A800 SXM4 80GB",
    "NVIDIA A800 80GB PCIe": "A800 PCIe 80GB",
    "NVIDIA A800 40GB PCIe": "A800 PCIe 40GB",
    "NVIDIA A800 40GB Active": "A800 PCIe 40GB",
    "NVIDIA A100-SXM4-80GB": "A100 SXM4 80GB",
    "NVIDIA A100-SXM-80GB": "A100 SXM4 80GB",
    "NVIDIA A100-SXM4-40GB": "A100 SXM4 40GB",
    "NVIDIA A100 80GB PCIe": "A100 PCIe 80GB",
    "NVIDIA A100-PCIE-40GB": "A100 PCIe 40GB",
    "NVIDIA H800": "H800 SXM5 80GB",
    "NVIDIA H800 PCIe": "H800 PCIe 80GB",
    "NVIDIA H100 80GB HBM3": "H100 SXM5 80GB",
    "NVIDIA H100 PCIe": "H100 PCIe 80GB",
    "NVIDIA H100 NVL": "H100 NVL 94GB",
    "NVIDIA H200": "H200 SXM 141GB",
    "NVIDIA H200 NVL": "H200 NVL 141GB",
    "NVIDIA L40S": "L40S 48GB",
    "NVIDIA L4": "L4 24GB",
    "NVIDIA A10": "A10 24GB",
    "NVIDIA GeForce RTX 4090": "GeForce RTX 4090 24GB",
    "Tesla T4": "T4 16GB",
    "Tesla V100-SXM2-32GB": "V100 SXM2 32GB",
    "Tesla V100-SXM2-16GB": "V100 SXM2 16GB",
    "Tesla V100-PCIE-32GB": "V100 PCIe 32GB",
    "Tesla V100-PCIE-16GB": "V100 PCIe 16GB",
    "Tesla V100S-PCIE-32GB": "V100S PCIe 32GB",
}

# similar names of different parts: the table must not guess a neighbour's row for them
NOT_IN_TABLE = ["NVIDIA GH200 480GB", "NVIDIA L40", "NVIDIA A10G", "NVIDIA H20",
                "NVIDIA GeForce RTX 4090 D", "NVIDIA GeForce RTX 4090 Laptop GPU",
                "NVIDIA A100-SXM4-40GB MIG 3g.20gb", "NVIDIA A800", "Radeon RX 7900"]


@pytest.mark.parametrize("device_name, row", NAMES.items())
def test_lookup_resolves_torch_names(device_name, row):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert lookup(device_name).name == row


def test_every_row_is_reachable_by_some_name():
    assert set(NAMES.values()) == {s.name for s in SPECS}


def test_a800_differs_from_a100_only_in_nvlink():
    a800, a100 = lookup("NVIDIA A800-SXM4-80GB"), lookup("NVIDIA A100-SXM4-80GB")
    assert (a800.nvlink_gbs, a100.nvlink_gbs) == (400.0, 600.0)
    assert dict(a800.peak_tflops) == dict(a100.peak_tflops)
    assert (a800.mem_bw_gbs, a800.sm_count) == (a100.mem_bw_gbs, a100.sm_count) == (2039.0, 108)
    pcie40 = lookup("NVIDIA A800 40GB PCIe")
    assert (pcie40.mem_bw_gbs, pcie40.memory_gb) == (1555.0, 40)
    assert lookup("NVIDIA A800 80GB PCIe").mem_bw_gbs == 1935.0
    assert "A800" in a800.source and "400" in a800.source


def test_dense_not_sparse_numbers():
    a800 = lookup("NVIDIA A800-SXM4-80GB").peak_tflops
    assert (a800["tf32"], a800["bf16"], a800["int8"], a800["fp8"]) == (156.0, 312.0, 624.0, None)
    h100 = lookup("NVIDIA H100 80GB HBM3").peak_tflops
    assert (h100["bf16"], h100["fp8"]) == (989.4, 1978.9)
    h200 = lookup("NVIDIA H200")
    assert dict(h200.peak_tflops) == dict(h100)
    assert (h200.mem_bw_gbs, h200.memory_gb, h200.nvlink_gbs) == (4800.0, 141, 900.0)
    h800 = lookup("NVIDIA H800")
    assert (h800.peak_tflops["bf16"], h800.peak_tflops["fp64"], h800.nvlink_gbs) == (
        989.4, 1.0, 400.0)


@pytest.mark.parametrize("device_name", NOT_IN_TABLE)
def test_unknown_device_is_none_with_warning_never_a_guess(device_name):
    with pytest.warns(UnknownDeviceWarning, match="measure_peak"):
        assert lookup(device_name) is None


def test_unknown_warning_names_the_device():
    with pytest.warns(UnknownDeviceWarning) as caught:
        lookup("Some Future GPU")
    assert "Some Future GPU" in str(caught[0].message)


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_rows_are_sane(spec):
    peaks = spec.peak_tflops
    assert tuple(peaks) == PEAK_KEYS
    assert spec.source and "NVIDIA" in spec.source
    assert peaks["fp32"] and peaks["fp16"], "every row has fp32 and fp16"
    assert 10 <= spec.sm_count <= 200 and 16 <= spec.memory_gb <= 200
    assert 200 <= spec.mem_bw_gbs <= 6000
    assert spec.nvlink_gbs is None or 100 <= spec.nvlink_gbs <= 900
    if peaks["bf16"] is not None:
        assert peaks["bf16"] == peaks["fp16"]
    if peaks["tf32"] is not None:
        assert peaks["fp32"] <= peaks["tf32"] <= peaks["fp16"]
    for low in ("fp8", "int8"):
        if peaks[low] is not None:
            assert peaks[low] >= peaks["fp16"]
    if peaks["fp64"] is not None:
        assert peaks["fp64"] <= peaks["fp32"]
    json.dumps(spec.to_dict())


def test_pre_ampere_and_pre_ada_formats_are_none():
    v100, t4, a100 = lookup("Tesla V100-SXM2-32GB"), lookup("Tesla T4"), lookup("NVIDIA A10")
    assert v100.peak_tflops["bf16"] is None and v100.peak_tflops["tf32"] is None
    assert t4.peak_tflops["bf16"] is None and t4.peak_tflops["fp8"] is None
    assert a100.peak_tflops["fp8"] is None
    assert lookup("NVIDIA L40S").nvlink_gbs is None


def test_names_are_unique_and_rows_immutable():
    assert len({s.name for s in SPECS}) == len(SPECS)
    spec = SPECS[0]
    with pytest.raises(TypeError):
        spec.peak_tflops["fp32"] = 1.0
    assert hash(spec) == hash(lookup("NVIDIA A800-SXM4-80GB"))


def test_missing_peak_key_is_rejected():
    with pytest.raises(ValueError, match="missing.*fp8"):
        DeviceSpec("X", {k: 1.0 for k in PEAK_KEYS if k != "fp8"}, 1.0, None, 1, 1, "src")


def test_peak_for_gives_value_and_source_or_reason():
    value, source = peak_for("NVIDIA A800-SXM4-80GB", "bf16")
    assert value == 312.0 and "A800" in source
    value, reason = peak_for("NVIDIA A800-SXM4-80GB", "fp8")
    assert value is None and "fp8" in reason
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # plots call this per point: no warning spam
        value, reason = peak_for("Mystery GPU", "fp32")
    assert value is None and "Mystery GPU" in reason
    with pytest.raises(ValueError, match="fp12"):
        peak_for("NVIDIA H200", "fp12")


def test_rules_are_ordered_most_specific_first():
    # a broad rule placed before its specific sibling would shadow it
    rows = [spec.name for _, spec in specs._RULES]
    assert rows.index("H800 PCIe 80GB") < rows.index("H800 SXM5 80GB")
    assert rows.index("H200 NVL 141GB") < rows.index("H200 SXM 141GB")
    assert rows.index("A800 SXM4 80GB") < rows.index("A800 PCIe 80GB")


def test_an_a800_without_a_datasheet_is_unknown_not_guessed():
    # NVIDIA publishes no A800 SXM4 40GB: its peaks are unknown, not an A100 40GB's
    assert specs.match("NVIDIA A800-SXM4-40GB") is None
    with pytest.warns(UnknownDeviceWarning):
        assert lookup("NVIDIA A800-SXM4-40GB") is None
