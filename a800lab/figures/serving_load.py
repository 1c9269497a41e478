"""The serving lab under load (chapter 13): latency against offered request rate with the
saturation knee, the target and goodput, the M/D/1 queue beside batch-1 points; mean latency
split into queue wait and service. The online tuner's searches draw the same way.

    load_figure(load_results("load.jsonl"), target_ms=5.0)   # sweep load's records
    load_figure(tune_records, target_ms=5.0, goodput_rps=outcome.goodput_rps)   # tune serve
"""

import textwrap

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

from ..core.knobs import knobs, levers
from ..workloads.serving.goodput import MEETS, md1_latency_ms, verdict
from ..workloads.serving.load import Batcher
from ..workloads.serving.spec import ServeSpec
from .look import noisy_handle, note_handle
from .parts import (
    NO_POINTS_TEXT,
    figure_legend,
    flags,
    floats,
    groups,
    laid_out,
    say,
    wrapped_entries,
)

KNEE_FACTOR = 2.0  # the knee: the first rate whose p99 is twice the lightest load's, or saturated
CONFIG_COLUMNS = ("model", "size", *knobs(Batcher), "precision", *levers(ServeSpec), "arrival",
                  "burstiness")


def config_series(df: pd.DataFrame) -> pd.Series:
    """"max_batch=8, max_delay_ms=1" per row: the config columns that differ among the rows
    (the rate aside), the device label first when several devices are shown."""
    differ = [c for c in CONFIG_COLUMNS if c in df and df[c].astype(str).nunique() > 1]
    if "label" in df and df["label"].astype(str).nunique() > 1:
        differ.insert(0, "label")
    if not differ:
        return pd.Series("", index=df.index)
    return df[differ].apply(lambda row: ", ".join(
        f"{c}={v:g}" if isinstance(v, float) else f"{c}={v}" for c, v in row.items()), axis=1)


def knee_rate(rows: pd.DataFrame) -> float | None:
    """The lowest offered rate (rows sorted by it) at which the server saturated or p99 rose
    to KNEE_FACTOR x its value at the lightest load measured; None when it never did."""
    p99 = floats(rows, "p99_ms").to_numpy(float)
    saturated = flags(rows, "saturated").to_numpy(bool)
    rates = floats(rows, "offered_rate").to_numpy(float)
    for rate, value, full in zip(rates[1:], p99[1:], saturated[1:], strict=True):
        if full or value >= KNEE_FACTOR * p99[0]:
            return float(rate)
    return float(rates[0]) if len(rates) and saturated[0] else None


def _md1(ax, rows: pd.DataFrame, color: str) -> bool:
    """The M/D/1 mean latency from the measured mean service time (batch 1 only), and the
    measured mean latencies as squares; True when drawn."""
    if rows.empty or (floats(rows, "max_batch") != 1).any():
        return False
    calm = rows[~flags(rows, "saturated")]
    service = floats(calm if not calm.empty else rows, "service_mean_ms").median()
    if not np.isfinite(service) or service <= 0:
        return False
    capacity = 1e3 / service
    rates = np.linspace(0, 0.97 * capacity, 60)[1:]
    ax.plot(rates, [md1_latency_ms(r, service) for r in rates], "--", color=color, lw=1,
            alpha=0.8, gid="md1")
    ax.plot(floats(rows, "offered_rate"), floats(rows, "mean_ms"), "s", color=color,
            markersize=4, mfc="white", linestyle="none", gid="mean")
    return True


def load_figure(df: pd.DataFrame, *, series: str | None = None, earlier_runs: str = "faded",
                target_ms: float | None = None, goodput_rps: float | None = None) -> Figure:
    """Left: p99 (solid, its 95% interval as a bar) and p50 (dotted) latency, from each
    request's arrival, against the offered rate, per series and run (log scale: a saturated
    point's latency grows with the run); X: saturated; the knee, the target and goodput (given,
    else the highest swept rate whose p99 interval lies under the target) marked;
    M/D/1's mean (dashed) beside batch-1 series. Right: the newest series' mean latency split
    into queue wait and service, per offered rate. `series` None: one per config."""
    if series is None:
        df, series = df.assign(config=config_series(df)), "config"
    fig, (left, right), look = laid_out(df, series, earlier_runs, (10.0, 4.6),
                                        (0.08, 0.19, 0.30, 0.62), (0.46, 0.19, 0.24, 0.62))
    shown = look.visible(df)
    ok = shown[(shown["outcome"] == "ok") & floats(shown, "p99_ms").notna()] \
        if "p99_ms" in shown else shown.iloc[0:0]
    left.set(xlabel="offered rate (requests/s)", ylabel="latency from arrival (ms)",
             title="latency vs offered load", yscale="log")
    entries, drew = [], set()
    newest_rows, newest_key = None, ""
    for (key, _run), idx in groups(ok, look).items():
        rows = ok.iloc[idx].sort_values("offered_rate")
        newest = bool(look.newest.loc[rows.index[0]])
        color, alpha = look.color(key), look.alpha(newest)
        rate = floats(rows, "offered_rate").to_numpy(float)
        p99 = floats(rows, "p99_ms").to_numpy(float)
        noisy = flags(rows, "noisy").to_numpy(bool)
        left.plot(rate, p99, "-", color=color, alpha=alpha, lw=1.8 if newest else 1.0,
                  gid="p99")
        left.plot(rate[~noisy], p99[~noisy], "o", color=color, alpha=alpha, gid="p99")
        left.plot(rate[noisy], p99[noisy], "o", color=color, mfc="white", alpha=alpha,
                  gid="noisy")
        left.plot(rate, floats(rows, "p50_ms"), ":", color=color, alpha=alpha, gid="p50")
        if {"target_ci_low_ms", "target_ci_high_ms"} <= set(rows) and \
                (floats(rows, "percentile") == 99).all():
            low, high = floats(rows, "target_ci_low_ms"), floats(rows, "target_ci_high_ms")
            left.vlines(rate, low, high, color=color, alpha=alpha, lw=1, gid="interval")
        full = flags(rows, "saturated").to_numpy(bool)
        if full.any():
            left.plot(rate[full], p99[full], "X", color=color, markersize=10, alpha=alpha,
                      markeredgecolor="black", linestyle="none", gid="saturated")
            drew.add("saturated")
        drew.update(["noisy"] if noisy.any() else [])
        if newest:
            knee = knee_rate(rows)
            if knee is not None:
                left.axvline(knee, color=color, linestyle=(0, (1, 3)), lw=1.2, gid="knee")
                drew.add("knee")
            if _md1(left, rows, color):
                drew.add("md1")
            if newest_rows is None:
                newest_rows, newest_key = rows, key
    if target_ms is not None:
        left.axhline(target_ms, color="tab:red", linestyle="--", lw=1.2, gid="target")
        entries.append((Line2D([], [], color="tab:red", linestyle="--"),
                        f"target {target_ms:g} ms"))
    swept = ""
    if not goodput_rps and target_ms is not None and newest_rows is not None:
        met = [r for r, (_, row) in zip(floats(newest_rows, "offered_rate"),
                                        newest_rows.iterrows(), strict=True)
               if {"target_ci_low_ms", "target_ci_high_ms"} <= set(row.index) and
               verdict(row.to_dict(), target_ms) == MEETS]
        goodput_rps, swept = max(met, default=None), " (of the rates swept)"
    if goodput_rps:
        left.axvline(goodput_rps, color="tab:green", lw=2, alpha=0.7, gid="goodput")
        entries.append((Line2D([], [], color="tab:green", lw=2),
                        f"goodput {goodput_rps:.4g} requests/s{swept}"))
    if ok.empty:
        say(left, NO_POINTS_TEXT)
    else:
        left.set_xlim(left=0)
        left.xaxis.set_major_locator(MaxNLocator(5))
    entries += [(Line2D([], [], color="gray"), "p99 (bar: its 95% interval)"),
                (Line2D([], [], color="gray", linestyle=":"), "p50")]
    entries += [e for name, e in (
        ("saturated", (Line2D([], [], marker="X", color="gray", markeredgecolor="black",
                              linestyle="none"), "saturated: the queue grew")),
        ("knee", (Line2D([], [], color="gray", linestyle=(0, (1, 3))),
                  f"knee: p99 {KNEE_FACTOR:g}x its lightest-load value")),
        ("md1", (Line2D([], [], color="gray", linestyle="--"),
                 "M/D/1 mean from the measured service (squares: measured mean)")),
        ("noisy", noisy_handle())) if name in drew]
    _split(right, newest_rows, newest_key)
    failed = 0 if shown.empty else int((shown["outcome"] != "ok").sum())
    if failed:
        entries.append(note_handle(f"{failed} failed points: see the table"))
    figure_legend(fig, wrapped_entries(look.series_handles() + entries), 0.73)
    return fig


def _split(ax, rows: pd.DataFrame | None, key: str) -> None:
    """Where a request's time went per offered rate: mean queue wait and mean service as
    shares of the mean latency (they add up to it), the mean latency above each bar;
    saturated rates hatched."""
    ax.set(title="where the time goes", ylabel="share of the mean latency (%)",
           ylim=(0, 130 if key else 112))
    if key:  # whose time: inside the axes, above the bars (a long key would run past them)
        ax.text(0.5, 0.99, "\n".join(textwrap.wrap(key, 32)), transform=ax.transAxes,
                ha="center", va="top", fontsize="x-small")
    ax.set_yticks(range(0, 101, 20))  # the shares; above 100: the labels
    if rows is None or rows.empty or "queue_mean_ms" not in rows:
        say(ax, NO_POINTS_TEXT)
        return
    at = np.arange(len(rows))
    queue, service = floats(rows, "queue_mean_ms"), floats(rows, "service_mean_ms")
    total = (queue + service).to_numpy(float)
    hatch = ["//" if s else "" for s in flags(rows, "saturated")]
    ax.bar(at, 100 * service / total, color="tab:blue", alpha=0.8, gid="service")
    ax.bar(at, 100 * queue / total, bottom=100 * service / total, color="tab:orange",
           alpha=0.8, hatch=hatch, gid="queue")
    step = 1 + len(at) // 9  # at most ~9 labels: the rest would overlap
    for x, ms in list(zip(at, total, strict=True))[::step]:
        ax.annotate(f"{ms:.2g}", (x, 100), textcoords="offset points", xytext=(0, 2),
                    ha="center", fontsize="x-small")
    ax.set_xticks(at[::step], [f"{r:.3g}" for r in floats(rows, "offered_rate")][::step],
                  rotation=45, fontsize="small")
    ax.set_xlabel("offered rate (requests/s; above: mean ms)")
    ax.legend(handles=[Patch(color="tab:orange", alpha=0.8, label="queue wait"),
                       Patch(color="tab:blue", alpha=0.8, label="service"),
                       Patch(facecolor="white", edgecolor="black", hatch="//",
                             label="saturated")], fontsize="x-small", loc="lower left",
              bbox_to_anchor=(0.0, 1.06), ncols=3, frameon=False)
