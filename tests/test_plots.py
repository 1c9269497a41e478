"""Tests for a800lab.figures (sweep, tiles, device): what the figures contain (lines, bands,
markers, texts, titles)."""

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
from matplotlib.figure import Figure

from a800lab import figures as plots

GIB = 2**30
CAPACITY = 80 * GIB


def row(**overrides) -> dict:
    """One ok matmul point in the results-frame layout; override any column."""
    base = dict(n=1024, precision="fp16", workload="matmul", outcome="ok", message="",
                throughput=100.0, throughput_unit="TFLOP/s", time_ms=[1.0, 1.0, 1.0],
                median_ms=1.0, peak_allocated_bytes=2 * GIB, peak_reserved_bytes=4 * GIB,
                capacity_bytes=CAPACITY, device_name="Imaginary GPU 9000", mode="GPU",
                label="gpu0", flop_count=2e12, bytes_moved=1e10, tflops=100.0,
                run_id="20260101T000000.000Z-0001", noisy=False)
    if overrides.get("outcome", "ok") != "ok":
        base.update(throughput=np.nan, time_ms=[], median_ms=np.nan, tflops=np.nan,
                    peak_allocated_bytes=np.nan, peak_reserved_bytes=np.nan)
    base.update(overrides)
    return base


def frame(*rows: dict) -> pd.DataFrame:
    return pd.DataFrame(list(rows))


def data_lines(ax: Axes) -> list:
    """Measurement lines (one per series and run), not markers or reference lines."""
    return by_gid(ax, "data")


def legend_labels(fig: Figure) -> list[str]:
    legends = [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_legend())]
    return [" ".join(t.get_text().split()) for leg in legends for t in leg.get_texts()]


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
    (line,) = data_lines(ax)
    assert line.get_linestyle() == "None"  # categories are not joined by a line
    np.testing.assert_allclose(line.get_xdata(), [0, 1])
    np.testing.assert_allclose(line.get_ydata(), [10, 100])
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
    assert "oom (1)" in legend_labels(ax.figure)


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


# ---- runs, noise, legends ---------------------------------------------------------------------

RUN_1, RUN_2 = "20260101T000000.000Z-0001", "20260102T000000.000Z-0002"


def two_runs() -> pd.DataFrame:
    """The same two points measured in two runs: 0.0014 then 0.1201 (the issue's numbers)."""
    return frame(*(row(n=n, throughput=t * n, run_id=run) for run, t in
                   ((RUN_1, 0.0014), (RUN_2, 0.1201)) for n in (256, 512)))


def test_each_run_is_its_own_line_newest_strongest_never_averaged():
    fig = plots.throughput_figure(two_runs(), "n", series="precision", peak_tflops=1000.0)
    ax = fig.axes[0]
    old, new = sorted(data_lines(ax), key=lambda ln: ln.get_alpha())
    np.testing.assert_allclose(old.get_ydata(), [0.0014 * 256, 0.0014 * 512])
    np.testing.assert_allclose(new.get_ydata(), [0.1201 * 256, 0.1201 * 512])
    assert new.get_alpha() == 1.0 and old.get_alpha() < 0.5
    assert new.get_linewidth() > old.get_linewidth()
    assert old.get_color() == new.get_color()  # same series, same colour
    labels = legend_labels(fig)
    assert "fp16 (newest of 2 runs)" in labels and "earlier runs (faded)" in labels
    assert not any("median" in label for label in labels)


def test_earlier_runs_can_be_hidden():
    fig = plots.throughput_and_memory_figure(two_runs(), "n", series="precision",
                                             earlier_runs="hidden")
    for ax in fig.axes:
        (line,) = data_lines(ax)
        assert line.get_alpha() == 1.0
    assert list(data_lines(fig.axes[0])[0].get_ydata()) == pytest.approx([0.1201 * 256,
                                                                          0.1201 * 512])
    assert "fp16 (newest run; 1 earlier hidden)" in legend_labels(fig)
    with pytest.raises(ValueError, match="earlier_runs='dim'"):
        plots.throughput_figure(two_runs(), "n", earlier_runs="dim")


def test_a_series_newest_run_stays_strong_when_another_series_ran_later():
    df = frame(row(n=256, precision="fp32", run_id=RUN_1), row(n=256, precision="bf16",
                                                                run_id=RUN_2))
    ax = plots.throughput_figure(df, "n", series="precision", peak_tflops=1000.0).axes[0]
    assert [ln.get_alpha() for ln in data_lines(ax)] == [1.0, 1.0]


def test_points_merged_within_a_run_say_so():
    df = frame(row(n=512, throughput=10.0, precision="fp16"),
               row(n=512, throughput=30.0, precision="fp32"))
    fig = plots.throughput_figure(df, "n", peak_tflops=1000.0)  # series = label: one line
    (line,) = data_lines(fig.axes[0])
    assert list(line.get_ydata()) == [20.0]
    assert "several points per x in a run: median drawn" in legend_labels(fig)


def test_noisy_points_are_hollow_and_explained():
    df = frame(row(n=256, noisy=True, time_ms=[1.0, 2.0, 3.0], median_ms=2.0),
               row(n=512), row(n=1024, noisy=True))
    fig = plots.throughput_figure(df, "n", peak_tflops=1000.0)
    ax = fig.axes[0]
    (line,) = data_lines(ax)
    assert line.get_markevery() == [1]  # filled marker only on the clean point
    (hollow,) = by_gid(ax, "noisy")
    assert list(hollow.get_xdata()) == [256.0, 1024.0]
    assert hollow.get_markerfacecolor() == "white"
    labels = legend_labels(fig)
    assert "noisy point (hollow): see the table" in labels
    assert "shaded: IQR of the time samples" in labels


def test_legend_names_at_most_eight_series_outside_the_axes():
    df = frame(*(row(n=n, precision=f"p{i:02d}", run_id=f"2026010{i // 10}T{i % 10}")
                 for i in range(13) for n in (256, 512)))
    fig = plots.throughput_figure(df, "n", series="precision", peak_tflops=1000.0)
    ax = fig.axes[0]
    labels = legend_labels(fig)
    named = [label for label in labels if label.startswith("p")]
    assert named == [f"p{i:02d}" for i in range(5, 13)]  # the most recent runs keep colours
    assert "+5 more series (grey): p00, p01, ..." in labels
    colours = {ln.get_color() for ln in data_lines(ax)}
    assert len(colours) == 9  # 8 distinct colours and one grey for the rest
    fig.draw_without_rendering()
    assert ax.get_legend().get_window_extent().x0 > ax.get_window_extent().x1


def test_every_figure_names_device_and_mode():
    gpu = sweep_frame()
    cpu = frame(row(device_name="CPU: Imaginary Xeon", mode="CPU fallback", torch_threads=2))
    both = pd.concat([gpu, cpu], ignore_index=True)
    expected = "Imaginary GPU 9000 (GPU) | CPU: Imaginary Xeon (CPU fallback, 2 torch threads)"
    figures = [plots.throughput_figure(both, "n", peak_tflops=1.0),
               plots.memory_figure(both, "n"),
               plots.heatmap_figure(both, "n", "precision"),
               plots.roofline_figure(both, peak_tflops=312.0, mem_bw_gbs=2039.0),
               plots.throughput_and_memory_figure(both, "n")]
    for fig in figures:
        assert fig.get_suptitle() == expected
    lent = Figure().add_subplot()
    plots.throughput_figure(cpu, "n", ax=lent)
    assert lent.get_title().endswith("\nCPU: Imaginary Xeon (CPU fallback, 2 torch threads)")
    old = frame(row(device_name="CPU: Old Box", mode=np.nan))  # before records had a mode
    assert plots.throughput_figure(old, "n").get_suptitle() == "CPU: Old Box (CPU fallback)"
    assert plots.throughput_figure(pd.DataFrame(), "n").get_suptitle() == "device not recorded"
    tele = plots.telemetry_figure([snapshot(0.0)], device="NVIDIA A800-SXM4-80GB, NVML 3")
    assert tele.get_suptitle() == "NVIDIA A800-SXM4-80GB, NVML 3 (GPU, NVML telemetry)"
    assert "GPU not named" in plots.telemetry_figure([]).get_suptitle()


def test_heatmap_cells_of_several_runs_show_the_newest_and_say_so():
    df = frame(row(block_m=64, block_n=64, throughput=10.0, run_id=RUN_1),
               row(block_m=64, block_n=64, throughput=30.0, run_id=RUN_2),
               row(block_m=128, block_n=64, throughput=40.0, run_id=RUN_1))
    ax = plots.heatmap_figure(df, "block_m", "block_n").axes[0]
    grid = np.ma.filled(ax.images[0].get_array().astype(float), np.nan)
    np.testing.assert_allclose(grid, [[30.0, 40.0]])
    assert "1 cells measured in several runs: newest shown" in ax.get_title()


# ---- memory -----------------------------------------------------------------------------------

def test_gpu_memory_far_below_capacity_names_it_in_the_caption_only():
    df = frame(row(n=512, peak_allocated_bytes=1 * GIB, peak_reserved_bytes=2 * GIB),
               row(n=1024, peak_allocated_bytes=3 * GIB, peak_reserved_bytes=4 * GIB),
               row(n=2048, outcome="oom"))
    fig = plots.memory_figure(df, "n")
    ax = fig.axes[0]
    (allocated,) = data_lines(ax)
    (reserved,) = by_gid(ax, "reserved")
    np.testing.assert_allclose(allocated.get_ydata(), [1, 3])
    np.testing.assert_allclose(reserved.get_ydata(), [2, 4])
    assert reserved.get_linestyle() == "--" and ax.get_ylabel() == "own peak memory (GiB)"
    assert not by_gid(ax, "capacity")  # 4 of 80 GiB: a line would squash the data
    fig.draw_without_rendering()
    assert ax.get_ylim()[1] < 8  # the axis is scaled to the data
    assert any("GPU memory 80.0 GiB" in t for t in texts(ax))
    assert {"solid: allocated, own peak", "dashed: reserved"} <= set(legend_labels(fig))
    (oom,) = by_gid(ax, "outcome:oom")
    assert oom.get_transform() == ax.get_xaxis_transform()


def test_gpu_memory_near_capacity_draws_the_line_and_oom_on_it():
    df = frame(row(n=512, peak_allocated_bytes=30 * GIB, peak_reserved_bytes=50 * GIB),
               row(n=2048, outcome="oom"))
    ax = plots.memory_figure(df, "n").axes[0]
    (capacity,) = by_gid(ax, "capacity")
    assert list(capacity.get_ydata()) == [80.0, 80.0]
    (oom,) = by_gid(ax, "outcome:oom")
    assert (list(oom.get_xdata()), list(oom.get_ydata())) == ([2048.0], [80.0])


def test_cpu_memory_is_the_own_peak_on_a_data_scaled_axis_capacity_in_caption():
    cpu = dict(device_name="CPU: Imaginary Xeon", mode="CPU fallback", torch_threads=1,
               peak_allocated_bytes=np.nan, peak_reserved_bytes=np.nan,
               capacity_bytes=32 * GIB, baseline_rss_bytes=900 * 2**20)
    df = frame(row(n=64, peak_rss_bytes=2 * 2**20, **cpu),
               row(n=128, peak_rss_bytes=6 * 2**20, **cpu))
    fig = plots.memory_figure(df, "n")
    ax = fig.axes[0]
    (line,) = data_lines(ax)
    np.testing.assert_allclose(line.get_ydata(), [2, 6])  # MiB above each point's start
    assert ax.get_ylabel() == "own peak memory (MiB)" and not by_gid(ax, "reserved")
    assert not by_gid(ax, "capacity")
    fig.draw_without_rendering()
    assert ax.get_ylim()[1] < 12
    (caption,) = [t for t in texts(ax) if "host RAM" in t]
    assert "host RAM 32.0 GiB" in caption and "own peak resident set" in caption
    assert "CPU: Imaginary Xeon (CPU fallback, 1 torch thread)" in fig.get_suptitle()


def test_cpu_memory_never_draws_differences_the_meter_cannot_resolve():
    """0.1 vs 1.05 MiB of resident set were drawn a full axis apart, under a caption saying the
    meter is good to a few MiB."""
    cpu = dict(device_name="CPU: Imaginary Xeon", mode="CPU fallback", torch_threads=1,
               peak_allocated_bytes=np.nan, peak_reserved_bytes=np.nan)
    df = frame(row(n=64, peak_rss_bytes=0.1 * 2**20, **cpu),
               row(n=128, peak_rss_bytes=1.05 * 2**20, **cpu))
    fig = plots.memory_figure(df, "n")
    ax = fig.axes[0]
    fig.draw_without_rendering()
    assert ax.get_ylim()[1] >= 8  # the axis spans the meter's +-4 MiB: the two look alike
    (bars,) = ax.containers  # one error bar per reading: +- the meter's resolution
    segments = bars.get_children()[-1].get_segments()
    assert [round(float(seg[1][1] - seg[0][1]), 3) for seg in segments] == [8.0, 8.0]
    caption = " ".join(" ".join(texts(ax)).split())
    assert "+- 4 MiB (bars: points closer than that are one reading)" in caption


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
    assert sorted(t for t in texts(ax) if not t.startswith("red outline")) == [
        "20", "40", "50", "oom"]
    (oom_text,) = [t for t in ax.texts if t.get_text() == "oom"]
    assert oom_text.get_position() == (1, 1) and oom_text.get_color() == "gray"
    assert [t.get_text() for t in ax.get_xticklabels()] == ["64", "128"]
    assert fig.axes[1].get_ylabel() == "throughput (TFLOP/s)"  # the colourbar


def test_heatmap_marks_refused_noisy_and_best_cells():
    df = frame(row(block_m=64, block_n=64, throughput=10.0, noisy=True),
               row(block_m=128, block_n=64, throughput=40.0),
               row(block_m=64, block_n=128, outcome="error", throughput=np.nan,
                   message="ValueError: pipeline shared memory 196608 B exceeds 166912 B"),
               row(block_m=128, block_n=128, outcome="error", throughput=np.nan,
                   message="RuntimeError: triton compile failed"))
    ax = plots.heatmap_figure(df, "block_m", "block_n").axes[0]
    shown = texts(ax)
    assert "~10" in shown and "40" in shown and "refused" in shown and "error" in shown
    (best,) = [p for p in ax.patches if p.get_gid() == "best"]
    assert best.get_xy() == (0.5, -0.5)  # the 128 x 64 cell: column 1, row 0
    caption = " ".join(" ".join(shown).split())  # the caption wraps
    assert "red outline: best (block_m=128, block_n=64)" in caption
    assert "~: noisy timing (1 cells)" in caption


def test_a_tile_larger_than_the_matrix_is_hatched_and_never_crowned():
    """The heatmap crowned a 256x256 tile on a 128^3 matmul (the same one tile, masked)."""
    def tile(bm, bn, tflops):
        return row(m=128, n=128, k=128, block_m=bm, block_n=bn, throughput=tflops)

    df = frame(tile(64, 64, 0.05), tile(128, 128, 0.08), tile(256, 128, 0.09),
               tile(256, 256, 0.10))
    ax = plots.heatmap_figure(df, "block_m", "block_n").axes[0]
    (best,) = [p for p in ax.patches if p.get_gid() == "best"]
    assert best.get_xy() == (0.5, 0.5)  # 128 x 128: column 1, row 1
    assert len([p for p in ax.patches if p.get_gid() == "masked"]) == 2
    caption = " ".join(" ".join(texts(ax)).split())
    assert "hatched: tile larger than the 128x128 output (edges masked, the same work): not " \
        "crowned" in caption and "red outline: best (block_m=128, block_n=128)" in caption
    only = plots.heatmap_figure(frame(tile(256, 256, 0.1)), "block_m", "block_n").axes[0]
    assert "masked: every tile measured is larger than the output" in \
        " ".join(" ".join(texts(only)).split())


def test_heatmap_names_the_compilers_reason_in_a_refused_cell():
    message = ("ValueError: refused for NVIDIA A800-SXM4-80GB (sm_80) (Triton 3.7.1 compiler for "
               "sm_80): shared memory: 294,912 B (288 KiB) exceeds the sm_80 limit of 166,912 B")
    df = frame(row(block_m=64, block_n=64, throughput=10.0),
               row(block_m=128, block_n=64, outcome="error", throughput=np.nan, message=message),
               row(block_m=64, block_n=128, outcome="error", throughput=np.nan,
                   message="ValueError: refused for sm_90 (the lab's check for sm_90): TMA: "
                           "loads='tma' copies boxes of at most 256 per side"))
    shown = texts(plots.heatmap_figure(df, "block_m", "block_n").axes[0])
    assert "refused\nshared memory" in shown and "refused\nTMA" in shown


def test_the_wave_model_counts_the_compilers_resident_blocks():
    from a800lab.figures.tiles import model_frame

    shapes = pd.DataFrame({"m": [4096], "n": [4096], "k": [4096]})
    one = model_frame(shapes, "n", (128, 128, 64), 108)        # 1024 tiles / 108 -> 10 waves
    two = model_frame(shapes, "n", (128, 128, 64), 108, 2)     # / 216 -> 5 waves
    assert (one["waves"].iloc[0], two["waves"].iloc[0]) == (10, 5)
    assert two["wave_efficiency"].iloc[0] == pytest.approx(1024 / (5 * 216))


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


def test_roofline_of_a_device_without_a_datasheet_row_draws_its_measured_roof_alone():
    df = frame(row(flop_count=2e9, bytes_moved=1e8, tflops=0.05))
    ax = plots.roofline_figure(df, peak_tflops=None, mem_bw_gbs=None, measured_peak_tflops=0.1,
                               measured_bw_gbs=20.0).axes[0]
    (measured,) = by_gid(ax, "roof:measured")
    assert measured.get_xdata()[1] == pytest.approx(5.0)  # 0.1 TFLOP/s / 20 GB/s
    assert not by_gid(ax, "roof:datasheet") and "peak unknown" not in ax.get_title()


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
    assert len(data_lines(left)) == 2 and len(data_lines(right)) == 2
    assert len(by_gid(right, "reserved")) == 2
    assert fig.get_suptitle() == "Imaginary GPU 9000 (GPU)"
    (legend,) = fig.legends  # one legend for both, right of both axes
    fig.draw_without_rendering()
    assert legend.get_window_extent().x0 > right.get_window_extent().x1
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
    code = "import sys, a800lab.figures.sweep; sys.exit('matplotlib.pyplot' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_small_rates_tick_plainly_and_large_ones_compactly():
    """A CPU's 0.1 TFLOP/s ticked as "100m" (EngFormatter's milli)."""
    from a800lab.figures.sweep import compact_tick

    assert [compact_tick(v) for v in (0, 0.05, 0.1, 12, 500, 1000, 140_000, 1.5e6, 2e9)] == [
        "0", "0.05", "0.1", "12", "500", "1k", "140k", "1.5M", "2G"]
    df = frame(row(n=256, throughput=0.05), row(n=512, throughput=0.12))
    ax = plots.throughput_figure(df, "n").axes[0]
    ax.figure.canvas.draw()
    ticks = [t.get_text() for t in ax.get_yticklabels()]
    assert ticks and not any(t.endswith("m") for t in ticks) and "0.1" in ticks
