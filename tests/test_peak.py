"""On-the-spot peak measurement on CPU: rates, bandwidth, unsupported and wrong precisions."""

import json

import pytest
import torch

from a800lab.core import precision as precision_module
from a800lab.core.cancel import Cancelled, CancelToken
from a800lab.workloads import peak as peak_module
from a800lab.workloads.peak import CPU_PRECISIONS, PeakEntry, measure_peak

FAST = {"device": "cpu", "size": 64, "budget_s": 0.01, "copy_bytes": 1 << 20}


def test_cpu_peak_has_rate_and_bandwidth_but_no_datasheet():
    steps = []
    report = measure_peak(**FAST, on_progress=lambda *step: steps.append(step))
    assert list(report.tflops) == list(CPU_PRECISIONS) == ["fp32"]
    assert report.tflops["fp32"] > 0 and report.mem_bw_gbs > 0
    entry = report.entry("float32")
    assert entry.outcome == "ok" and entry.rel_error < 1e-5 and entry.timing.samples_ms
    assert entry.datasheet_tflops is None and entry.ratio is None
    assert report.datasheet_mem_bw_gbs is None and report.mem_bw_ratio is None
    assert report.device_name.startswith("CPU") and report.spec_name is None
    assert steps == [(1, 2, "matmul fp32"), (2, 2, "copy bandwidth")]
    json.dumps(report.to_dict())


def test_unsupported_precisions_are_listed_not_crashed():
    report = measure_peak(**FAST, precisions=["fp32", "tf32", "fp8"])
    assert list(report.tflops) == ["fp32"]
    assert set(report.unsupported) == {"tf32", "fp8"} and report.failed == {}
    assert "fp32" in report.unsupported["tf32"] and "8.9" in report.unsupported["fp8"]
    assert report.entry("fp8").tflops is None
    with pytest.raises(KeyError, match="bf16"):
        report.entry("bf16")


def test_wrong_result_is_reported_as_wrong(monkeypatch):
    monkeypatch.setattr(precision_module.torch, "matmul",
                        lambda a, b: torch.zeros(a.shape[0], b.shape[1], dtype=a.dtype))
    report = measure_peak(**FAST)
    entry = report.entry("fp32")
    assert entry.outcome == "wrong" and entry.tflops is None and entry.timing is None
    assert entry.rel_error == pytest.approx(1.0)
    assert report.tflops == {} and report.unsupported == {}
    assert "relative error" in report.failed["fp32"]


def test_out_of_memory_becomes_an_entry(monkeypatch):
    def oom(*args, **kwargs):
        raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(peak_module, "make_operands", oom)
    entry = measure_peak(**FAST).entry("fp32")
    assert entry.outcome == "oom" and "smaller size" in entry.message
    assert entry.datasheet_source == "CPUs are not in the datasheet table"


def test_other_errors_propagate(monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr(peak_module, "make_operands", broken)
    with pytest.raises(RuntimeError, match="a bug"):
        measure_peak(**FAST)


def test_cancel_and_bad_size():
    token = CancelToken()
    token.cancel()
    with pytest.raises(Cancelled):
        measure_peak(**FAST, cancel=token)
    with pytest.raises(ValueError, match="size=-8"):
        measure_peak(**{**FAST, "size": -8})


def test_entry_ratio_against_datasheet():
    entry = PeakEntry("bf16", "ok", tflops=250.0, datasheet_tflops=312.0)
    assert entry.ratio == pytest.approx(250 / 312)
    assert PeakEntry("bf16", "ok", tflops=250.0).ratio is None


def test_measured_peaks_feed_the_percent_of_peak_axis():
    """An unknown device (this CPU) has no datasheet row: the measured peak stands in."""
    import pandas as pd

    from a800lab.figures.sweep import throughput_figure

    report = measure_peak(device="cpu", size=64, budget_s=0.02, copy_bytes=1 << 20)
    peak = report.tflops["fp32"]
    df = pd.DataFrame({"size": [64], "precision": ["fp32"], "outcome": ["ok"],
                       "throughput": [peak / 2], "throughput_unit": ["TFLOP/s"],
                       "time_ms": [[1.0, 1.0]], "median_ms": [1.0], "label": ["cpu"],
                       "device_name": [report.device_name]})
    fig = throughput_figure(df, "size", peak_tflops=report.tflops)
    ax = fig.axes[0]
    (secondary,) = ax.child_axes
    assert secondary.get_ylabel() == f"% of peak ({peak:g} TFLOP/s)"
    ax.set_ylim(0, peak)  # the measured peak reads as 100% on the secondary scale
    fig.draw_without_rendering()
    assert secondary.get_ylim() == pytest.approx((0.0, 100.0))
