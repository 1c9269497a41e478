"""Figures of the systems lab: the input pipeline (throughput, idle fraction, a timeline) and
communication (busbw and time over message sizes, DDP hooks, accumulation and buckets). Pure
matplotlib without pyplot, like a800lab.plots, whose conventions they share.

    from a800lab.systems_plots import pipeline_figure, collectives_figure, ddp_figure
    fig = pipeline_figure(df, "num_workers", series="cost")     # + the newest point's timeline
    fig = timeline_figure(timeline, title="...")                  # one point's timeline alone
    fig = collectives_figure(df, series="op")                     # busbw and time vs size
    fig = ddp_figure(df, "hook")                                  # samples/s, bytes, loss

Every figure names its device(s) and mode in its title; one line per series and run (the
newest run strongest, earlier runs faded, never averaged); noisy points hollow; failed points
marked on the x axis; the legend outside the axes, on the right. Collective figures draw the
card's per-direction NVLink bandwidth from the datasheet table when the points carry it (GPU
runs); CPU runs have no link to compare with, and the figure says so.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter, NullFormatter

from .plot_look import Look, noisy_handle, unique_entries
from .plot_parts import (
    NO_POINTS_TEXT,
    Lines,
    XAxis,
    floats,
    groups,
    mark_failures,
    per_position,
)
from .plots import throughput_figure
from .workloads.comm import size_label

# lane order of a timeline, top to bottom (workers first: they feed the rest)
_LANES = ("data wait", "copy", "compute", "copy (GPU)", "compute (GPU)")
_LANE_COLOURS = {"data wait": "tab:red", "copy": "tab:orange", "compute": "tab:green",
                 "copy (GPU)": "tab:orange", "compute (GPU)": "tab:green"}
_WORKER_COLOUR = "tab:blue"


def _say(ax: Axes, text: str) -> None:
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center",
            color="dimgray")


def metric_lines(ax: Axes, df: pd.DataFrame, x: str, column: str, look: Look, *,
                 ylabel: str, scale: float = 1.0) -> list[tuple[object, str]]:
    """`column` / `scale` against `x`, one line per series and run of the ok points (markers
    only over categories); noisy points hollow, failures marked. Returns extra legend entries."""
    ax.set_ylabel(ylabel)
    if df.empty or column not in df:
        _say(ax, NO_POINTS_TEXT)
        return []
    xa = XAxis(df[x])
    shown = look.visible(df)
    ok = shown[(shown["outcome"] == "ok") & floats(shown, column).notna()]
    values = floats(ok, column).to_numpy(float) / scale
    noisy = ok["noisy"].fillna(False).astype(float).to_numpy() if "noisy" in ok else \
        np.zeros(len(ok))
    positions = xa.positions(ok[x])
    lines = Lines()
    for (key, _run), idx in groups(ok, look).items():
        newest = bool(look.newest.loc[ok.index[idx[0]]])
        upos, _, agg = per_position(positions[idx], {"v": values[idx], "noisy": noisy[idx]})
        lines.add(key, newest, upos, agg["v"], agg["noisy"] > 0)
    hollow = lines.draw(ax, look, "o" if xa.categories is not None else "-o", "data")
    failures = mark_failures(ax, shown, x, xa, look)
    xa.apply(ax, x)
    if ok.empty:
        _say(ax, NO_POINTS_TEXT)
    return ([noisy_handle()] if hollow else []) + failures


def _legend(fig: Figure, entries: list[tuple[object, str]], anchor_x: float) -> None:
    if entries:
        handles, labels = zip(*unique_entries(entries), strict=True)
        fig.legend(handles, labels, loc="upper left", bbox_to_anchor=(anchor_x, 0.93),
                   fontsize="small", frameon=False)


def _throughput_into(ax: Axes, df: pd.DataFrame, x: str, series: str | None,
                     earlier_runs: str) -> None:
    """plots.throughput_figure drawn into `ax`, its legend removed (the figure has one)."""
    throughput_figure(df, x, series=series, ax=ax, earlier_runs=earlier_runs)
    ax.set_title(ax.get_title().split("\n")[0])  # the devices go in the figure's title
    if ax.get_legend() is not None:
        ax.get_legend().remove()


# ---- the input pipeline ---------------------------------------------------------------------
def draw_timeline(ax: Axes, timeline: list, *, title: str = "timeline") -> None:
    """One point's timeline (lane, start_ms, end_ms) as bars, one row per lane."""
    ax.set_title(title, fontsize="medium")
    if not timeline:
        _say(ax, "no timeline recorded")
        return
    lanes = sorted({lane for lane, _, _ in timeline},
                   key=lambda lane: (_LANES.index(lane) if lane in _LANES else -1, lane))
    for row, lane in enumerate(lanes):
        bars = [(start, end - start) for name, start, end in timeline if name == lane]
        colour = _LANE_COLOURS.get(lane, _WORKER_COLOUR)
        ax.broken_barh(bars, (row - 0.35, 0.7), facecolors=colour, edgecolor="black",
                       linewidth=0.3)
    ax.set_yticks(range(len(lanes)), lanes)
    ax.invert_yaxis()
    ax.set_xlabel("time (ms) from the first timed step")
    ax.grid(axis="x", alpha=0.3)


def timeline_figure(timeline: list, *, title: str = "timeline") -> Figure:
    """A point's timeline alone (its `timeline` metric)."""
    fig = Figure(figsize=(8.6, 2.8), layout="constrained")
    draw_timeline(fig.add_subplot(), timeline, title=title)
    return fig


def pipeline_figure(df: pd.DataFrame, x: str, *, series: str | None = None,
                    earlier_runs: str = "faded") -> Figure:
    """Samples/s and the device's idle fraction against `x`, above the timeline of the newest
    point measured (its parameters in the timeline's title)."""
    fig = Figure(figsize=(10.0, 6.4))
    left = fig.add_axes((0.075, 0.52, 0.3, 0.36))
    right = fig.add_axes((0.46, 0.52, 0.25, 0.36))
    bottom = fig.add_axes((0.2, 0.08, 0.51, 0.3))
    series = "label" if series is None and "label" in df else series
    look = Look(df, series, earlier_runs=earlier_runs)
    _throughput_into(left, df, x, series, earlier_runs)
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
    _legend(fig, look.series_handles() + extra + lanes, 0.735)
    fig.suptitle(look.devices, fontsize="medium")
    return fig


# ---- communication --------------------------------------------------------------------------
def _sizes_axis(ax: Axes) -> None:
    ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _: size_label(value)))


def _link_line(ax: Axes, ok: pd.DataFrame) -> list[tuple[object, str]]:
    """The per-direction NVLink bandwidth of the points' card, when they carry one."""
    links = floats(ok, "link_gbs").dropna().unique()
    if len(links) != 1:
        return []
    line = ax.axhline(float(links[0]), color="black", linestyle="--")
    line.set_gid("link")
    return [(Line2D([], [], color="black", linestyle="--"),
             f"NVLink per direction: {links[0]:g} GB/s (datasheet)")]


def collectives_figure(df: pd.DataFrame, *, series: str | None = "op",
                       earlier_runs: str = "faded") -> Figure:
    """busbw (GB/s) and the slowest rank's median time against the message size, one line per
    `series` (default: the collective) and run; the link's bandwidth dashed on GPU runs."""
    fig = Figure(figsize=(10.0, 4.2))
    left = fig.add_axes((0.075, 0.2, 0.3, 0.64))
    right = fig.add_axes((0.46, 0.2, 0.25, 0.64))
    series = series if series in df else "label" if "label" in df else None
    look = Look(df, series, earlier_runs=earlier_runs)
    entries = look.series_handles()
    if df.empty:
        _say(left, NO_POINTS_TEXT)
        fig.suptitle(look.devices, fontsize="medium")
        return fig
    _throughput_into(left, df, "size_bytes", series, earlier_runs)
    left.set_title("bus bandwidth vs message size")
    left.set_ylabel("busbw (GB/s)")
    ok = df[df["outcome"] == "ok"]
    link = _link_line(left, ok)
    if not link and not ok.empty and (ok["mode"] != "GPU").all():
        fig.text(0.075, 0.015, "CPU fallback: gloo over loopback, no NVLink to compare with",
                 fontsize="small", color="dimgray")
    right.set_title("time vs message size")
    entries += metric_lines(right, df, "size_bytes", "median_ms", look,
                            ylabel="median time, slowest rank (ms)")
    for ax in (left, right):
        if ax.get_xscale() != "log" and not ok.empty and \
                ok["size_bytes"].max() > 8 * ok["size_bytes"].min():
            ax.set_xscale("log", base=2)  # sizes that are not all powers of two
        _sizes_axis(ax)
        ax.set_xlabel("message size (size_bytes)")
    if not ok.empty and ok["median_ms"].gt(0).all():
        right.set_yscale("log")
        right.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
        right.yaxis.set_minor_formatter(NullFormatter())
    _legend(fig, entries + link, 0.735)
    fig.suptitle(look.devices, fontsize="medium")
    return fig


DDP_METRICS = (("bytes_per_step", "MiB all-reduced per step (one rank)", 2**20),
               ("eval_loss", "held-out loss after training", 1.0))


def ddp_figure(df: pd.DataFrame, x: str, *, series: str | None = None,
               metrics=DDP_METRICS, log_x: bool = False, earlier_runs: str = "faded") -> Figure:
    """Samples/s beside each of `metrics` ((column, axis label, divisor)) against `x` (on a
    log axis with `log_x`): the DDP views (hooks, accumulation, buckets)."""
    fig = Figure(figsize=(10.5, 4.2))
    count = 1 + len(metrics)
    width = (0.7 - 0.07 - 0.07 * (count - 1)) / count  # axes side by side, 0.07 apart
    axes = [fig.add_axes((0.07 + i * (width + 0.07), 0.22, width, 0.62)) for i in range(count)]
    series = "label" if series is None and "label" in df else series
    look = Look(df, series, earlier_runs=earlier_runs)
    entries = look.series_handles()
    _throughput_into(axes[0], df, x, series, earlier_runs)
    axes[0].set_title("samples/s", fontsize="medium")
    for ax, (column, label, scale) in zip(axes[1:], metrics, strict=True):
        ax.set_title(label.split(" (")[0], fontsize="medium")
        entries += metric_lines(ax, df, x, column, look, ylabel=label, scale=scale)
        ax.ticklabel_format(axis="y", useOffset=False)
        values = floats(df[df["outcome"] == "ok"], column).dropna() / scale if not df.empty \
            else pd.Series(dtype=float)
        if column != "eval_loss":
            ax.set_ylim(bottom=0)
        elif len(values) and values.max() - values.min() < 1e-3 * abs(values.max()):
            middle = float(values.median())  # equal to 3 digits: draw them level, not magnified
            ax.set_ylim(middle * 0.98, middle * 1.02)
    if log_x and not df.empty:
        for ax in axes:
            ax.set_xscale("log")
            ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    _legend(fig, entries, 0.72)
    fig.suptitle(look.devices, fontsize="medium")
    return fig
