"""Figures of the communication lab (chapter 08): busbw and time over message sizes (the card's
per-direction NVLink bandwidth dashed on GPU runs), DDP comm hooks, no_sync and buckets.

    fig = collectives_figure(df, series="op")      # busbw and time vs size
    fig = ddp_figure(df, "hook")                   # samples/s, bytes all-reduced, loss
"""

import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter, NullFormatter

from ..core.units import format_size
from .parts import NO_POINTS_TEXT, figure_legend, floats, laid_out, metric_lines, say
from .sweep import throughput_into


def _link_line(ax: Axes, ok: pd.DataFrame) -> list[tuple[object, str]]:
    """The per-direction NVLink bandwidth of the points' card, when they carry one."""
    links = floats(ok, "link_gbs").dropna().unique()
    if len(links) != 1:
        return []
    ax.axhline(float(links[0]), color="black", linestyle="--", gid="link")
    return [(Line2D([], [], color="black", linestyle="--"),
             f"NVLink per direction: {links[0]:g} GB/s (datasheet)")]


def collectives_figure(df: pd.DataFrame, *, series: str | None = "op",
                       earlier_runs: str = "faded") -> Figure:
    """busbw (GB/s) and the slowest rank's median time against the message size, one line per
    `series` (default: the collective) and run; the link's bandwidth dashed on GPU runs."""
    fig, (left, right), look = laid_out(df, series if series in df else None, earlier_runs,
                                        (10.0, 4.2), (0.075, 0.2, 0.3, 0.64),
                                        (0.46, 0.2, 0.25, 0.64))
    entries = look.series_handles()
    if df.empty:
        say(left, NO_POINTS_TEXT)
        return fig
    throughput_into(left, df, "size_bytes", look)
    left.set(title="bus bandwidth vs message size", ylabel="busbw (GB/s)")
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
        ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _: format_size(value)))
        ax.set_xlabel("message size (size_bytes)")
    if not ok.empty and ok["median_ms"].gt(0).all():
        right.set_yscale("log")
        right.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
        right.yaxis.set_minor_formatter(NullFormatter())
    figure_legend(fig, entries + link, 0.735)
    return fig


DDP_METRICS = (("bytes_per_step", "MiB all-reduced per step (one rank)", 2**20),
               ("eval_loss", "held-out loss after training", 1.0))


def ddp_figure(df: pd.DataFrame, x: str, *, series: str | None = None,
               metrics=DDP_METRICS, log_x: bool = False, earlier_runs: str = "faded") -> Figure:
    """Samples/s beside each of `metrics` ((column, axis label, divisor)) against `x` (on a
    log axis with `log_x`): the DDP views (hooks, accumulation, buckets)."""
    count = 1 + len(metrics)
    width = (0.7 - 0.07 - 0.07 * (count - 1)) / count  # axes side by side, 0.07 apart
    fig, axes, look = laid_out(df, series, earlier_runs, (10.5, 4.2), *(
        (0.07 + i * (width + 0.07), 0.22, width, 0.62) for i in range(count)))
    entries = look.series_handles()
    throughput_into(axes[0], df, x, look)
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
    figure_legend(fig, entries, 0.72)
    return fig
