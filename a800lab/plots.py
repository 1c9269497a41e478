"""Results frames -> matplotlib Figures, for the panels, the notebooks and saved reports.

Every function takes the frame of ``a800lab.core.results.load_results`` (one row per measured
point) and returns a ``matplotlib.figure.Figure`` built without pyplot: no global state, so it is
safe off the kernel's main thread and headless (Agg). Pass ``ax=`` to draw into an Axes you own;
the function then returns that Axes' figure.

    from a800lab.plots import throughput_figure, heatmap_figure
    fig = throughput_figure(df, "n", series="precision")       # one line per precision
    fig = heatmap_figure(df, "block_m", "block_n")              # TFLOP/s per tile shape
    fig.savefig("matmul.png")

Only ``outcome == "ok"`` rows are drawn as measurements; oom / wrong / error points are marked
on the x axis, so a failed configuration is visible rather than silently missing. An empty or
all-failed frame gives a figure that says "no successful points yet" instead of raising.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from .core.specs import match

GIB = 2**30
NO_POINTS_TEXT = "no successful points yet"
# outcome -> (marker, colour) for failed points
FAILURE_STYLES = {"oom": ("x", "tab:red"), "wrong": ("D", "tab:orange"), "error": ("s", "black")}
_OTHER_FAILURE = ("v", "tab:gray")
# telemetry key, axis label, divisor
_TELEMETRY_PANELS = (
    ("gpu_util_pct", "GPU util (%)", 1.0),
    ("mem_used_bytes", "memory used (GiB)", GIB),
    ("power_w", "power (W)", 1.0),
    ("sm_clock_mhz", "SM clock (MHz)", 1.0),
)


def _axes(ax: Axes | None, figsize=(6.4, 4.4)) -> tuple[Figure, Axes]:
    if ax is not None:
        return ax.figure, ax
    fig = Figure(figsize=figsize, layout="constrained")
    return fig, fig.add_subplot()


def _require(df: pd.DataFrame, *columns: str | None) -> None:
    for name in columns:
        if name is not None and name not in df.columns:
            raise ValueError(f"column {name!r} is not in the results frame; available columns: "
                             f"{sorted(map(str, df.columns))}; pass one of those")


def _say(ax: Axes, text: str) -> None:
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center",
            color="dimgray", fontsize="large")


def _legend(ax: Axes) -> None:
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize="small")


def _default_series(df: pd.DataFrame, series: str | None) -> str | None:
    return "label" if series is None and "label" in df.columns else series


def _floats(df: pd.DataFrame, name: str) -> pd.Series:
    """A numeric column as floats; all NaN when the frame lacks it."""
    if name not in df.columns:
        return pd.Series(np.nan, index=df.index, dtype=float)
    return pd.to_numeric(df[name], errors="coerce").astype(float)


def _series_key(df: pd.DataFrame, series: str | None) -> pd.Series:
    return pd.Series("", index=df.index) if series is None else df[series].astype(str)


def _series_colors(df: pd.DataFrame, series: str | None) -> dict[str, str]:
    """Series key -> colour, from the whole frame so colours stay put as points arrive."""
    return {k: f"C{i % 10}" for i, k in enumerate(dict.fromkeys(_series_key(df, series)))}


def _fmt(value) -> str:
    if isinstance(value, (float, np.floating)) and float(value).is_integer():
        return str(int(value))
    return str(value)


def _ordered(values: pd.Series) -> list:
    """Distinct values: numbers sorted, anything else in the order first seen."""
    values = values.dropna()
    if pd.api.types.is_numeric_dtype(values) and not pd.api.types.is_bool_dtype(values):
        return sorted(values.unique())
    return list(dict.fromkeys(values))


class _XAxis:
    """Where x values sit: numbers at themselves, anything else at 0..n-1 in the order seen."""

    def __init__(self, values: pd.Series):
        values = values.dropna()
        numeric = pd.to_numeric(values, errors="coerce")
        is_bool = pd.api.types.is_bool_dtype(values)
        self.values = numeric.to_numpy(float)
        self.categories = None
        if is_bool or numeric.isna().any():
            self.categories = {v: i for i, v in enumerate(dict.fromkeys(values.astype(str)))}

    def positions(self, values: pd.Series) -> np.ndarray:
        if self.categories is None:
            return pd.to_numeric(values, errors="coerce").to_numpy(float)
        return np.array([self.categories.get(str(v), np.nan) for v in values], dtype=float)

    def apply(self, ax: Axes, name: str) -> None:
        ax.set_xlabel(name)
        if self.categories is not None:
            ax.set_xticks(range(len(self.categories)), list(self.categories))
            ax.set_xlim(-0.5, len(self.categories) - 0.5)
            return
        distinct = np.unique(self.values[np.isfinite(self.values)])
        powers_of_two = distinct.size > 2 and all(
            v > 0 and v.is_integer() and int(v) & (int(v) - 1) == 0 for v in distinct)
        if powers_of_two:  # sizes swept as 256, 512, 1024 ... read best on a log2 axis
            ax.set_xscale("log", base=2)
            if distinct.size <= 12:
                ax.set_xticks(distinct, [_fmt(v) for v in distinct])


def _mark_failures(ax: Axes, df: pd.DataFrame, x: str, xa: _XAxis) -> None:
    """One marker per failed point, sitting on the x axis whatever the y scale."""
    failed = df[df["outcome"] != "ok"]
    for outcome, rows in failed.groupby("outcome", sort=True):
        marker, color = FAILURE_STYLES.get(outcome, _OTHER_FAILURE)
        (line,) = ax.plot(xa.positions(rows[x]), np.zeros(len(rows)), linestyle="none",
                          marker=marker, color=color, markersize=9, clip_on=False, zorder=5,
                          transform=ax.get_xaxis_transform(), label=f"{outcome} ({len(rows)})")
        line.set_gid(f"outcome:{outcome}")


def _throughput_band(ok: pd.DataFrame) -> tuple[list[float], list[float]]:
    """Throughput at the timing quartiles: time q75 gives the low edge, q25 the high edge."""
    low, high = [], []
    samples_col = ok["time_ms"] if "time_ms" in ok.columns else [None] * len(ok)
    for thr, samples, median in zip(ok["throughput"], samples_col, _floats(ok, "median_ms"),
                                    strict=True):
        s = np.asarray(samples if isinstance(samples, (list, tuple, np.ndarray)) else [], float)
        s = s[np.isfinite(s)]
        q25, q75 = np.percentile(s, [25, 75]) if s.size >= 2 else (0.0, 0.0)
        if q25 <= 0:
            low.append(thr)
            high.append(thr)
            continue
        median = median if np.isfinite(median) else float(np.median(s))
        low.append(thr * median / q75)
        high.append(thr * median / q25)
    return low, high


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


def throughput_figure(df: pd.DataFrame, x: str, *, series: str | None = None,
                      ax: Axes | None = None, peak_tflops=None) -> Figure:
    """Throughput vs ``x``, one line per ``series`` (default "label"), IQR band, failures marked.

    For TFLOP/s a right axis shows % of peak; ``peak_tflops`` is a float or a dict precision ->
    TFLOP/s, else the datasheet peak of each row's device_name and precision is looked up.
    """
    fig, ax = _axes(ax)
    ax.set_title(f"throughput vs {x}")
    if df.empty:
        _say(ax, NO_POINTS_TEXT)
        return fig
    series = _default_series(df, series)
    _require(df, x, series, "outcome", "throughput")
    xa = _XAxis(df[x])
    ok = df[(df["outcome"] == "ok") & _floats(df, "throughput").notna()].copy()
    ok["throughput"] = ok["throughput"].astype(float)
    ok["_pos"] = xa.positions(ok[x])
    ok["_low"], ok["_high"] = _throughput_band(ok)
    units = list(dict.fromkeys(ok["throughput_unit"])) if "throughput_unit" in ok.columns else []
    unit = ", ".join(map(str, units)) or "throughput"
    ok["_peak"] = _row_peaks(ok, peak_tflops) if unit == "TFLOP/s" else np.nan
    known_peaks = ok["_peak"].dropna().unique()
    single_peak = known_peaks[0] if len(known_peaks) == 1 and ok["_peak"].notna().all() else None
    colors = _series_colors(df, series)
    dodge = 0.5 / len(colors) if xa.categories is not None else 0.0  # keep series apart
    for key, rows in ok.groupby(_series_key(ok, series), sort=False):
        color = colors[key]
        agg = rows.groupby("_pos").agg(thr=("throughput", "median"), low=("_low", "median"),
                                       high=("_high", "median"), peak=("_peak", "first"))
        pos = agg.index.to_numpy(float) + dodge * (list(colors).index(key) - (len(colors) - 1) / 2)
        if xa.categories is None:
            ax.plot(pos, agg["thr"], marker="o", color=color, label=key or None)
            ax.fill_between(pos, agg["low"], agg["high"], color=color, alpha=0.2, linewidth=0)
        else:  # no line joining categories; the timing spread becomes an error bar
            spread = [agg["thr"] - agg["low"], agg["high"] - agg["thr"]]
            ax.errorbar(pos, agg["thr"], yerr=np.clip(spread, 0, None), fmt="o", color=color,
                        capsize=4, label=key or None)
        if single_peak is None:  # peaks differ per point (x = precision, overlaid devices)
            for p, thr, peak in zip(pos, agg["thr"], agg["peak"], strict=True):
                if np.isfinite(peak):
                    ax.annotate(f"{100 * thr / peak:.0f}%", (p, thr), textcoords="offset points",
                                xytext=(8, 0) if dodge else (0, 6), fontsize="small",
                                ha="left" if dodge else "center", color=color)
    _mark_failures(ax, df, x, xa)
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
    _legend(ax)
    return fig


def memory_figure(df: pd.DataFrame, x: str, *, series: str | None = None,
                  ax: Axes | None = None) -> Figure:
    """Peak allocated (solid) and reserved (dashed) GiB vs ``x``; capacity line; OOM marked.

    CPU points have no allocator peaks; their process resident set (dotted) is drawn instead.
    """
    fig, ax = _axes(ax)
    ax.set_title(f"peak memory vs {x}")
    ax.set_ylabel("GiB")
    if df.empty:
        _say(ax, NO_POINTS_TEXT)
        return fig
    series = _default_series(df, series)
    _require(df, x, series, "outcome")
    xa = _XAxis(df[x])
    ok = df[df["outcome"] == "ok"].assign(_pos=lambda d: xa.positions(d[x]),
                                          _alloc=lambda d: _floats(d, "peak_allocated_bytes"),
                                          _reserved=lambda d: _floats(d, "peak_reserved_bytes"),
                                          _rss=lambda d: _floats(d, "rss_bytes"))
    colors = _series_colors(df, series)
    drawn = False
    for key, rows in ok.groupby(_series_key(ok, series), sort=False):
        agg = rows.groupby("_pos")[["_alloc", "_reserved", "_rss"]].median() / GIB
        prefix = f"{key} " if key else "peak "
        for column, style, what in (("_alloc", "-o", "allocated"),
                                    ("_reserved", "--s", "reserved"),
                                    ("_rss", ":^", "process RSS (CPU)")):
            values = agg[column].dropna()
            if not values.empty:
                ax.plot(values.index, values, style, color=colors[key], label=prefix + what)
                drawn = True
    capacities = _floats(df, "capacity_bytes")
    for cap in capacities.dropna().unique():
        line = ax.axhline(cap / GIB, color="black", linestyle=":",
                          label=f"capacity {cap / GIB:.1f} GiB")
        line.set_gid("capacity")
    oom = df["outcome"] == "oom"
    if oom.any():  # at the capacity they ran into; on the x axis when no capacity is known
        y = capacities[oom].fillna(capacities.max()) / GIB
        unknown = bool(y.isna().all())
        (line,) = ax.plot(xa.positions(df.loc[oom, x]), np.zeros(len(y)) if unknown else y,
                          linestyle="none", marker="x", color="tab:red", markersize=10, mew=2,
                          clip_on=False, label=f"oom ({int(oom.sum())})",
                          transform=ax.get_xaxis_transform() if unknown else ax.transData)
        line.set_gid("outcome:oom")
    xa.apply(ax, x)
    if ok.empty or not drawn:
        _say(ax, NO_POINTS_TEXT if ok.empty else "no memory readings for these points")
    ax.set_ylim(bottom=0)
    _legend(ax)
    return fig


def _fmt_value(v: float) -> str:
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}"


def heatmap_figure(df: pd.DataFrame, x: str, y: str, *, value: str = "throughput",
                   ax: Axes | None = None) -> Figure:
    """``value`` over the grid ``x`` by ``y``, median per cell, failed cells named in grey."""
    fig, ax = _axes(ax)
    ax.set_title(f"{value} over {x} x {y}")
    if not df.empty:
        _require(df, x, y, value, "outcome")
    if df.empty or _floats(df, value)[df["outcome"] == "ok"].dropna().empty:
        _say(ax, NO_POINTS_TEXT)
        return fig
    xs, ys = _ordered(df[x]), _ordered(df[y])
    col = {v: j for j, v in enumerate(xs)}
    row = {v: i for i, v in enumerate(ys)}
    grid = np.full((len(ys), len(xs)), np.nan)
    notes = {}
    for (xv, yv), cell in df.groupby([x, y], sort=False):
        vals = _floats(cell, value)[cell["outcome"] == "ok"].dropna()
        i, j = row[yv], col[xv]
        if vals.empty:
            last = str(cell["outcome"].iloc[-1])
            notes[i, j] = "n/a" if last == "ok" else last
        else:
            grid[i, j] = vals.median()
    cmap = matplotlib.colormaps["viridis"].with_extremes(bad="#eeeeee")
    image = ax.imshow(np.ma.masked_invalid(grid), origin="lower", aspect="auto", cmap=cmap)
    for i, j in zip(*np.nonzero(np.isfinite(grid)), strict=True):
        dark = image.norm(grid[i, j]) < 0.5  # low end of viridis is dark: write in white
        ax.text(j, i, _fmt_value(grid[i, j]), ha="center", va="center", fontsize="small",
                color="white" if dark else "black")
    for (i, j), text in notes.items():
        ax.text(j, i, text, ha="center", va="center", fontsize="small", color="gray",
                style="italic")
    ax.set_xticks(range(len(xs)), [_fmt(v) for v in xs])
    ax.set_yticks(range(len(ys)), [_fmt(v) for v in ys])
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    label = value
    if value == "throughput" and "throughput_unit" in df.columns:
        units = df.loc[df["outcome"] == "ok", "throughput_unit"].unique()
        label = f"throughput ({', '.join(map(str, units))})"
    fig.colorbar(image, ax=ax, label=label)
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
                    ax: Axes | None = None) -> Figure:
    """Achieved TFLOP/s vs arithmetic intensity (flop_count / bytes_moved) under the roofs.

    Datasheet roof solid, measured roof dashed (a missing measured value reuses the datasheet
    one); each roof's ridge point (peak / bandwidth, FLOP/byte) is marked.
    """
    fig, ax = _axes(ax)
    peak, bw = _positive("peak_tflops", peak_tflops), _positive("mem_bw_gbs", mem_bw_gbs)
    m_peak = _positive("measured_peak_tflops", measured_peak_tflops)
    m_bw = _positive("measured_bw_gbs", measured_bw_gbs)
    ax.set(xscale="log", yscale="log", xlabel="arithmetic intensity (FLOP/byte)",
           ylabel="achieved TFLOP/s", title="roofline")
    points = pd.DataFrame({"ai": [], "tflops": [], "key": []})
    if not df.empty:
        series = _default_series(df, series)
        _require(df, "outcome", "flop_count", "bytes_moved", series)
        ok = df[df["outcome"] == "ok"]
        flop = _floats(ok, "flop_count")
        # TFLOP/s = flop / (ms * 1e-3 s) / 1e12 when the workload gave no tflops metric
        tflops = _floats(ok, "tflops").fillna(flop / _floats(ok, "median_ms") / 1e9)
        points = pd.DataFrame({"ai": flop / _floats(ok, "bytes_moved"), "tflops": tflops,
                               "key": _series_key(ok, series)})
        points = points[np.isfinite(points["ai"]) & (points["ai"] > 0) & (points["tflops"] > 0)]
        colors = _series_colors(df, series)
        for key, rows in points.groupby("key", sort=False):
            ax.plot(rows["ai"], rows["tflops"], "o", color=colors[key], label=key or None)
    roofs = []
    if peak is not None and bw is not None:
        roofs.append(("datasheet", peak, bw, "-"))
        if m_peak is not None or m_bw is not None:
            roofs.append(("measured", m_peak or peak, m_bw or bw, "--"))
    ridges = [1e3 * p / b for _, p, b, _ in roofs]  # TFLOP/s / (GB/s) = 1e3 FLOP/byte
    if roofs:
        lo, hi = min([*points["ai"], *ridges]) / 8, max([*points["ai"], *ridges]) * 8
        for (name, p, b, style), ridge in zip(roofs, ridges, strict=True):
            (line,) = ax.plot([lo, ridge, hi], [b * lo / 1e3, p, p], style, color="black",
                              label=f"{name}: {p:g} TFLOP/s, {b:g} GB/s")
            line.set_gid(f"roof:{name}")
            (mark,) = ax.plot([ridge], [p], "o", mfc="none", color="black", markersize=9)
            mark.set_gid(f"ridge:{name}")
            ax.annotate(f"ridge {ridge:.0f} FLOP/B", (ridge, p), textcoords="offset points",
                        xytext=(6, 6 if name == "datasheet" else -14), fontsize="small")
    else:
        ax.set_title("roofline (peak unknown: no ceilings)")
    if points.empty:
        _say(ax, NO_POINTS_TEXT)
    _legend(ax)
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


def telemetry_figure(samples: Sequence[Mapping]) -> Figure:
    """Util %, memory GiB, power W and SM clock MHz over time; throttled periods shaded red."""
    samples = sorted((s for s in samples if s.get("t_s") is not None), key=lambda s: s["t_s"])
    if not samples:
        fig, ax = _axes(None)
        ax.set_axis_off()
        _say(ax, "no telemetry samples")
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
    axes[-1].set_xlabel("time (s)")
    _legend(axes[0])
    return fig


def throughput_and_memory_figure(df: pd.DataFrame, x: str, *, series: str | None = None,
                                 peak_tflops=None) -> Figure:
    """Throughput (left) and peak memory (right) side by side: the panels' live plot."""
    fig = Figure(figsize=(12, 4.5), layout="constrained")
    left, right = fig.subplots(1, 2)
    throughput_figure(df, x, series=series, ax=left, peak_tflops=peak_tflops)
    memory_figure(df, x, series=series, ax=right)
    return fig
