"""Tests for a800lab.plots: what the figures contain (lines, bands, markers, texts)."""

from __future__ import annotations

import io
import subprocess
import sys
import warnings

import numpy as np
import pandas as pd
import pytest
from matplotlib.axes import Axes
from matplotlib.collections import PolyCollection
from matplotlib.container import ErrorbarContainer
from matplotlib.figure import Figure

from a800lab import plots

GIB = 2**30
CAPACITY = 80 * GIB


def row(**overrides) -> dict:
    """One ok matmul point in the results-frame layout; override any column."""
    base = dict(n=1024, precision="fp16", workload="matmul", outcome="ok", message="",
                throughput=100.0, throughput_unit="TFLOP/s", time_ms=[1.0, 1.0, 1.0],
                median_ms=1.0, peak_allocated_bytes=2 * GIB, peak_reserved_bytes=4 * GIB,
                capacity_bytes=CAPACITY, device_name="Imaginary GPU 9000", label="gpu0",
                flop_count=2e12, bytes_moved=1e10, tflops=100.0)
    if overrides.get("outcome", "ok") != "ok":
        base.update(throughput=np.nan, time_ms=[], median_ms=np.nan, tflops=np.nan,
                    peak_allocated_bytes=np.nan, peak_reserved_bytes=np.nan)
    base.update(overrides)
    return base


def frame(*rows: dict) -> pd.DataFrame:
    return pd.DataFrame(list(rows))


def data_lines(ax: Axes) -> list:
    """Measurement lines: labelled, not failure markers or reference lines."""
    return [ln for ln in ax.get_lines()
            if ln.get_gid() is None and not ln.get_label().startswith("_")]


def by_gid(ax: Axes, gid: str) -> list:
    return [ln for ln in ax.get_lines() if ln.get_gid() == gid]


def texts(ax: Axes) -> list[str]:
    return [t.get_text() for t in ax.texts]


def sweep_frame() -> pd.DataFrame:
    rows = [row(n=n, precision=p, throughput=tput * n / 1024)
            for p, tput in (("fp16", 100.0), ("fp32", 10.0)) for n in (512, 1024, 2048)]
    return frame(*rows, row(n=4096, precision="fp16", outcome="oom"),
                 row(n=256, precision="fp32", outcome="wrong"))


# ---- throughput -------------------------------------------------------------------------------

def test_throughput_one_line_per_series_with_ok_points_only():
    fig = plots.throughput_figure(sweep_frame(), "n", series="precision", peak_tflops=1000.0)
    ax = fig.axes[0]
    lines = {ln.get_label(): ln for ln in data_lines(ax)}
    assert set(lines) == {"fp16", "fp32"}
    np.testing.assert_allclose(lines["fp16"].get_xdata(), [512, 1024, 2048])
    np.testing.assert_allclose(lines["fp16"].get_ydata(), [50, 100, 200])
    np.testing.assert_allclose(lines["fp32"].get_ydata(), [5, 10, 20])
    assert ax.get_ylabel() == "TFLOP/s"
    assert ax.get_xscale() == "log"  # powers of two -> log2 axis
    assert [t.get_text() for t in ax.get_xticklabels()] == ["256", "512", "1024", "2048", "4096"]


def test_throughput_band_spans_the_timing_quartiles():
    # samples 1..5 ms: q25 = 2, median = 3, q75 = 4 -> band 100*3/4 .. 100*3/2
    df = frame(row(n=512, time_ms=[1.0, 2.0, 3.0, 4.0, 5.0], median_ms=3.0),
               row(n=1024, time_ms=[1.0, 2.0, 3.0, 4.0, 5.0], median_ms=3.0))
    ax = plots.throughput_figure(df, "n", peak_tflops=1000.0).axes[0]
    bands = [c for c in ax.collections if isinstance(c, PolyCollection)]
    assert len(bands) == 1
    ys = bands[0].get_paths()[0].vertices[:, 1]
    assert ys.min() == pytest.approx(75.0)
    assert ys.max() == pytest.approx(150.0)


def test_series_defaults_to_label_and_repeats_take_the_median():
    df = frame(row(n=512, throughput=10.0, label="A800"), row(n=512, throughput=30.0, label="A800"),
               row(n=512, throughput=20.0, label="A800"), row(n=512, throughput=7.0, label="H200"))
    fig = plots.throughput_figure(df, "n", peak_tflops=1000.0)
    lines = {ln.get_label(): ln for ln in data_lines(fig.axes[0])}
    assert list(lines["A800"].get_ydata()) == [20.0]
    assert list(lines["H200"].get_ydata()) == [7.0]


def test_secondary_axis_shows_percent_of_peak():
    fig = plots.throughput_figure(frame(row(throughput=100.0)), "n", peak_tflops=200.0)
    ax = fig.axes[0]
    (secondary,) = ax.child_axes
    assert "200" in secondary.get_ylabel()
    ax.set_ylim(0, 100)
    fig.draw_without_rendering()
    assert secondary.get_ylim() == pytest.approx((0.0, 50.0))


def test_peak_dict_is_looked_up_by_precision():
    df = frame(row(precision="bf16", throughput=100.0))
    fig = plots.throughput_figure(df, "n", peak_tflops={"bf16": 400.0, "fp32": 20.0})
    ax = fig.axes[0]
    (secondary,) = ax.child_axes
    ax.set_ylim(0, 100)
    fig.draw_without_rendering()
    assert secondary.get_ylim() == pytest.approx((0.0, 25.0))


def test_categorical_x_with_per_point_peaks_annotates_percentages():
    df = frame(row(precision="fp32", throughput=10.0), row(precision="fp16", throughput=100.0),
               row(precision="fp8", outcome="error"))
    ax = plots.throughput_figure(df, "precision", peak_tflops={"fp32": 20.0, "fp16": 400.0}).axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["fp32", "fp16", "fp8"]
    assert not ax.child_axes  # two different peaks: no single % axis
    assert sorted(texts(ax)) == ["25%", "50%"]
    (bars,) = [c for c in ax.containers if isinstance(c, ErrorbarContainer)]
    data_line = bars.lines[0]  # errorbar keeps object arrays (unit support): compare as floats
    np.testing.assert_allclose(data_line.get_xdata().astype(float), [0, 1])
    np.testing.assert_allclose(data_line.get_ydata().astype(float), [10, 100])
    (error,) = by_gid(ax, "outcome:error")
    assert list(error.get_xdata()) == [2.0]


def test_unknown_peak_gives_no_secondary_axis_and_says_so():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the specs table may warn about the unknown device
        ax = plots.throughput_figure(frame(row()), "n").axes[0]
    assert not ax.child_axes
    assert "peak unknown" in ax.get_title()


def test_no_percent_axis_for_other_units():
    df = frame(row(batch_size=8, throughput=900.0, throughput_unit="samples/s"))
    ax = plots.throughput_figure(df, "batch_size", peak_tflops=100.0).axes[0]
    assert not ax.child_axes
    assert ax.get_ylabel() == "samples/s"
    assert ax.get_xscale() == "linear"


def test_failed_points_sit_on_the_x_axis_with_distinct_markers():
    ax = plots.throughput_figure(sweep_frame(), "n", peak_tflops=1000.0).axes[0]
    (oom,) = by_gid(ax, "outcome:oom")
    (wrong,) = by_gid(ax, "outcome:wrong")
    assert list(oom.get_xdata()) == [4096.0] and list(oom.get_ydata()) == [0.0]
    assert list(wrong.get_xdata()) == [256.0]
    assert oom.get_marker() != wrong.get_marker()
    assert oom.get_transform() == ax.get_xaxis_transform()  # axes y = 0 whatever the y range
    assert "oom (1)" in ax.get_legend_handles_labels()[1]


@pytest.mark.parametrize("df", [pd.DataFrame(), frame(row(outcome="oom"), row(outcome="error"))],
                         ids=["empty", "all-failed"])
def test_empty_or_all_failed_frame_says_so(df):
    fig = plots.throughput_and_memory_figure(df, "n")
    for ax in fig.axes:
        assert plots.NO_POINTS_TEXT in texts(ax)
        assert not data_lines(ax)


def test_missing_column_is_a_value_error_naming_the_choices():
    with pytest.raises(ValueError, match=r"'nope' is not in the results frame.*'n'.*'precision'"):
        plots.throughput_figure(sweep_frame(), "nope")
    with pytest.raises(ValueError, match="'device'"):
        plots.memory_figure(sweep_frame(), "n", series="device")


# ---- memory -----------------------------------------------------------------------------------

def test_memory_lines_capacity_and_oom_at_capacity():
    df = frame(row(n=512, peak_allocated_bytes=1 * GIB, peak_reserved_bytes=2 * GIB),
               row(n=1024, peak_allocated_bytes=3 * GIB, peak_reserved_bytes=4 * GIB),
               row(n=2048, outcome="oom"))
    ax = plots.memory_figure(df, "n").axes[0]
    lines = {ln.get_label(): ln for ln in data_lines(ax)}
    np.testing.assert_allclose(lines["gpu0 allocated"].get_ydata(), [1, 3])
    np.testing.assert_allclose(lines["gpu0 reserved"].get_ydata(), [2, 4])
    assert lines["gpu0 reserved"].get_linestyle() == "--"
    (capacity,) = by_gid(ax, "capacity")
    assert list(capacity.get_ydata()) == [80.0, 80.0]
    (oom,) = by_gid(ax, "outcome:oom")
    assert (list(oom.get_xdata()), list(oom.get_ydata())) == ([2048.0], [80.0])


def test_memory_oom_without_known_capacity_goes_on_the_axis():
    df = frame(row(n=512, capacity_bytes=np.nan), row(n=1024, outcome="oom", capacity_bytes=np.nan))
    ax = plots.memory_figure(df, "n").axes[0]
    assert not by_gid(ax, "capacity")
    (oom,) = by_gid(ax, "outcome:oom")
    assert oom.get_transform() == ax.get_xaxis_transform()


def test_memory_without_readings_says_so():
    df = frame(row(peak_allocated_bytes=np.nan, peak_reserved_bytes=np.nan))
    ax = plots.memory_figure(df, "n").axes[0]
    assert "no memory readings for these points" in texts(ax)


# ---- heatmap ----------------------------------------------------------------------------------

def test_heatmap_values_medians_and_failed_cells():
    df = frame(row(block_m=64, block_n=64, throughput=10.0),
               row(block_m=64, block_n=64, throughput=30.0),
               row(block_m=64, block_n=64, throughput=20.0),
               row(block_m=128, block_n=64, throughput=40.0),
               row(block_m=64, block_n=128, throughput=50.0),
               row(block_m=128, block_n=128, outcome="oom"))
    fig = plots.heatmap_figure(df, "block_m", "block_n")
    ax = fig.axes[0]
    (image,) = ax.images
    grid = np.ma.filled(image.get_array().astype(float), np.nan)  # rows = block_n, cols = block_m
    np.testing.assert_allclose(grid, [[20.0, 40.0], [50.0, np.nan]])
    assert sorted(texts(ax)) == ["20", "40", "50", "oom"]
    (oom_text,) = [t for t in ax.texts if t.get_text() == "oom"]
    assert oom_text.get_position() == (1, 1) and oom_text.get_color() == "gray"
    assert [t.get_text() for t in ax.get_xticklabels()] == ["64", "128"]
    assert fig.axes[1].get_ylabel() == "throughput (TFLOP/s)"  # the colourbar


def test_heatmap_all_failed_and_bad_value_column():
    ax = plots.heatmap_figure(frame(row(outcome="oom")), "n", "precision").axes[0]
    assert texts(ax) == [plots.NO_POINTS_TEXT]
    with pytest.raises(ValueError, match="'gflops'"):
        plots.heatmap_figure(frame(row()), "n", "precision", value="gflops")


# ---- roofline ---------------------------------------------------------------------------------

def test_roofline_ceilings_ridge_and_points():
    df = frame(row(flop_count=2e12, bytes_moved=1e10, tflops=100.0),  # 200 FLOP/B
               row(flop_count=1e11, bytes_moved=1e10, tflops=10.0))   # 10 FLOP/B
    ax = plots.roofline_figure(df, peak_tflops=300.0, mem_bw_gbs=2000.0,
                               measured_peak_tflops=250.0).axes[0]
    assert ax.get_xscale() == ax.get_yscale() == "log"
    (points,) = data_lines(ax)[:1]
    assert sorted(points.get_xdata()) == [10.0, 200.0]
    (roof,) = by_gid(ax, "roof:datasheet")
    lo, ridge, hi = roof.get_xdata()
    assert ridge == pytest.approx(150.0)  # 300 TFLOP/s / 2000 GB/s = 150 FLOP/byte
    assert (lo, hi) == pytest.approx((10.0 / 8, 200.0 * 8))
    np.testing.assert_allclose(roof.get_ydata(), [2000.0 * lo / 1e3, 300.0, 300.0])
    (measured,) = by_gid(ax, "roof:measured")
    assert measured.get_linestyle() == "--"
    assert measured.get_xdata()[1] == pytest.approx(125.0)  # bandwidth reused from datasheet
    assert max(measured.get_ydata()) == 250.0
    (ridge_mark,) = by_gid(ax, "ridge:datasheet")
    assert (ridge_mark.get_xdata()[0], ridge_mark.get_ydata()[0]) == pytest.approx((150.0, 300.0))
    assert "ridge 150 FLOP/B" in texts(ax)


def test_roofline_falls_back_to_time_and_handles_unknown_peak():
    df = frame(row(flop_count=4e9, bytes_moved=1e9, tflops=np.nan, median_ms=2.0))
    ax = plots.roofline_figure(df, peak_tflops=None, mem_bw_gbs=None).axes[0]
    (points,) = data_lines(ax)
    assert list(points.get_ydata()) == pytest.approx([2.0])  # 4e9 FLOP in 2 ms = 2 TFLOP/s
    assert "peak unknown" in ax.get_title() and not by_gid(ax, "roof:datasheet")
    with pytest.raises(ValueError, match="peak_tflops must be a positive number"):
        plots.roofline_figure(df, peak_tflops=-1.0, mem_bw_gbs=100.0)
    empty = plots.roofline_figure(pd.DataFrame(), peak_tflops=312.0, mem_bw_gbs=2039.0).axes[0]
    assert plots.NO_POINTS_TEXT in texts(empty) and by_gid(empty, "roof:datasheet")


# ---- telemetry --------------------------------------------------------------------------------

def snapshot(t_s, **overrides) -> dict:
    base = dict(t_s=t_s, gpu_util_pct=90.0, mem_used_bytes=10 * GIB, power_w=300.0,
                sm_clock_mhz=1410.0, throttle_reasons=[])
    return {**base, **overrides}


def span_x(patch) -> tuple[float, float]:
    xs = patch.get_patch_transform().transform(patch.get_path().vertices)[:, 0]
    return float(xs.min()), float(xs.max())


def test_telemetry_stacks_four_panels_skips_none_and_shades_throttling():
    samples = [snapshot(100.0), snapshot(100.5, power_w=None),
               snapshot(101.0, throttle_reasons=["sw_power_cap"]),
               snapshot(101.5, throttle_reasons=["sw_thermal_slowdown"]), snapshot(102.0),
               snapshot(102.5, throttle_reasons=["gpu_idle"])]
    fig = plots.telemetry_figure(samples)
    assert len(fig.axes) == 4
    util, memory, power, clock = fig.axes
    np.testing.assert_allclose(util.get_lines()[0].get_xdata(), [0, 0.5, 1, 1.5, 2, 2.5])
    assert list(memory.get_lines()[0].get_ydata()) == [10.0] * 6
    assert len(power.get_lines()[0].get_xdata()) == 5  # the None reading is skipped
    for ax in fig.axes:
        (span,) = ax.patches  # idle is not throttling
        assert span_x(span) == pytest.approx((1.0, 2.0))
    assert util.get_legend_handles_labels()[1] == [
        "throttled: sw_power_cap, sw_thermal_slowdown"]


def test_telemetry_empty_and_unavailable_metrics():
    (ax,) = plots.telemetry_figure([]).axes
    assert texts(ax) == ["no telemetry samples"]
    fig = plots.telemetry_figure([snapshot(0.0, power_w=None), snapshot(1.0, power_w=None)])
    assert texts(fig.axes[2]) == ["n/a"] and not fig.axes[2].get_lines()


# ---- composition, rendering and layering ------------------------------------------------------

def test_combined_figure_and_axes_injection():
    fig = plots.throughput_and_memory_figure(sweep_frame(), "n", series="precision",
                                             peak_tflops=400.0)
    left, right = fig.axes
    assert left.get_title().startswith("throughput") and right.get_title().startswith("peak memory")
    assert len(data_lines(left)) == 2 and len(data_lines(right)) == 4
    own = Figure()
    first, second = own.subplots(1, 2)
    assert plots.throughput_figure(sweep_frame(), "n", ax=first, peak_tflops=400.0) is own
    assert plots.heatmap_figure(sweep_frame(), "n", "precision", ax=second) is own
    assert data_lines(first) and second.images


def test_figures_render_to_png_headless():
    df = sweep_frame()
    figures = [plots.throughput_and_memory_figure(df, "precision", peak_tflops=400.0),
               plots.heatmap_figure(df, "n", "precision"),
               plots.roofline_figure(df, peak_tflops=312.0, mem_bw_gbs=2039.0),
               plots.telemetry_figure([snapshot(0.0), snapshot(1.0)])]
    for fig in figures:
        buf = io.BytesIO()
        fig.savefig(buf, format="png")
        assert buf.getvalue().startswith(b"\x89PNG")


def test_frames_from_the_results_module_plot():
    from a800lab.core.results import Record, records_to_frame

    env = {"device_name": "NVIDIA A800-SXM4-80GB"}
    records = [Record(workload="matmul", params={"n": n, "precision": "fp16"}, outcome="ok",
                      throughput=float(n), throughput_unit="TFLOP/s", time_ms=(1.0, 1.1, 0.9),
                      memory={"peak_allocated_bytes": n * 2**20, "capacity_bytes": CAPACITY},
                      env=env) for n in (64, 128, 256)]
    records.append(Record(workload="matmul", params={"n": 512, "precision": "fp16"},
                          outcome="oom", env=env))
    fig = plots.throughput_and_memory_figure(records_to_frame(records), "n", peak_tflops=312.0)
    (line,) = data_lines(fig.axes[0])
    assert list(line.get_ydata()) == [64.0, 128.0, 256.0]
    assert by_gid(fig.axes[1], "outcome:oom")


def test_plots_never_touch_pyplot():
    code = "import sys, a800lab.plots; sys.exit('matplotlib.pyplot' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
