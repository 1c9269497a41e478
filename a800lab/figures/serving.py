"""The serving lab's figures (chapter 13): samples/s against p99 latency with one point's
latency histogram, decode's time per token beside its bandwidth bound, concurrent streams (the
tuner's frontier: figures/tune.py).

    serving_figure(load_results("serve.jsonl"))     # one line per config across batch sizes
"""

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from .look import Look, noisy_handle, note_handle
from .parts import (
    NO_POINTS_TEXT,
    Lines,
    figure_legend,
    flags,
    floats,
    groups,
    laid_out,
    metric_lines,
    say,
    wrapped_entries,
)

PERCENTILES = (("p50_ms", "p50", ":"), ("p90_ms", "p90", "-."), ("p99_ms", "p99", "--"))


def _two_axes(df: pd.DataFrame, series: str | None, earlier_runs: str):
    fig, (left, right), look = laid_out(df, series, earlier_runs, (10.0, 4.2),
                                        (0.085, 0.14, 0.27, 0.66), (0.45, 0.14, 0.27, 0.66))
    return fig, left, right, look


def _ok(df: pd.DataFrame, look: Look, column: str) -> pd.DataFrame:
    shown = look.visible(df)
    if shown.empty or column not in shown:
        return shown.iloc[0:0]
    return shown[(shown["outcome"] == "ok") & floats(shown, column).notna()]


def serving_figure(df: pd.DataFrame, *, series: str | None = None,
                   earlier_runs: str = "faded") -> Figure:
    """Left: samples/s against p99 per series and run, points joined in batch-size order and
    labelled with their batch (up and to the left is better). Right: the latency histogram of
    the newest point, its p50 / p90 / p99 marked."""
    fig, left, right, look = _two_axes(df, series, earlier_runs)
    ok = _ok(df, look, "p99_ms")
    left.set(xlabel="p99 latency of a request batch (ms)", ylabel="samples/s",
             title="samples/s vs p99 (labels: batch)")
    lines = Lines()
    for (key, _run), idx in groups(ok, look).items():
        rows = ok.iloc[idx].sort_values("batch_size")
        newest = bool(look.newest.loc[rows.index[0]])
        p99, rate = floats(rows, "p99_ms").to_numpy(), floats(rows, "throughput").to_numpy()
        lines.add(key, newest, p99, rate, flags(rows, "noisy").to_numpy())
        if newest:
            for x, y, b in zip(p99, rate, rows["batch_size"], strict=True):
                left.annotate(f"{b}", (x, y), textcoords="offset points", xytext=(4, 4),
                              fontsize="small", color=look.color(key))
    hollow = lines.draw(left, look, "-o", "data")
    if ok.empty:
        say(left, NO_POINTS_TEXT)
    else:
        left.set_xlim(left=0)
        left.set_ylim(bottom=0)
    _histogram(right, ok)
    entries = look.series_handles() + ([noisy_handle()] if hollow else [])
    failed = 0 if df.empty else int((look.visible(df)["outcome"] != "ok").sum())
    if failed:
        entries.append(note_handle(f"{failed} failed points: see the table"))
    figure_legend(fig, wrapped_entries(entries), 0.74)
    return fig


def _histogram(ax, ok: pd.DataFrame) -> None:
    """The newest ok point's request latencies, with its percentiles."""
    ax.set(xlabel="latency of a request batch (ms)", ylabel="requests")
    if ok.empty:
        say(ax, NO_POINTS_TEXT)
        return
    row = ok.loc[ok["timestamp"].idxmax()] if "timestamp" in ok else ok.iloc[-1]
    samples = np.asarray(row["time_ms"], float)
    ax.hist(samples, bins=min(60, max(10, samples.size // 8)), color="C0", alpha=0.7)
    for column, name, style in PERCENTILES:  # named in a legend: close values never overlap
        value = float(row.get(column, np.nan))
        if np.isfinite(value):
            ax.axvline(value, color="black", linestyle=style, lw=1.2,
                       label=f"{name} {value:.3g} ms")
    ax.legend(loc="best", fontsize="small", framealpha=0.9)
    what = ", ".join(f"{row[k]}" for k in ("precision", "compile") if k in row and
                     pd.notna(row[k]) and row[k] != "off")
    ax.set_title(f"newest: batch {row.get('batch_size', '?')}, {what} ({samples.size} requests)",
                 fontsize="medium")


def decode_figure(df: pd.DataFrame, *, series: str | None = None,
                  earlier_runs: str = "faded") -> Figure:
    """Left: ms per output token vs batch, the bandwidth bounds of the newest runs dashed
    (measured) and dotted (datasheet). Right: tokens/s vs batch."""
    fig, left, right, look = _two_axes(df, series, earlier_runs)
    left.set_title("time per decode step")
    entries = metric_lines(left, df, "batch_size", "ms_per_token", look,
                           ylabel="ms per output token")
    ok = _ok(df, look, "ms_per_token")
    drawn = set()
    for (key, _run), idx in groups(ok, look).items():
        rows = ok.iloc[idx].sort_values("batch_size")
        if not look.newest.loc[rows.index[0]]:
            continue
        for column, style in (("bound_ms_measured", "--"), ("bound_ms_datasheet", ":")):
            bound = floats(rows, column)
            if bound.notna().any():
                left.plot(rows["batch_size"], bound, style, color=look.color(key), lw=1.2)
                drawn.add(column)
    left.set_ylim(bottom=0)
    right.set_title("tokens/s")
    entries += metric_lines(right, df, "batch_size", "throughput", look, ylabel="tokens/s")
    right.set_ylim(bottom=0)
    bounds = [(Line2D([], [], color="gray", linestyle="--"),
               "bound at the measured bandwidth: bytes read per step / GB/s"),
              (Line2D([], [], color="gray", linestyle=":"), "bound at the datasheet bandwidth")]
    entries += [b for b, c in zip(bounds, ("bound_ms_measured", "bound_ms_datasheet"),
                                  strict=True) if c in drawn]
    if not drawn and not ok.empty:
        entries.append(note_handle("no bandwidth known (noisy measurement, no datasheet)"))
    figure_legend(fig, wrapped_entries(look.series_handles() + entries), 0.74)
    return fig


def concurrency_figure(df: pd.DataFrame, *, series: str | None = None,
                       earlier_runs: str = "faded") -> Figure:
    """Left: samples/s of all streams together vs the number of streams. Right: p99 latency
    vs streams (p50 dotted). MPS's state, as read, in the caption."""
    fig, left, right, look = _two_axes(df, series, earlier_runs)
    left.set_title("samples/s, all streams")
    entries = metric_lines(left, df, "streams", "throughput", look, ylabel="samples/s")
    left.set_ylim(bottom=0)
    right.set_title("latency of a request batch")
    entries += metric_lines(right, df, "streams", "p99_ms", look, ylabel="p99 (ms)")
    ok = _ok(df, look, "p50_ms")
    for (key, _run), idx in groups(ok, look).items():
        rows = ok.iloc[idx].sort_values("streams")
        if look.newest.loc[rows.index[0]]:
            right.plot(rows["streams"], floats(rows, "p50_ms"), ":", color=look.color(key))
    right.set_ylim(bottom=0)
    entries.append((Line2D([], [], color="gray", linestyle=":"), "p50 (dotted)"))
    if "mps" in ok and not ok.empty:
        entries.append(note_handle(str(ok["mps"].iloc[-1])))
    figure_legend(fig, wrapped_entries(look.series_handles() + entries), 0.74)
    return fig
