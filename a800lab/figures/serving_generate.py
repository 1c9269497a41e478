"""The serving lab's generation figure (chapter 13): time to first token and time per output
token against the offered request rate, one colour per scheduler, p50 solid and p99 dashed,
saturated points ringed, the decode step's memory-bandwidth bound under the TPOT curves.

    generation_figure(load_results("generate.jsonl"))   # from `a800lab sweep generate`
"""

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from .look import noisy_handle, note_handle
from .parts import (
    NO_POINTS_TEXT,
    Lines,
    figure_legend,
    flags,
    floats,
    groups,
    laid_out,
    say,
    wrapped_entries,
)

RATE = "offered_rate"
SATURATED_RING = dict(marker="o", markersize=13, markerfacecolor="none",
                      markeredgecolor="tab:red", markeredgewidth=1.5, linestyle="none")
BOUNDS = (("bound_ms_measured", (0, (1, 1.5)), "decode bound at the measured bandwidth "
                                               "(bytes one step reads / GB/s)"),
          ("bound_ms_datasheet", (0, (4, 2, 1, 2)), "decode bound at the datasheet bandwidth"))


def _series(df: pd.DataFrame, series: str | None) -> tuple[pd.DataFrame, str | None]:
    """The scheduler per series, with the max batch where several were swept."""
    if series is not None or "scheduler" not in df:
        return df, series
    several = "max_batch" in df and df["max_batch"].nunique() > 1
    out = df.assign(config=df["scheduler"].astype(str) + (
        ", max batch " + df["max_batch"].astype(str) if several else ""))
    return out, "config"


def _curves(ax, ok: pd.DataFrame, look, column: str, style: str) -> bool:
    """`column` against the offered rate per series and run; returns whether any are hollow."""
    lines = Lines()
    for (key, _run), idx in groups(ok, look).items():
        rows = ok.iloc[idx].sort_values(RATE)
        lines.add(key, bool(look.newest.loc[rows.index[0]]), floats(rows, RATE).to_numpy(),
                  floats(rows, column).to_numpy(), flags(rows, "noisy").to_numpy())
    return lines.draw(ax, look, style, column)


def generation_figure(df: pd.DataFrame, *, series: str | None = None,
                      earlier_runs: str = "faded") -> Figure:
    """Left: TTFT, right: TPOT (ms) against the offered rate (requests/s); p50 solid, p99
    dashed, one colour per scheduler (`series` to group otherwise); saturated points ringed red
    (their latencies are lower bounds); the newest runs' decode bound dotted under TPOT."""
    df, series = _series(df, series)
    fig, (left, right), look = laid_out(df, series, earlier_runs, (10.0, 4.2),
                                        (0.085, 0.14, 0.27, 0.66), (0.45, 0.14, 0.27, 0.66))
    shown = look.visible(df)
    ok = shown[(shown["outcome"] == "ok") & floats(shown, RATE).notna()] if not shown.empty \
        and RATE in shown else shown.iloc[0:0]
    hollow, drawn = False, set()
    for ax, what, title in ((left, "ttft", "time to first token"),
                            (right, "tpot", "time per output token")):
        ax.set(xlabel="offered rate (requests/s)", ylabel=f"{what.upper()} (ms)", title=title)
        if ok.empty:
            say(ax, NO_POINTS_TEXT)
            continue
        for q, style in (("p50", "-o"), ("p99", "--s")):
            hollow |= _curves(ax, ok, look, f"{what}_{q}_ms", style)
        full = flags(ok, "saturated")
        for q in ("p50", "p99"):
            ax.plot(floats(ok, RATE)[full], floats(ok, f"{what}_{q}_ms")[full],
                    gid="saturated", **SATURATED_RING)
        values = np.concatenate([floats(ok, f"{what}_{q}_ms").dropna().to_numpy()
                                 for q in ("p50", "p99")])
        if values.size and values.min() > 0 and values.max() / values.min() > 30:
            ax.set_yscale("log")  # a saturated point's TTFT is seconds, a free one's ms
        else:
            ax.set_ylim(bottom=0)
        ax.set_xlim(left=0)
    for (key, _run), idx in groups(ok, look).items():
        rows = ok.iloc[idx].sort_values(RATE)
        if not look.newest.loc[rows.index[0]]:
            continue
        for column, dashes, _ in BOUNDS:
            bound = floats(rows, column)
            if bound.notna().any():
                right.plot(floats(rows, RATE), bound, color=look.color(key), lw=1.2,
                           linestyle=dashes, gid=column)
                drawn.add(column)
    entries = look.series_handles() + [
        (Line2D([], [], color="gray", marker="o"), "p50 (solid)"),
        (Line2D([], [], color="gray", marker="s", linestyle="--"), "p99 (dashed)")]
    if flags(ok, "saturated").any():
        entries.append((Line2D([], [], **SATURATED_RING),
                        "saturated: the backlog grew (latencies are lower bounds)"))
    entries += [(Line2D([], [], color="gray", linestyle=dashes), text)
                for column, dashes, text in BOUNDS if column in drawn]
    if hollow:
        entries.append(noisy_handle())
    failed = 0 if shown.empty else int((shown["outcome"] != "ok").sum())
    if failed:
        entries.append(note_handle(f"{failed} failed points: see the table"))
    entries.append(note_handle("latency from each request's scheduled arrival"))
    figure_legend(fig, wrapped_entries(entries), 0.74)
    return fig
