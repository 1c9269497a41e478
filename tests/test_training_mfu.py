"""MFU of a training point: FlopCounterMode's FLOPs per sample times samples/s over the peak,
checked against a model whose FLOPs are counted by hand."""

import pytest
import torch
from torch import nn

from a800lab.core.environment import environment
from a800lab.core.specs import peak_for
from a800lab.workloads.models.presets import preset
from a800lab.workloads.models.task import custom_task
from a800lab.workloads.peak import record_peaks
from a800lab.workloads.training.point import count_model_flops, mfu_figures, peaks_for, train_point
from a800lab.workloads.training.spec import TrainSpec

pytestmark = pytest.mark.usefixtures("one_torch_thread")
IN, OUT = 64, 32


def one_linear():
    torch.manual_seed(0)
    return nn.Linear(IN, OUT, bias=False)


def batch(n):
    return torch.randn(n, IN), torch.randint(0, OUT, (n,))


# forward x @ W.T: 2*IN*OUT per sample; backward: the weight's gradient, 2*IN*OUT more (the
# input needs no gradient, so autograd computes none)
HAND_FLOPS_PER_SAMPLE = 4 * IN * OUT


class RecordedPeak:
    """What record_peaks reads of a PeakReport: a measured fp32 rate on this machine."""

    device_name, mem_bw_gbs, size = "CPU: test", 10.0, 512
    tflops, noisy = {"fp32": 0.05}, {}


def test_mfu_of_a_point_is_flops_times_samples_per_s_over_the_peak(tmp_path, monkeypatch):
    monkeypatch.setenv("A800LAB_PEAKS", str(tmp_path / "peaks.json"))
    record_peaks(RecordedPeak(), environment("cpu"))
    point = train_point(task=custom_task(one_linear, batch), batch_size=16, accum_steps=2,
                        train_steps=2, budget_s=0.05, predict_memory=False, device="cpu")
    assert point["model_flops_per_sample"] == HAND_FLOPS_PER_SAMPLE
    samples_per_s = point["throughput"]  # at the effective batch of 32
    achieved_tflops = HAND_FLOPS_PER_SAMPLE * samples_per_s / 1e12
    assert point["achieved_tflops"] == pytest.approx(achieved_tflops)
    assert point["measured_peak_tflops"] == 0.05
    assert point["mfu_pct_of_measured_peak"] == pytest.approx(100 * achieved_tflops / 0.05)
    # a CPU has no datasheet row: its MFU against the datasheet is unknown, not guessed
    assert point["datasheet_peak_tflops"] is None and point["mfu_pct_of_datasheet_peak"] is None
    assert point["peak_precision"] == "fp32"
    assert point["model_flops_by_op"] == {"aten.mm": HAND_FLOPS_PER_SAMPLE}


def test_without_a_recorded_peak_the_mfu_is_unknown(tmp_path, monkeypatch):
    monkeypatch.setenv("A800LAB_PEAKS", str(tmp_path / "none.json"))
    assert peaks_for("fp32", "cpu")["measured_peak_tflops"] is None


def test_mfu_against_the_datasheet_uses_the_steps_matmul_precision():
    datasheet, source = peak_for("NVIDIA A800-SXM4-80GB", "bf16")  # 312 TFLOP/s dense
    peaks = {"peak_precision": "bf16", "datasheet_peak_tflops": datasheet,
             "datasheet_peak_source": source, "measured_peak_tflops": None}
    got = mfu_figures(6e9, 20_000.0, peaks)  # 6 GFLOP per sample at 20k samples/s
    assert got["achieved_tflops"] == pytest.approx(120.0)
    assert got["mfu_pct_of_datasheet_peak"] == pytest.approx(100 * 120 / 312)
    assert got["mfu_pct_of_measured_peak"] is None


def test_checkpointing_recompute_is_not_model_flops():
    plain = count_model_flops(TrainSpec(model="mlp", batch_size=8), preset("mlp"), "cpu")
    recomputed = count_model_flops(TrainSpec(model="mlp", batch_size=8, checkpointing=True),
                                   preset("mlp"), "cpu")
    assert plain.per_sample == recomputed.per_sample > 0
    # the MLP preset by hand: 64-128-128-10 Linear layers; forward 2 FLOPs per weight, the
    # backward twice that except the first layer's input gradient (the data needs none)
    weights = 64 * 128 + 128 * 128 + 128 * 10
    assert plain.per_sample == 2 * weights + 2 * weights + 2 * (128 * 128 + 128 * 10)
