"""Any sweep's figures: throughput and the workload's own peak memory against a swept
parameter, for the panels, the notebooks and saved reports.

    fig = throughput_figure(df, "n", series="precision")   # df: a800lab.load_results(...)
    fig = throughput_and_memory_figure(df, "batch_size")    # the Explorer's plot

`ax=` draws into an Axes you own. Only ok points are measurements; oom / wrong / error points
are marked on the x axis; an empty frame says "no successful points yet" instead of raising.
"""

from collections.abc import Mapping

import numpy as np
import pandas as pd
from matplotlib import rc_context
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter

from ..core.memory import RSS_RESOLUTION_BYTES
from ..core.specs import match
from ..core.units import GIB, MIB, byte_unit
from .look import LabFigure, Look, band_handle, noisy_handle, note_handle
from .parts import (
    NO_POINTS_TEXT,
    Lines,
    XAxis,
    caption_under,
    figure_legend,
    flags,
    floats,
    groups,
    laid_out,
    mark_failures,
    name_devices,
    new_axes,
    per_position,
    require_columns,
    say,
    series_look,
    throughput_band,
    wrapped_entries,
    wrapped_legend,
)

# GPU memory: draw the capacity line only when the data reach this share of it; lower, the line
# would squash the data against the floor, so the capacity goes to the caption alone.
CAPACITY_LINE_MIN_SHARE = 0.5


def compact_tick(value: float, _pos=None) -> str:
    """A tick as 140k / 1.5M / 2G from a thousand up, plain %g below (0.05, 12, 500)."""
    for factor, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:g}{suffix}"
    return f"{value:g}"


def _row_peaks(ok: pd.DataFrame, peak_tflops) -> list[float]:
    """Peak TFLOP/s of each row (NaN if unknown): `peak_tflops` (a number or a dict by
    precision), else the datasheet's for the row's device."""
    if isinstance(peak_tflops, (int, float, np.number)):
        return [float(peak_tflops)] * len(ok)
    precisions = ok["precision"] if "precision" in ok.columns else [None] * len(ok)
    devices = ok["device_name"] if "device_name" in ok.columns else [None] * len(ok)
    # match(), not lookup(): an unknown device (a CPU) is reported in the title, not warned
    # about on every live re-plot.
    by_device = {d: match(str(d)) for d in dict.fromkeys(devices) if d is not None}
    peaks = []
    for precision, device in zip(precisions, devices, strict=True):
        table = peak_tflops if isinstance(peak_tflops, Mapping) else \
            getattr(by_device.get(device), "peak_tflops", {})
        peak = table.get(precision)
        peaks.append(np.nan if peak is None else float(peak))
    return peaks


def _draw_throughput(ax: Axes, df: pd.DataFrame, x: str, look: Look,
                     peak_tflops) -> list[tuple[object, str]]:
    ax.set_title(f"throughput vs {x}")
    if df.empty:
        say(ax, NO_POINTS_TEXT, "large")
        return []
    require_columns(df, x, "outcome", "throughput")
    xa = XAxis(df[x])
    shown = look.visible(df)
    ok = shown[(shown["outcome"] == "ok") & floats(shown, "throughput").notna()].copy()
    positions = xa.positions(ok[x])
    units = list(dict.fromkeys(ok["throughput_unit"])) if "throughput_unit" in ok.columns else []
    unit = ", ".join(map(str, units)) or "throughput"
    ok["_peak"] = _row_peaks(ok, peak_tflops) if unit == "TFLOP/s" else np.nan
    known_peaks = ok["_peak"].dropna().unique()
    single_peak = known_peaks[0] if len(known_peaks) == 1 and ok["_peak"].notna().all() else None
    keys = [*look.colors, *look.others]
    categorical = xa.categories is not None
    dodge = 0.5 / len(keys) if categorical and keys else 0.0  # keep series apart
    merged = banded = False
    lines = Lines()
    columns = {"thr": ok["throughput"].to_numpy(float), "peak": ok["_peak"].to_numpy(float),
               "noisy": flags(ok, "noisy").to_numpy(float)}
    for (key, _run), idx in groups(ok, look).items():
        newest = bool(look.newest.loc[ok.index[idx[0]]])
        color = look.color(key)
        values = {name: column[idx] for name, column in columns.items()}
        if newest:
            values["low"], values["high"] = throughput_band(ok.iloc[idx])
        upos, counts, agg = per_position(positions[idx], values)
        merged |= bool((counts > 1).any())
        pos = upos + dodge * (keys.index(key) - (len(keys) - 1) / 2)
        thr, noisy = agg["thr"], agg["noisy"] > 0
        if newest and (agg["high"] > agg["low"]).any():
            banded = True
            if categorical:  # no line joining categories; the timing spread is an error bar
                spread = np.clip([thr - agg["low"], agg["high"] - thr], 0, None)
                ax.errorbar(pos, thr, yerr=spread, fmt="none", ecolor=color, capsize=4)
            else:
                ax.fill_between(pos, agg["low"], agg["high"], color=color, alpha=0.2,
                                linewidth=0)
        lines.add(key, newest, pos, thr, noisy)
        if single_peak is None and newest:  # peaks differ per point (x = precision, devices)
            for p, t, peak in zip(pos, thr, agg["peak"], strict=True):
                if np.isfinite(peak):
                    ax.annotate(f"{100 * t / peak:.0f}%", (p, t), textcoords="offset points",
                                xytext=(8, 0) if dodge else (0, 6), fontsize="small",
                                ha="left" if dodge else "center", color=color)
    noisy_drawn = lines.draw(ax, look, "o" if categorical else "-o", "data")
    failures = mark_failures(ax, shown, x, xa, look)
    xa.apply(ax, x)
    ax.set_ylabel(unit)
    # 140k, not 140000: long tick labels push the axis label out of a panel's figure; but
    # 0.1, not "100m": a small rate is no milli-anything (0.1 TFLOP/s on a CPU)
    ax.yaxis.set_major_formatter(FuncFormatter(compact_tick))
    if ok.empty:
        say(ax, NO_POINTS_TEXT, "large")
        ax.set_yticks([])
    ax.set_ylim(bottom=0)
    if unit == "TFLOP/s" and not ok.empty:
        if len(known_peaks) == 0:
            ax.set_title(f"throughput vs {x} (peak unknown)")
        elif single_peak is not None:
            peak = float(single_peak)
            sec = ax.secondary_yaxis("right", functions=(lambda t: 100 * t / peak,
                                                         lambda pct: pct * peak / 100))
            sec.set_ylabel(f"% of peak ({peak:g} TFLOP/s)")
        else:
            ax.set_title(f"throughput vs {x} (labels: % of each point's peak)")
    entries = look.series_handles()
    if banded:
        entries.append(band_handle(categorical))
    if noisy_drawn:
        entries.append(noisy_handle())
    if merged:
        entries.append(note_handle("several points per x in a run: median drawn"))
    return entries + failures


def _one_axes(draw, df: pd.DataFrame, x: str, series: str | None, ax: Axes | None,
              earlier_runs: str, *args) -> Figure:
    """`draw(ax, df, x, look, *args)` into `ax` (or a figure of its own), legend beside it."""
    fig, ax, own = new_axes(ax)
    wrapped_legend(ax, draw(ax, df, x, series_look(df, series, earlier_runs), *args))
    name_devices(fig, ax, df, own)
    return fig


def throughput_figure(df: pd.DataFrame, x: str, *, series: str | None = None,
                      ax: Axes | None = None, peak_tflops=None,
                      earlier_runs: str = "faded") -> Figure:
    """Throughput vs ``x``, one line per ``series`` (default "label") and run, IQR band,
    noisy points hollow, failures marked. TFLOP/s get a "% of peak" axis: ``peak_tflops`` (a
    number or a dict by precision), else each row's datasheet peak."""
    return _one_axes(_draw_throughput, df, x, series, ax, earlier_runs, peak_tflops)


def _memory_caption(df: pd.DataFrame, ok: pd.DataFrame, modes: pd.Series) -> str:
    """What the memory lines measure, per mode, and each device's capacity."""
    notes = []
    if (modes[ok.index] == "GPU").any():
        notes.append("solid: the point's own live tensors above what was held before it; "
                     "dashed: the allocator's total, cache included")
    if (modes[ok.index] != "GPU").any():
        notes.append(f"the point's own peak resident set above its start, +- "
                     f"{RSS_RESOLUTION_BYTES // MIB} MiB (bars: points closer than that are "
                     "one reading)")
    capacities = floats(df, "capacity_bytes")
    for mode, what in (("GPU", "GPU memory"), ("CPU fallback", "host RAM")):
        caps = capacities[modes == mode].dropna().unique()
        if len(caps):
            notes.append(f"{what} {', '.join(f'{c / GIB:.1f}' for c in caps)} GiB")
    return "\n".join(notes)


def _draw_memory(ax: Axes, df: pd.DataFrame, x: str, look: Look) -> list[tuple[object, str]]:
    ax.set_title(f"peak memory vs {x}")
    if df.empty:
        ax.set_ylabel("peak memory")
        say(ax, NO_POINTS_TEXT, "large")
        return []
    require_columns(df, x, "outcome")
    xa = XAxis(df[x])
    shown = look.visible(df)
    ok = shown[shown["outcome"] == "ok"].assign(
        _pos=lambda d: xa.positions(d[x]),
        _own=lambda d: floats(d, "peak_allocated_bytes").fillna(floats(d, "peak_rss_bytes")),
        _reserved=lambda d: floats(d, "peak_reserved_bytes"))
    rss = floats(ok, "peak_allocated_bytes").isna() & ok["_own"].notna()
    top = np.nanmax([ok["_own"].max(), ok["_reserved"].max(), 0.0]) if len(ok) else 0.0
    if rss.any():  # the axis spans the meter's resolution: 0.1 vs 1 MiB must not look apart
        top = max(top, 2 * RSS_RESOLUTION_BYTES)  # (its unit, and the axis below)
    scale, unit = byte_unit(top)
    reserved_drawn = False
    columns = {"_own": ok["_own"].to_numpy(float) / scale,
               "_reserved": ok["_reserved"].to_numpy(float) / scale}
    own, reserved = Lines(), Lines()
    for (key, _run), idx in groups(ok, look).items():
        newest = bool(look.newest.loc[ok.index[idx[0]]])
        upos, _, agg = per_position(ok["_pos"].to_numpy(float)[idx],
                                     {name: column[idx] for name, column in columns.items()})
        for lines, column in ((own, "_own"), (reserved, "_reserved")):
            present = np.isfinite(agg[column])
            if present.any():
                lines.add(key, newest, upos[present], agg[column][present])
                reserved_drawn |= column == "_reserved"
        if newest and rss.iloc[idx].all():  # each CPU reading with what the meter resolves
            ax.errorbar(upos, agg["_own"], yerr=RSS_RESOLUTION_BYTES / scale, fmt="none",
                        ecolor=look.color(key), alpha=0.4, capsize=3, gid="resolution")
    own.draw(ax, look, "-o", "data")
    reserved.draw(ax, look, "--s", "reserved")
    entries = look.series_handles()
    if reserved_drawn:
        entries += [(Line2D([], [], color="black"), "solid: allocated, own peak"),
                    (Line2D([], [], color="black", linestyle="--"), "dashed: reserved")]
    gpu = look.modes == "GPU"
    capacity, line_y = floats(df, "capacity_bytes")[gpu].max(), None
    absolute = (ok["_own"] + floats(ok, "baseline_allocated_bytes").fillna(0)).max()
    if np.isfinite(capacity) and np.nanmax([absolute, ok["_reserved"].max(), 0.0]) >= \
            CAPACITY_LINE_MIN_SHARE * capacity:
        line_y = capacity / scale
        ax.axhline(line_y, color="black", linestyle=":", gid="capacity")
        entries.append((Line2D([], [], color="black", linestyle=":"),
                        f"capacity {capacity / GIB:.1f} GiB"))
    oom = shown[shown["outcome"] == "oom"]
    entries += mark_failures(ax, oom, x, xa, look, y=line_y)
    slanted = xa.apply(ax, x)
    ax.set_ylabel(f"own peak memory ({unit})")
    if ok.empty or ok[["_own", "_reserved"]].isna().all().all():
        say(ax, NO_POINTS_TEXT if ok.empty else "no memory readings for these points", "large")
    ax.set_ylim(bottom=0)
    if rss.any():
        ax.set_ylim(top=max(ax.get_ylim()[1], 2 * RSS_RESOLUTION_BYTES / scale))
    caption_under(ax, _memory_caption(df, ok, look.modes), slanted)
    return entries


def memory_figure(df: pd.DataFrame, x: str, *, series: str | None = None,
                  ax: Axes | None = None, earlier_runs: str = "faded") -> Figure:
    """The workload's own peak memory vs ``x`` (GPU: allocated solid, reserved dashed; CPU:
    resident set above each point's start); capacity in the caption (and as a line on a GPU
    plot that comes near it); OOM marked."""
    return _one_axes(_draw_memory, df, x, series, ax, earlier_runs)


def throughput_and_memory_figure(df: pd.DataFrame, x: str, *, series: str | None = None,
                                 peak_tflops=None, earlier_runs: str = "faded") -> Figure:
    """Throughput (left) and peak memory (right) side by side with one legend on the right:
    the panels' live plot. Laid out by hand (no constrained layout) so a re-plot stays fast."""
    # titles at the top of their axes, where nothing sits above them: placing them there by
    # hand spares each draw a measure of every tick label; room right of the left for "% of peak"
    with rc_context({"axes.titley": 1.0}):
        fig, (left, right), look = laid_out(df, series, earlier_runs, (10.0, 4.2),
                                            (0.075, 0.25, 0.29, 0.59), (0.51, 0.25, 0.21, 0.59))
    entries = _draw_throughput(left, df, x, look, peak_tflops) + _draw_memory(right, df, x, look)
    figure_legend(fig, wrapped_entries(entries), 0.735, top=0.86)
    return fig


def throughput_into(ax: Axes, df: pd.DataFrame, x: str, look: Look) -> None:
    """throughput_figure drawn into `ax` as `look` colours it, without its own legend."""
    throughput_figure(df, x, series=look.series, ax=ax, earlier_runs=look.earlier_runs)
    ax.set_title(ax.get_title().split("\n")[0])  # the devices go in the figure's title
    if ax.get_legend() is not None:
        ax.get_legend().remove()


def under_throughput(df: pd.DataFrame, x: str, series: str | None, earlier_runs: str,
                     *rects: tuple, sharex: bool = False) -> tuple[Figure, list[Axes], str | None]:
    """A figure in rows laid out by hand: throughput_figure on top (the devices in its title)
    above axes at `rects`; returns them and the series drawn (default "label")."""
    fig = LabFigure(figsize=(10.0, 8.6))  # each row's legend on its right
    top = fig.add_axes((0.08, 0.72, 0.46, 0.21))
    axes = [fig.add_axes(rect, sharex=top if sharex else None) for rect in rects]
    series = series if series is not None or df.empty else "label"
    throughput_figure(df, x, series=series, ax=top, earlier_runs=earlier_runs)
    return fig, axes, series


