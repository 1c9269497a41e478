"""The cost lab's figure (chapter 10): samples/s, energy per sample and cost per million samples
of metered points (a800lab.workloads.usage), configs side by side.

    fig = cost_figure(df, "precision", price_per_gpu_hour_usd=2.5)   # the CostExplorer plot
"""

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from .look import NOISY_MARKER, Look, noisy_handle, note_handle
from .parts import XAxis, flags, say, wrapped_legend
from .parts import float_values as _floats
from .sweep import NO_POINTS_TEXT, under_throughput

# energy source -> (marker, legend text)
SOURCE_MARKERS = {
    "energy_counter": ("o", "circle: the GPU's energy counter"),
    "power_x_time": ("^", "triangle: power x time (an estimate)"),
    "rapl": ("s", "square: RAPL, the whole CPU package"),
}


def _draw_lines(ax: Axes, ok: pd.DataFrame, pos: pd.Series, y: np.ndarray, look: Look,
                markers: list[str] | str = "o", style: str = "-") -> None:
    """A line per series and run, sorted by x; each point's marker from `markers`, hollow
    where noisy."""
    frame = pd.DataFrame({"pos": pos[ok.index].to_numpy(), "y": y, "marker": markers,
                          "noisy": flags(ok, "noisy").to_numpy()}, index=ok.index)
    for (key, _run), rows in frame.groupby([look.key[ok.index], look.run[ok.index]], sort=False):
        rows = rows[np.isfinite(rows["y"])].sort_values("pos")
        if rows.empty:
            continue
        newest = bool(look.newest[rows.index[0]])
        color, alpha = look.color(key), look.alpha(newest)
        ax.plot(rows["pos"], rows["y"], style, color=color, alpha=alpha,
                lw=1.8 if newest else 1.0)
        for (marker, hollow), part in rows.groupby(["marker", "noisy"]):
            ax.plot(part["pos"], part["y"], marker, linestyle="none", color=color, alpha=alpha,
                    markersize=6 if newest else 4, **(NOISY_MARKER if hollow else {}),
                    gid="noisy" if hollow else None)


def _draw_energy(ax: Axes, ok: pd.DataFrame, pos: pd.Series, look: Look, unit: str) -> list:
    """J per sample by energy source, or CPU ms per sample where no point has energy."""
    energy = _floats(ok, "j_per_sample")
    singular = unit[:-1] if unit.endswith("s") else unit
    if np.isfinite(energy).any():
        sources = ok["energy_source"].astype(str) if "energy_source" in ok else \
            pd.Series("", index=ok.index)
        markers = [SOURCE_MARKERS.get(s, ("x", ""))[0] for s in sources]
        _draw_lines(ax, ok, pos, energy, look, markers)
        ax.set(title=f"energy per {singular}", ylabel=f"J per {singular}")
        entries = [(Line2D([], [], color="black", marker=SOURCE_MARKERS[s][0], linestyle="none"),
                    SOURCE_MARKERS[s][1]) for s in dict.fromkeys(sources)
                   if s in SOURCE_MARKERS]
        missing = int((~np.isfinite(energy)).sum())
        if missing:
            entries.append(note_handle(f"{missing} point(s) without energy (not drawn)"))
        return entries
    _draw_lines(ax, ok, pos, _floats(ok, "cpu_ms_per_sample"), look)
    ax.set(title=f"energy unavailable: CPU time per {singular}",
           ylabel=f"CPU ms per {singular}")
    return [note_handle("no energy readings here (no GPU counter or power, no readable RAPL): "
                        "this process's CPU time, all threads")]


def _draw_cost(ax: Axes, ok: pd.DataFrame, pos: pd.Series, look: Look, unit: str, price: float,
               gpus: int, price_per_kwh_usd: float) -> list:
    """Cost per million samples at `price` per GPU-hour; electricity dashed."""
    ax.set_ylabel(f"USD per million {unit}")
    if price <= 0:
        ax.set_title("cost per million: enter a price per GPU-hour")
        return []
    rate = _floats(ok, "throughput")
    with np.errstate(divide="ignore", invalid="ignore"):
        cost = price * gpus / (rate * 3600.0) * 1e6
    _draw_lines(ax, ok, pos, cost, look)
    if (look.modes[ok.index] == "GPU").any():
        per = f" x {gpus} GPUs" if gpus != 1 else ""
        ax.set_title(f"cost per million {unit} at ${price:g} per GPU-hour{per}")
    else:  # a CPU run is no GPU's cost: the price is read as this machine's
        per = f" x {gpus} machines" if gpus != 1 else ""
        ax.set_title(f"cost per million {unit} at ${price:g} per machine-hour{per}\n(CPU "
                     "fallback: the price of this CPU machine, no GPU)", fontsize="medium")
    entries = []
    energy = _floats(ok, "j_per_sample")
    if price_per_kwh_usd > 0 and np.isfinite(energy).any():
        _draw_lines(ax, ok, pos, energy * 1e6 / 3.6e6 * price_per_kwh_usd, look, style="--")
        entries.append((Line2D([], [], color="black", linestyle="--"),
                        f"dashed: electricity at ${price_per_kwh_usd:g} per kWh"))
    return entries


def cost_figure(df: pd.DataFrame, x: str, *, series: str | None = None,
                price_per_gpu_hour_usd: float = 0.0, gpus: int = 1,
                price_per_kwh_usd: float = 0.0, earlier_runs: str = "faded") -> Figure:
    """Three rows against `x`: throughput (the device and mode in its title), energy per
    sample by source (or CPU time per sample), cost per million samples at the prices."""
    fig, (middle, bottom), series = under_throughput(
        df, x, series, earlier_runs, (0.08, 0.41, 0.46, 0.2), (0.08, 0.08, 0.46, 0.2), sharex=True)
    look = Look(df, series, earlier_runs=earlier_runs)
    shown = look.visible(df)
    ok = shown[(shown["outcome"] == "ok") & np.isfinite(_floats(shown, "throughput"))] \
        if not df.empty else df
    if ok.empty:
        for ax in (middle, bottom):
            say(ax, NO_POINTS_TEXT)
        return fig
    pos = pd.Series(XAxis(df[x]).positions(df[x]), index=df.index)  # as the top row drew
    hollow = [noisy_handle()] if flags(ok, "noisy").any() else []
    unit = str(ok["sample_unit"].iloc[0]) if "sample_unit" in ok else "samples"
    wrapped_legend(middle, _draw_energy(middle, ok, pos, look, unit) + hollow)
    wrapped_legend(bottom, _draw_cost(bottom, ok, pos, look, unit, price_per_gpu_hour_usd, gpus,
                                      price_per_kwh_usd) + hollow)
    for ax in (middle, bottom):
        ax.set_ylim(bottom=0)
        ax.tick_params(labelbottom=True)
        ax.set_xlabel(x)
    return fig
