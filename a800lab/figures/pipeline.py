"""Figures of the pipeline lab (chapter 07): samples/s, the device's idle fraction and one
point's timeline of workers, waits, copies and compute.

    fig = pipeline_figure(df, "num_workers", series="cost")     # + the newest point's timeline
"""

import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from ..workloads.pipeline import MAIN_LANES
from .parts import figure_legend, laid_out, metric_lines, say
from .sweep import throughput_into

_LANE_COLOURS = {"data wait": "tab:red", "copy": "tab:orange", "compute": "tab:green",
                 "copy (GPU)": "tab:orange", "compute (GPU)": "tab:green"}
_WORKER_COLOUR = "tab:blue"


def draw_timeline(ax: Axes, timeline: list, *, title: str = "timeline") -> None:
    """One point's timeline (lane, start_ms, end_ms) as bars, one row per lane."""
    ax.set_title(title, fontsize="medium")
    if not timeline:
        say(ax, "no timeline recorded")
        return
    # workers first (they feed the rest), then the training loop's lanes in their order
    lanes = sorted({lane for lane, _, _ in timeline},
                   key=lambda lane: (MAIN_LANES.index(lane) if lane in MAIN_LANES else -1, lane))
    for row, lane in enumerate(lanes):
        bars = [(start, end - start) for name, start, end in timeline if name == lane]
        colour = _LANE_COLOURS.get(lane, _WORKER_COLOUR)
        ax.broken_barh(bars, (row - 0.35, 0.7), facecolors=colour, edgecolor="black",
                       linewidth=0.3)
    ax.set_yticks(range(len(lanes)), lanes)
    ax.invert_yaxis()
    ax.set_xlabel("time (ms) from the first timed step")
    ax.grid(axis="x", alpha=0.3)


def pipeline_figure(df: pd.DataFrame, x: str, *, series: str | None = None,
                    earlier_runs: str = "faded") -> Figure:
    """Samples/s and the device's idle fraction against `x`, above the timeline of the newest
    point measured (its parameters in the timeline's title)."""
    fig, (left, right, bottom), look = laid_out(
        df, series, earlier_runs, (10.0, 6.4), (0.075, 0.52, 0.3, 0.36),
        (0.46, 0.52, 0.25, 0.36), (0.2, 0.08, 0.51, 0.3))
    throughput_into(left, df, x, look)
    right.set_title(f"device idle fraction vs {x}")
    extra = metric_lines(right, df, x, "idle_fraction", look,
                         ylabel="idle share of the step (0-1)")
    right.set_ylim(0, 1)
    ok = df[df["outcome"] == "ok"] if not df.empty else df
    if not ok.empty and "timeline" in ok:
        newest = ok.sort_values("timestamp").iloc[-1]
        stage = newest.get("device_stage", "")
        draw_timeline(bottom, newest["timeline"],
                      title=f"timeline of the newest point ({x}={newest[x]}; {stage})")
    else:
        draw_timeline(bottom, [], title="timeline")
    lanes = [(Patch(color=_WORKER_COLOUR), "making samples (worker / main)"),
             (Patch(color="tab:red"), "waiting for data"),
             (Patch(color="tab:orange"), "copy to the device"),
             (Patch(color="tab:green"), "compute (the device's busy time)")]
    figure_legend(fig, look.series_handles() + extra + lanes, 0.735)
    return fig
