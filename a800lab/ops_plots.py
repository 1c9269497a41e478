"""Figures of the systems chapters (09 and 10): samples/s, energy and cost per sample; two
machines' throughputs side by side; a stress run's cards against their siblings. Pure
matplotlib (no pyplot), like a800lab.plots.

    from a800lab.ops_plots import cost_figure, lineup_figure, stress_figure
    fig = cost_figure(df, "precision", price_per_gpu_hour_usd=2.5)   # the CostExplorer plot
    fig = lineup_figure(diff_files("a.jsonl", "b.jsonl"))           # B / A per config
    fig = stress_figure(stress_report())                             # cards vs siblings

`df` is a results frame of metered points (a800lab.workloads.usage). Every figure names its
device(s) and mode in its title and keeps its legend outside the axes. In the cost figure each
series' newest run is drawn strongest and earlier runs faded (as everywhere in the lab); the
marker says where energy came from (circle: the GPU's energy counter; triangle: power x time,
an estimate; square: RAPL, the whole CPU package); without energy (a CPU without RAPL) the
middle row shows CPU time per sample instead, and says so.
"""

from __future__ import annotations

import textwrap

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from .core.envdiff import EnvDiff, format_params
from .plot_look import Look, place_legend
from .plots import NO_POINTS_TEXT, throughput_figure

# energy source -> (marker, legend text)
SOURCE_MARKERS = {
    "energy_counter": ("o", "circle: the GPU's energy counter"),
    "power_x_time": ("^", "triangle: power x time (an estimate)"),
    "rapl": ("s", "square: RAPL, the whole CPU package"),
}
_MAX_LINEUP_ROWS = 30
_LABEL_WIDTH = 36  # legend labels wrap here, as in a800lab.plots


def _legend(ax: Axes, entries: list) -> None:
    """place_legend with each label wrapped to fit beside the axes."""
    place_legend(ax, [(h, textwrap.fill(label, _LABEL_WIDTH, subsequent_indent="  "))
                      for h, label in entries])


def _say(ax: Axes, text: str) -> None:
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", color="dimgray")


def _floats(df: pd.DataFrame, name: str) -> np.ndarray:
    if name not in df:
        return np.full(len(df), np.nan)
    return pd.to_numeric(df[name], errors="coerce").to_numpy(float)


def _positions(df: pd.DataFrame, x: str) -> pd.Series:
    """Where each row sits on the x axis the throughput row drew: numbers at themselves,
    anything else at 0..n-1 in the order first seen."""
    values = df[x]
    numeric = pd.to_numeric(values, errors="coerce")
    if pd.api.types.is_bool_dtype(values) or numeric[values.notna()].isna().any():
        order = {v: i for i, v in enumerate(dict.fromkeys(values.dropna().astype(str)))}
        return values.astype(str).map(order).astype(float)
    return numeric.astype(float)


def _draw_lines(ax: Axes, ok: pd.DataFrame, pos: pd.Series, y: np.ndarray, look: Look,
                markers: list[str], style: str = "-") -> None:
    """One line per series and run, sorted by x; each point's marker from `markers`."""
    frame = pd.DataFrame({"pos": pos[ok.index].to_numpy(), "y": y, "marker": markers},
                         index=ok.index)
    groups = frame.groupby([look.key[ok.index], look.run[ok.index]], sort=False)
    for (key, _run), rows in groups:
        rows = rows[np.isfinite(rows["y"])].sort_values("pos")
        if rows.empty:
            continue
        newest = bool(look.newest[rows.index[0]])
        color, alpha = look.color(key), look.alpha(newest)
        ax.plot(rows["pos"], rows["y"], style, color=color, alpha=alpha,
                lw=1.8 if newest else 1.0)
        for marker, part in rows.groupby("marker"):
            ax.plot(part["pos"], part["y"], marker, linestyle="none", color=color, alpha=alpha,
                    markersize=6 if newest else 4)


def _draw_energy(ax: Axes, ok: pd.DataFrame, pos: pd.Series, look: Look) -> list:
    """J per sample by energy source, or CPU ms per sample where no point has energy."""
    energy = _floats(ok, "j_per_sample")
    unit = str(ok["sample_unit"].iloc[0]) if "sample_unit" in ok and len(ok) else "sample"
    singular = unit[:-1] if unit.endswith("s") else unit
    if np.isfinite(energy).any():
        sources = ok["energy_source"].astype(str) if "energy_source" in ok else \
            pd.Series("", index=ok.index)
        markers = [SOURCE_MARKERS.get(s, ("x", ""))[0] for s in sources]
        _draw_lines(ax, ok, pos, energy, look, markers)
        ax.set_title(f"energy per {singular}")
        ax.set_ylabel(f"J per {singular}")
        entries = [(Line2D([], [], color="black", marker=SOURCE_MARKERS[s][0], linestyle="none"),
                    SOURCE_MARKERS[s][1]) for s in dict.fromkeys(sources)
                   if s in SOURCE_MARKERS]
        missing = int((~np.isfinite(energy)).sum())
        if missing:
            entries.append((Line2D([], [], linestyle="none"),
                            f"{missing} point(s) without energy (not drawn)"))
        return entries
    cpu = _floats(ok, "cpu_ms_per_sample")
    _draw_lines(ax, ok, pos, cpu, look, ["o"] * len(ok))
    ax.set_title(f"energy unavailable: CPU time per {singular}")
    ax.set_ylabel(f"CPU ms per {singular}")
    return [(Line2D([], [], linestyle="none"),
             "no energy readings here (no GPU counter or power, no readable RAPL): this "
             "process's CPU time, all threads")]


def _draw_cost(ax: Axes, ok: pd.DataFrame, pos: pd.Series, look: Look, price: float,
               gpus: int, price_per_kwh_usd: float) -> list:
    """Cost per million samples at `price` per GPU-hour; electricity dashed."""
    unit = str(ok["sample_unit"].iloc[0]) if "sample_unit" in ok and len(ok) else "samples"
    ax.set_ylabel(f"USD per million {unit}")
    if price <= 0:
        ax.set_title("cost per million: enter a price per GPU-hour")
        return []
    rate = _floats(ok, "throughput")
    with np.errstate(divide="ignore", invalid="ignore"):
        cost = price * gpus / (rate * 3600.0) * 1e6
    _draw_lines(ax, ok, pos, cost, look, ["o"] * len(ok))
    per = f" x {gpus} GPUs" if gpus != 1 else ""
    ax.set_title(f"cost per million {unit} at ${price:g} per GPU-hour{per}")
    entries = []
    energy = _floats(ok, "j_per_sample")
    if price_per_kwh_usd > 0 and np.isfinite(energy).any():
        _draw_lines(ax, ok, pos, energy * 1e6 / 3.6e6 * price_per_kwh_usd, look,
                    ["o"] * len(ok), style="--")
        entries.append((Line2D([], [], color="black", linestyle="--"),
                        f"dashed: electricity at ${price_per_kwh_usd:g} per kWh"))
    return entries


def cost_figure(df: pd.DataFrame, x: str, *, series: str | None = None,
                price_per_gpu_hour_usd: float = 0.0, gpus: int = 1,
                price_per_kwh_usd: float = 0.0, earlier_runs: str = "faded") -> Figure:
    """Three rows against `x`: throughput (IQR band, noisy points hollow; the device and mode
    in its title), energy per sample (or CPU time per sample), cost per million samples."""
    fig = Figure(figsize=(10.0, 8.6))
    top = fig.add_axes((0.08, 0.72, 0.46, 0.21))
    middle = fig.add_axes((0.08, 0.41, 0.46, 0.2), sharex=top)
    bottom = fig.add_axes((0.08, 0.08, 0.46, 0.2), sharex=top)
    series = series if series is not None or df.empty else "label"
    throughput_figure(df, x, series=series, ax=top, earlier_runs=earlier_runs)
    if df.empty:
        for ax in (middle, bottom):
            _say(ax, NO_POINTS_TEXT)
        return fig
    look = Look(df, series, earlier_runs=earlier_runs)
    shown = look.visible(df)
    ok = shown[(shown["outcome"] == "ok") & np.isfinite(_floats(shown, "throughput"))]
    if ok.empty:
        for ax in (middle, bottom):
            _say(ax, NO_POINTS_TEXT)
        return fig
    pos = _positions(df, x)
    _legend(middle, _draw_energy(middle, ok, pos, look))
    _legend(bottom, _draw_cost(bottom, ok, pos, look, price_per_gpu_hour_usd, gpus,
                                    price_per_kwh_usd))
    for ax in (middle, bottom):
        ax.set_ylim(bottom=0)
        ax.tick_params(labelbottom=True)
        ax.set_xlabel(x)
    return fig


def _side_label(diff: EnvDiff, which: str) -> str:
    side = diff.a if which == "A" else diff.b
    device = side.facts.get("device_name") or side.facts.get("gpu_model") or "device not recorded"
    if isinstance(device, list):
        device = device[0] if len(set(device)) == 1 else ", ".join(dict.fromkeys(device))
    mode = side.facts.get("mode", "mode not recorded")
    return f"{which}: {device} ({mode})"


def lineup_figure(diff: EnvDiff) -> Figure:
    """B / A throughput per config measured on both sides, a bar each; 1 = the same speed."""
    rows = diff.lineup[:_MAX_LINEUP_ROWS]
    fig = Figure(figsize=(9.0, 1.6 + 0.32 * max(len(rows), 3)), layout="constrained")
    ax = fig.add_subplot()
    fig.suptitle(f"{_side_label(diff, 'B')} vs {_side_label(diff, 'A')}", fontsize="medium")
    ax.set_title("throughput B / A, same configs (newest ok record of each side)")
    if not rows:
        ax.set_axis_off()
        _say(ax, "no config measured ok on both sides: run the same sweep on both machines")
        return fig
    ratios = np.array([r.ratio for r in rows])
    labels = [f"{r.workload} {format_params(r.params)} ({r.unit})" for r in rows]
    colors = ["tab:green" if q >= 1 else "tab:red" for q in ratios]
    noisy = [r.a_noisy or r.b_noisy for r in rows]
    bars = ax.barh(range(len(rows)), ratios, color=colors, alpha=0.8)
    for bar, flag in zip(bars, noisy, strict=True):
        if flag:
            bar.set_hatch("//")
    for i, q in enumerate(ratios):
        ax.annotate(f"{q:.2f}x", (q, i), textcoords="offset points", xytext=(4, 0),
                    va="center", fontsize="small")
    ax.axvline(1.0, color="black", lw=1)
    ax.set_yticks(range(len(rows)), labels, fontsize="small")
    ax.invert_yaxis()
    ax.set_xlabel("B / A")
    ax.set_xlim(0, max(1.1, ratios.max() * 1.15))
    entries = [(Patch(color="tab:green", alpha=0.8), "B faster"),
               (Patch(color="tab:red", alpha=0.8), "B slower")]
    if any(noisy):
        entries.append((Patch(facecolor="white", edgecolor="black", hatch="//"),
                        "hatched: a side's timing was noisy"))
    entries.append((Line2D([], [], linestyle="none"),
                    f"geometric mean {diff.geomean_ratio:.2f}x over {len(diff.lineup)}"))
    if len(diff.lineup) > len(rows):
        entries.append((Line2D([], [], linestyle="none"),
                        f"first {len(rows)} of {len(diff.lineup)} configs drawn"))
    _legend(ax, entries)
    return fig


def stress_figure(report) -> Figure:
    """Each card's matmul rate and copy bandwidth as bars: the siblings' median dashed, the
    threshold below it dotted, the datasheet figure solid; flagged cards red."""
    from .workloads.stress import METRICS

    cards = report.cards
    names = list(dict.fromkeys(c.name for c in cards))
    mode = "GPU" if any(c.device.startswith("cuda") for c in cards) else "CPU fallback"
    fig = Figure(figsize=(10.0, 3.8), layout="constrained")
    fig.suptitle(f"{' | '.join(names) or 'no cards'} ({mode}), {len(cards)} card(s)",
                 fontsize="medium")
    axes = fig.subplots(1, 2)
    flagged = {(f.device, f.metric) for f in report.flags}
    for ax, (metric, label) in zip(axes, METRICS.items(), strict=True):
        values = np.array([np.nan if getattr(c, metric) is None else getattr(c, metric)
                           for c in cards])
        colors = ["tab:red" if (c.device, metric) in flagged else "tab:blue" for c in cards]
        ax.bar(range(len(cards)), np.nan_to_num(values), color=colors)
        ax.set_xticks(range(len(cards)), [c.device for c in cards], fontsize="small",
                      rotation=30 if len(cards) > 4 else 0)
        ax.set_title(label)
        for name in names:
            idx = [i for i, c in enumerate(cards) if c.name == name]
            mine = values[idx][np.isfinite(values[idx])]
            span = (min(idx) - 0.4, max(idx) + 0.4)
            if len(mine) >= 2:
                median = float(np.median(mine))
                ax.hlines(median, *span, colors="black", linestyles="--")
                ax.hlines((1 - report.threshold) * median, *span, colors="black",
                          linestyles=":")
            sheet = cards[idx[0]].datasheet(metric)
            if sheet:
                ax.hlines(sheet, *span, colors="dimgray", linestyles="-")
    entries = [(Patch(color="tab:blue"), "card"), (Patch(color="tab:red"), "flagged card"),
               (Line2D([], [], color="black", linestyle="--"), "median of the cards"),
               (Line2D([], [], color="black", linestyle=":"),
                f"{100 * report.threshold:.0f}% below it: flag line"),
               (Line2D([], [], color="dimgray"), "datasheet")]
    _legend(axes[-1], entries)
    return fig
