"""Training figures: what each draws, the device in the title, legends outside, empty frames."""

import pandas as pd
import pytest
import torch

from a800lab.core.results import records_to_frame
from a800lab.core.sweep import run_sweep
from a800lab.figures.training import (
    gradient_histogram_figure,
    loss_curves_figure,
    max_batch_figure,
    memory_breakdown_figure,
    scaler_figure,
    training_figure,
)
from a800lab.workloads.training.loss_scaling import GradientSample
from a800lab.workloads.training.max_batch import MaxBatchResult, TrialRecord
from a800lab.workloads.training.point import train_point


@pytest.fixture(scope="module")
def frame():
    torch.set_num_threads(1)
    result = run_sweep(train_point, {"precision": ["fp32", "bf16"], "batch_size": [4, 16]},
                       fixed={"train_steps": 3, "budget_s": 0.01}, workload="train",
                       device="cpu")
    return records_to_frame(result.records)


def _gids(fig):
    return {artist.get_gid() for ax in fig.axes for artist in [*ax.lines, *ax.patches]}


def _legend_outside(ax):
    legend = ax.get_legend()
    return legend is not None and legend.get_bbox_to_anchor().x0 >= ax.bbox.x1 - 1


def test_training_figure_has_throughput_breakdown_and_loss(frame):
    fig = training_figure(frame, "batch_size", series="precision")
    throughput, memory, loss = fig.axes[:3]
    assert "CPU fallback" in throughput.get_title()
    assert {"part:param_bytes", "part:optimizer_state_bytes", "part:activation_bytes",
            "peak:predicted", "peak:step", "loss"} <= _gids(fig)
    assert len(memory.patches) >= 4 * 4  # four points, at least four components each
    assert [t.get_text() for t in memory.get_xticklabels()] == ["4\nfp32", "4\nbf16",
                                                                "16\nfp32", "16\nbf16"]
    assert len([ln for ln in loss.lines if ln.get_gid() == "loss"]) == 4
    assert all(_legend_outside(ax) for ax in (throughput, memory, loss))


def test_breakdown_bars_stack_the_counted_components(frame):
    fig = memory_breakdown_figure(frame[frame["precision"] == "fp32"], "batch_size")
    ax = fig.axes[0]
    assert "CPU fallback" in fig.get_suptitle()
    row = frame[frame["precision"] == "fp32"].sort_values("batch_size").iloc[0]
    scale = 2**10 if row["counted_bytes"] < 2**20 else 2**20
    tops = [p.get_y() + p.get_height() for p in ax.patches if p.get_x() < 0.5]
    assert max(tops) == pytest.approx(row["counted_bytes"] / scale)


def test_an_own_peak_far_above_the_counts_is_marked_on_the_top_edge(frame):
    shifted = frame.assign(peak_rss_bytes=frame["counted_bytes"] * 100)
    fig = memory_breakdown_figure(shifted, "batch_size", series="precision")
    assert "peak:own:above" in _gids(fig)
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert any("above the axis (up to" in label for label in labels)


def test_empty_frames_say_so():
    empty = pd.DataFrame()
    for fig in (training_figure(empty, "batch_size"),
                memory_breakdown_figure(empty, "batch_size"), loss_curves_figure(empty)):
        texts = [t.get_text() for ax in fig.axes for t in ax.texts]
        assert any("no successful points yet" in t for t in texts)


def test_scaler_figure_marks_skips_and_names_the_device():
    runs = {"fp16 + GradScaler": [
        {"step": 1, "loss": 1.0, "scale": 4.0, "skipped": False, "zero_grad_fraction": 0.0},
        {"step": 2, "loss": 0.9, "scale": 2.0, "skipped": True, "zero_grad_fraction": 0.0}],
        "fp32": [{"step": 1, "loss": 1.0, "scale": None, "skipped": False},
                 {"step": 2, "loss": 0.8, "scale": None, "skipped": False}]}
    fig = scaler_figure(runs, device="cpu")
    assert {"skipped", "scale:fp16 + GradScaler", "loss:fp32"} <= _gids(fig)
    assert "CPU fallback" in fig.get_suptitle()
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert "fp16 + GradScaler (1 skipped)" in labels


def test_gradient_histogram_gives_the_shares_in_the_legend():
    sample = GradientSample(params={"w": torch.tensor([2.0**-32, 2.0**-10], dtype=torch.float64)})
    fig = gradient_histogram_figure(sample, scale=2.0**16, device="cpu")
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert "params as computed: 50.0% to zero, 0.0% subnormal, 0.00% inf" in labels
    assert "params x 65536: 0.0% to zero, 50.0% subnormal, 0.00% inf" in labels


def test_max_batch_figure_draws_every_trial():
    result = MaxBatchResult(batch_size=8, limit_bytes=1000, margin=0.1, trials=[
        TrialRecord("probe", 1, 1, "ok", peak_bytes=200),
        TrialRecord("grow", 16, 1, "oom", message="out of memory"),
        TrialRecord("bisect", 12, 1, "skipped", predicted_bytes=1300),
        TrialRecord("verify", 8, 1, "ok", peak_bytes=850)], device="cpu")
    fig = max_batch_figure(result)
    assert {"trial:ok", "trial:oom", "trial:skipped", "limit", "budget", "answer"} <= \
        _gids(fig)
    assert "3 trials run, 1 skipped" in fig.axes[0].get_title()


def test_bars_follow_the_throughput_plots_order_for_categories(frame):
    """precision swept fp32 then bf16: the bars read in that order too (not alphabetical)."""
    fig = training_figure(frame[frame["batch_size"] == 4], "precision")
    memory = fig.axes[1]
    assert [t.get_text() for t in memory.get_xticklabels()] == ["fp32", "bf16"]


def test_loss_curves_on_top_of_each_other_stay_findable():
    curve = [2.3, 2.2, 2.1, 2.0, 1.9, 1.8]
    df = pd.DataFrame({"precision": ["fp32", "bf16", "fp16"], "outcome": ["ok"] * 3,
                       "loss_curve": [curve, [v + 1e-4 for v in curve], [v - 0.3 for v in curve]],
                       "run_id": ["r1"] * 3, "label": ["CPU: x"] * 3,
                       "device_name": ["CPU: x"] * 3})
    fig = loss_curves_figure(df, x="precision")
    ax = fig.axes[0]
    lines = [ln for ln in ax.lines if ln.get_gid() == "loss"]
    assert len({ln.get_marker() for ln in lines}) == 3  # each its own marker ...
    assert len({str(ln.get_markevery()) for ln in lines}) == 3  # ... on steps of its own
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "precision=bf16 (lies on precision=fp32)" in labels
    assert "precision=fp16" in labels  # 0.3 below: visibly apart, not called coincident
