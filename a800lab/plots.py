"""Results frames -> matplotlib Figures, for the panels, the notebooks and saved reports.

Every function takes the frame of ``a800lab.core.results.load_results`` (one row per measured
point) and returns a ``matplotlib.figure.Figure`` built without pyplot: no global state, so it is
safe off the kernel's main thread and headless (Agg). Pass ``ax=`` to draw into an Axes you own;
the function then returns that Axes' figure.

    from a800lab.plots import throughput_figure, heatmap_figure
    fig = throughput_figure(df, "n", series="precision")       # one line per precision and run
    fig = heatmap_figure(df, "block_m", "block_n")              # TFLOP/s per tile shape
    fig.savefig("matmul.png")

What every figure says (see a800lab.plot_look): the device(s) and mode ("GPU" / "CPU fallback")
in its title; one line per series *and run*, the newest run of a series drawn strongest and
earlier runs faded (``earlier_runs="hidden"`` leaves them out), never averaged together; noisy
points as hollow markers; the IQR band and every marker named in a legend placed outside the
axes, at most 8 series named and the rest grey and summarised. Only ``outcome == "ok"`` rows are
drawn as measurements; oom / wrong / error points are marked on the x axis, so a failed
configuration is visible rather than silently missing. An empty or all-failed frame gives a
figure that says "no successful points yet" instead of raising.

Memory is the workload's own peak above what the process held before the point (GPU: live
tensors; CPU: resident set), on an axis scaled to the data; capacity is named in the caption.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Rectangle

from .core.specs import match
from .plot_look import (
    Look,
    band_handle,
    describe_devices,
    noisy_handle,
    note_handle,
    place_legend,
    unique_entries,
)
from .plot_parts import (
    NO_POINTS_TEXT,
    Lines,
    XAxis,
    flags,
    floats,
    fmt,
    groups,
    mark_failures,
    ordered,
    per_position,
    throughput_band,
)

GIB = 2**30
# GPU memory: draw the capacity line only when the data reach this share of it; lower, the line
# would squash the data against the floor, so the capacity goes to the caption alone.
CAPACITY_LINE_MIN_SHARE = 0.5
# telemetry key, axis label, divisor
_TELEMETRY_PANELS = (
    ("gpu_util_pct", "GPU util (%)", 1.0),
    ("mem_used_bytes", "memory used (GiB)", GIB),
    ("power_w", "power (W)", 1.0),
    ("sm_clock_mhz", "SM clock (MHz)", 1.0),
)
_LABEL_WIDTH = 36  # legend labels wrap here so a long device name stays inside the figure
_CAPTION_WIDTH = 70  # a caption under the memory axes wraps before the figure's right edge


def _axes(ax: Axes | None, figsize=(8.6, 4.6)) -> tuple[Figure, Axes, bool]:
    """(figure, axes, whether the figure is ours); ours have room for a legend on the right."""
    if ax is not None:
        return ax.figure, ax, False
    fig = Figure(figsize=figsize, layout="constrained")
    return fig, fig.add_subplot(), True


def _name_devices(fig: Figure, ax: Axes, df: pd.DataFrame, own: bool) -> None:
    """Device(s) and mode as the figure's subtitle, or under the title of an Axes we were lent."""
    devices = describe_devices(df)
    if own:
        fig.suptitle(devices, fontsize="medium")
    else:
        ax.set_title(f"{ax.get_title()}\n{devices}")


def _require(df: pd.DataFrame, *columns: str | None) -> None:
    for name in columns:
        if name is not None and name not in df.columns:
            raise ValueError(f"column {name!r} is not in the results frame; available columns: "
                             f"{sorted(map(str, df.columns))}; pass one of those")


def _say(ax: Axes, text: str) -> None:
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center",
            color="dimgray", fontsize="large")


def _caption(ax: Axes, text: str, slanted: bool) -> None:
    """A note under the axes (below the x label): what the lines measure, the capacity."""
    if text:
        wrapped = "\n".join(textwrap.fill(line, _CAPTION_WIDTH) for line in text.split("\n"))
        ax.annotate(wrapped, xy=(0, 0), xycoords="axes fraction",
                    xytext=(0, -46 if slanted else -34), textcoords="offset points", va="top",
                    fontsize="small", color="dimgray")


def _wrapped(entries: list[tuple[object, str]]) -> list[tuple[object, str]]:
    return [(h, textwrap.fill(label, _LABEL_WIDTH, subsequent_indent="  "))
            for h, label in unique_entries(entries)]


def _default_series(df: pd.DataFrame, series: str | None) -> str | None:
    return "label" if series is None and "label" in df.columns else series


def _row_peaks(ok: pd.DataFrame, peak_tflops) -> list[float]:
    """Peak TFLOP/s for each ok row (NaN when unknown): float, dict by precision, or specs."""
    if isinstance(peak_tflops, (int, float, np.number)):
        return [float(peak_tflops)] * len(ok)
    precisions = ok["precision"] if "precision" in ok.columns else [None] * len(ok)
    devices = ok["device_name"] if "device_name" in ok.columns else [None] * len(ok)
    # match(), not lookup(): an unknown device (a CPU) is reported in the title, not warned
    # about on every live re-plot.
    by_device = {d: match(str(d)) for d in dict.fromkeys(devices) if d is not None}
    peaks = []
    for precision, device in zip(precisions, devices, strict=True):
        if isinstance(peak_tflops, Mapping):
            peak = peak_tflops.get(precision)
        else:
            spec = by_device.get(device)
            peak = None if spec is None else spec.peak_tflops.get(precision)
        peaks.append(np.nan if peak is None else float(peak))
    return peaks


def _draw_throughput(ax: Axes, df: pd.DataFrame, x: str, look: Look,
                     peak_tflops) -> list[tuple[object, str]]:
    """Throughput lines, one per series and run, into `ax`; returns the legend entries."""
    ax.set_title(f"throughput vs {x}")
    if df.empty:
        _say(ax, NO_POINTS_TEXT)
        return []
    _require(df, x, "outcome", "throughput")
    xa = XAxis(df[x])
    shown = look.visible(df)
    ok = shown[(shown["outcome"] == "ok") & floats(shown, "throughput").notna()].copy()
    ok["throughput"] = ok["throughput"].astype(float)
    ok["_pos"] = xa.positions(ok[x])
    ok["_noisy"] = flags(ok, "noisy")
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
               "noisy": ok["_noisy"].to_numpy(float)}
    for (key, _run), idx in groups(ok, look).items():
        newest = bool(look.newest.loc[ok.index[idx[0]]])
        color = look.color(key)
        values = {name: column[idx] for name, column in columns.items()}
        if newest:
            values["low"], values["high"] = throughput_band(ok.iloc[idx])
        upos, counts, agg = per_position(ok["_pos"].to_numpy(float)[idx], values)
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
    if ok.empty:
        _say(ax, NO_POINTS_TEXT)
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


def throughput_figure(df: pd.DataFrame, x: str, *, series: str | None = None,
                      ax: Axes | None = None, peak_tflops=None,
                      earlier_runs: str = "faded") -> Figure:
    """Throughput vs ``x``, one line per ``series`` (default "label") and run, IQR band,
    noisy points hollow, failures marked.

    For TFLOP/s a right axis shows % of peak; ``peak_tflops`` is a float or a dict precision ->
    TFLOP/s, else the datasheet peak of each row's device_name and precision is looked up.
    """
    fig, ax, own = _axes(ax)
    series = _default_series(df, series)
    if not df.empty:
        _require(df, series)
    look = Look(df, series, earlier_runs=earlier_runs)
    place_legend(ax, _wrapped(_draw_throughput(ax, df, x, look, peak_tflops)))
    _name_devices(fig, ax, df, own)
    return fig


def _byte_unit(top_bytes: float) -> tuple[float, str]:
    """The divisor and name of the unit that suits values up to `top_bytes`."""
    for divisor, name in ((GIB, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if top_bytes >= divisor:
            return float(divisor), name
    return 1.0, "bytes"


def _memory_caption(df: pd.DataFrame, ok: pd.DataFrame, modes: pd.Series) -> str:
    """What the memory lines measure, per mode, and each device's capacity."""
    notes = []
    if (modes[ok.index] == "GPU").any():
        notes.append("solid: the point's own live tensors above what was held before it; "
                     "dashed: the allocator's total, cache included")
    if (modes[ok.index] != "GPU").any():
        notes.append("the point's own peak resident set above its start (to a few MiB)")
    capacities = floats(df, "capacity_bytes")
    for mode, what in (("GPU", "GPU memory"), ("CPU fallback", "host RAM")):
        caps = capacities[modes == mode].dropna().unique()
        if len(caps):
            notes.append(f"{what} {', '.join(f'{c / GIB:.1f}' for c in caps)} GiB")
    return "\n".join(notes)


def _draw_memory(ax: Axes, df: pd.DataFrame, x: str, look: Look) -> list[tuple[object, str]]:
    """Each point's own peak memory into `ax`; returns the legend entries."""
    ax.set_title(f"peak memory vs {x}")
    if df.empty:
        ax.set_ylabel("peak memory")
        _say(ax, NO_POINTS_TEXT)
        return []
    _require(df, x, "outcome")
    xa = XAxis(df[x])
    shown = look.visible(df)
    ok = shown[shown["outcome"] == "ok"].assign(
        _pos=lambda d: xa.positions(d[x]),
        _own=lambda d: floats(d, "peak_allocated_bytes").fillna(floats(d, "peak_rss_bytes")),
        _reserved=lambda d: floats(d, "peak_reserved_bytes"))
    top = np.nanmax([ok["_own"].max(), ok["_reserved"].max(), 0.0]) if len(ok) else 0.0
    scale, unit = _byte_unit(top)
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
        line = ax.axhline(line_y, color="black", linestyle=":")
        line.set_gid("capacity")
        entries.append((Line2D([], [], color="black", linestyle=":"),
                        f"capacity {capacity / GIB:.1f} GiB"))
    oom = shown[shown["outcome"] == "oom"]
    entries += mark_failures(ax, oom, x, xa, look, y=line_y)
    slanted = xa.apply(ax, x)
    ax.set_ylabel(f"own peak memory ({unit})")
    if ok.empty or ok[["_own", "_reserved"]].isna().all().all():
        _say(ax, NO_POINTS_TEXT if ok.empty else "no memory readings for these points")
    ax.set_ylim(bottom=0)
    _caption(ax, _memory_caption(df, ok, look.modes), slanted)
    return entries


def memory_figure(df: pd.DataFrame, x: str, *, series: str | None = None,
                  ax: Axes | None = None, earlier_runs: str = "faded") -> Figure:
    """The workload's own peak memory vs ``x`` (GPU: allocated solid, reserved dashed; CPU:
    resident set above each point's start), on an axis scaled to the data; capacity in the
    caption (and as a line on a GPU plot that comes near it); OOM marked."""
    fig, ax, own = _axes(ax)
    series = _default_series(df, series)
    if not df.empty:
        _require(df, series)
    look = Look(df, series, earlier_runs=earlier_runs)
    place_legend(ax, _wrapped(_draw_memory(ax, df, x, look)))
    _name_devices(fig, ax, df, own)
    return fig


def _fmt_value(v: float) -> str:
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}"


def _failure_note(cell: pd.DataFrame) -> str:
    """What a cell without a good point shows: "refused" for a config turned down before it
    ran (a ValueError naming why), else its outcome (wrong / oom / error)."""
    last = cell.iloc[-1]
    if last["outcome"] == "ok":
        return "n/a"
    if last["outcome"] == "error" and str(last.get("message", "")).startswith("ValueError"):
        return "refused"
    return str(last["outcome"])


def heatmap_figure(df: pd.DataFrame, x: str, y: str, *, value: str = "throughput",
                   ax: Axes | None = None, highlight_best: bool = True) -> Figure:
    """``value`` over the grid ``x`` by ``y``: failed cells named in grey ("refused" for a
    config turned down before it ran), noisy cells marked "~", the best cell outlined. A cell
    measured in several runs shows its newest run (the title says how many cells that was)."""
    fig, ax, own = _axes(ax, figsize=(6.4, 4.8))
    ax.set_title(f"{value} over {x} x {y}")
    if not df.empty:
        _require(df, x, y, value, "outcome")
    if df.empty or floats(df, value)[df["outcome"] == "ok"].dropna().empty:
        _say(ax, NO_POINTS_TEXT)
        _name_devices(fig, ax, df, own)
        return fig
    xs, ys = ordered(df[x]), ordered(df[y])
    col = {v: j for j, v in enumerate(xs)}
    row = {v: i for i, v in enumerate(ys)}
    grid = np.full((len(ys), len(xs)), np.nan)
    notes, noisy_cells, rerun_cells = {}, set(), 0
    runs = Look(df, None).run
    for (xv, yv), cell in df.groupby([x, y], sort=False):
        good = cell[cell["outcome"] == "ok"]
        vals = floats(good, value).dropna()
        i, j = row[yv], col[xv]
        if vals.empty:
            notes[i, j] = _failure_note(cell)
            continue
        cell_runs = runs[vals.index]
        rerun_cells += cell_runs.nunique() > 1
        newest = vals.index[cell_runs == cell_runs.max()]
        grid[i, j] = vals[newest].median()
        if flags(good.loc[newest], "noisy").any():
            noisy_cells.add((i, j))
    cmap = matplotlib.colormaps["viridis"].with_extremes(bad="#eeeeee")
    image = ax.imshow(np.ma.masked_invalid(grid), origin="lower", aspect="auto", cmap=cmap)
    for i, j in zip(*np.nonzero(np.isfinite(grid)), strict=True):
        dark = image.norm(grid[i, j]) < 0.5  # low end of viridis is dark: write in white
        mark = "~" if (i, j) in noisy_cells else ""
        ax.text(j, i, mark + _fmt_value(grid[i, j]), ha="center", va="center",
                fontsize="small", color="white" if dark else "black")
    for (i, j), text in notes.items():
        ax.text(j, i, text, ha="center", va="center", fontsize="small", color="gray",
                style="italic")
    notes_below = []
    if highlight_best:
        best_i, best_j = np.unravel_index(np.nanargmax(grid), grid.shape)
        outline = Rectangle((best_j - 0.5, best_i - 0.5), 1, 1, fill=False,
                                               edgecolor="red", linewidth=2.5)
        ax.add_patch(outline)
        outline.set_gid("best")
        notes_below.append(f"red outline: best ({x}={fmt(xs[best_j])}, {y}={fmt(ys[best_i])})")
    if noisy_cells:
        notes_below.append(f"~: noisy timing ({len(noisy_cells)} cells), see the table")
    ax.set_xticks(range(len(xs)), [fmt(v) for v in xs])
    ax.set_yticks(range(len(ys)), [fmt(v) for v in ys])
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    _caption(ax, "; ".join(notes_below), False)
    if rerun_cells:
        ax.set_title(f"{value} over {x} x {y} ({rerun_cells} cells measured in several runs: "
                     "newest shown)")
    label = value
    if value == "throughput" and "throughput_unit" in df.columns:
        units = df.loc[df["outcome"] == "ok", "throughput_unit"].unique()
        label = f"throughput ({', '.join(map(str, units))})"
    fig.colorbar(image, ax=ax, label=label)
    _name_devices(fig, ax, df, own)
    return fig


def _positive(name: str, value) -> float | None:
    if value is None:
        return None
    if not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"{name} must be a positive number or None (unknown), got {value!r}; "
                         "see a800lab.core.specs.lookup(device_name) for datasheet values")
    return float(value)


def roofline_figure(df: pd.DataFrame, *, peak_tflops: float | None, mem_bw_gbs: float | None,
                    measured_peak_tflops: float | None = None,
                    measured_bw_gbs: float | None = None, series: str | None = None,
                    ax: Axes | None = None, earlier_runs: str = "faded") -> Figure:
    """Achieved TFLOP/s vs arithmetic intensity (flop_count / bytes_moved) under the roofs.

    Datasheet roof solid, measured roof dashed (a missing measured value reuses the datasheet
    one); each roof's ridge point (peak / bandwidth, FLOP/byte) is marked. Points of earlier
    runs are faded.
    """
    fig, ax, own = _axes(ax)
    peak, bw = _positive("peak_tflops", peak_tflops), _positive("mem_bw_gbs", mem_bw_gbs)
    m_peak = _positive("measured_peak_tflops", measured_peak_tflops)
    m_bw = _positive("measured_bw_gbs", measured_bw_gbs)
    ax.set(xscale="log", yscale="log", xlabel="arithmetic intensity (FLOP/byte)",
           ylabel="achieved TFLOP/s", title="roofline")
    points = pd.DataFrame({"ai": [], "tflops": [], "key": []})
    entries: list[tuple[object, str]] = []
    if not df.empty:
        series = _default_series(df, series)
        _require(df, "outcome", "flop_count", "bytes_moved", series)
        look = Look(df, series, earlier_runs=earlier_runs)
        shown = look.visible(df)
        ok = shown[shown["outcome"] == "ok"]
        flop = floats(ok, "flop_count")
        # TFLOP/s = flop / (ms * 1e-3 s) / 1e12 when the workload gave no tflops metric
        tflops = floats(ok, "tflops").fillna(flop / floats(ok, "median_ms") / 1e9)
        points = pd.DataFrame({"ai": flop / floats(ok, "bytes_moved"), "tflops": tflops,
                               "key": look.key[ok.index], "newest": look.newest[ok.index]})
        points = points[np.isfinite(points["ai"]) & (points["ai"] > 0) & (points["tflops"] > 0)]
        for (key, newest), rows in points.groupby(["key", "newest"], sort=False):
            ax.plot(rows["ai"], rows["tflops"], "o", color=look.color(key),
                    alpha=look.alpha(bool(newest)), label=key, gid="data")
        entries = look.series_handles()
    roofs = []
    if peak is not None and bw is not None:
        roofs.append(("datasheet", peak, bw, "-"))
        if m_peak is not None or m_bw is not None:
            roofs.append(("measured", m_peak or peak, m_bw or bw, "--"))
    ridges = [1e3 * p / b for _, p, b, _ in roofs]  # TFLOP/s / (GB/s) = 1e3 FLOP/byte
    if roofs:
        lo, hi = min([*points["ai"], *ridges]) / 8, max([*points["ai"], *ridges]) * 8
        for (name, p, b, style), ridge in zip(roofs, ridges, strict=True):
            (line,) = ax.plot([lo, ridge, hi], [b * lo / 1e3, p, p], style, color="black")
            line.set_gid(f"roof:{name}")
            entries.append((Line2D([], [], color="black", linestyle=style),
                            f"{name}: {p:g} TFLOP/s, {b:g} GB/s"))
            (mark,) = ax.plot([ridge], [p], "o", mfc="none", color="black", markersize=9)
            mark.set_gid(f"ridge:{name}")
            ax.annotate(f"ridge {ridge:.0f} FLOP/B", (ridge, p), textcoords="offset points",
                        xytext=(6, 6 if name == "datasheet" else -14), fontsize="small")
    else:
        ax.set_title("roofline (peak unknown: no ceilings)")
    if points.empty:
        _say(ax, NO_POINTS_TEXT)
    place_legend(ax, _wrapped(entries))
    _name_devices(fig, ax, df, own)
    return fig


def _throttle_spans(samples: list[Mapping]) -> list[tuple[float, float, set]]:
    """(start_s, end_s, reasons) for each run of samples with a throttle reason ("idle" aside)."""
    spans: list[tuple[float, float, set]] = []
    current = None
    for i, s in enumerate(samples):
        reasons = {r for r in s.get("throttle_reasons") or () if "idle" not in str(r).lower()}
        end = samples[i + 1]["t_s"] if i + 1 < len(samples) else s["t_s"]
        if reasons and current is not None:
            current = (current[0], end, current[2] | reasons)
        elif reasons:
            current = (s["t_s"], end, reasons)
        elif current is not None:
            spans.append(current)
            current = None
    return spans + ([current] if current is not None else [])


def telemetry_figure(samples: Sequence[Mapping], *, device: str | None = None) -> Figure:
    """Util %, memory GiB, power W and SM clock MHz over time; throttled periods shaded red.

    ``device`` names the GPU in the title (e.g. "NVIDIA A800-SXM4-80GB, NVML 3"); without it
    a sample's "device_name" is used, else the title says the GPU was not named.
    """
    samples = sorted((s for s in samples if s.get("t_s") is not None), key=lambda s: s["t_s"])
    named = device or next((str(s["device_name"]) for s in samples if s.get("device_name")),
                           "GPU not named")
    subtitle = f"{named} (GPU, NVML telemetry)"
    if not samples:
        fig, ax, _ = _axes(None, figsize=(6.4, 4.4))
        ax.set_axis_off()
        _say(ax, "no telemetry samples")
        fig.suptitle(subtitle, fontsize="medium")
        return fig
    t0 = samples[0]["t_s"]  # one-off snapshots carry time.time(); plot from zero either way
    samples = [{**s, "t_s": s["t_s"] - t0} for s in samples]
    fig = Figure(figsize=(7, 7.5), layout="constrained")
    axes = fig.subplots(len(_TELEMETRY_PANELS), 1, sharex=True)
    spans = _throttle_spans(samples)
    for n, (ax, (key, label, scale)) in enumerate(zip(axes, _TELEMETRY_PANELS, strict=True)):
        points = [(s["t_s"], s[key] / scale) for s in samples if s.get(key) is not None]
        if points:
            ax.plot(*zip(*points, strict=True), marker=".", markersize=3)
        else:
            _say(ax, "n/a")
        ax.set_ylabel(label)
        for start, end, reasons in spans:
            ax.axvspan(start, end, color="tab:red", alpha=0.15, linewidth=0,
                       label=f"throttled: {', '.join(sorted(reasons))}" if n == 0 else None)
    axes[0].set_title("telemetry")
    fig.suptitle(subtitle, fontsize="medium")
    axes[-1].set_xlabel("time (s)")
    if axes[0].get_legend_handles_labels()[0]:
        axes[0].legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.02, 1.0),
                       borderaxespad=0.0)
    return fig


def throughput_and_memory_figure(df: pd.DataFrame, x: str, *, series: str | None = None,
                                 peak_tflops=None, earlier_runs: str = "faded") -> Figure:
    """Throughput (left) and peak memory (right) side by side with one legend on the right:
    the panels' live plot. Laid out by hand (no constrained layout) so a re-plot stays fast."""
    fig = Figure(figsize=(10.0, 4.2))
    left = fig.add_axes((0.075, 0.25, 0.29, 0.59))   # room on its right for "% of peak"
    right = fig.add_axes((0.51, 0.25, 0.21, 0.59))
    series = _default_series(df, series)
    if not df.empty:
        _require(df, series)
    look = Look(df, series, earlier_runs=earlier_runs)
    entries = _draw_throughput(left, df, x, look, peak_tflops)
    entries += _draw_memory(right, df, x, look)
    if entries:
        handles, labels = zip(*_wrapped(entries), strict=True)
        fig.legend(handles, labels, loc="upper left", bbox_to_anchor=(0.735, 0.86),
                   fontsize="small", frameon=False)
    fig.suptitle(look.devices, fontsize="medium")
    return fig
