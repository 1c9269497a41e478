"""Figures of the tile lab: a shape sweep beside the tile and wave quantisation model.

    from a800lab.tile_plots import shape_sweep_figure
    fig = shape_sweep_figure(df, "n", tile=(128, 128, 32), sm_count=108, card="A800")
    fig = model_figure("n", range(1024, 2049, 64), m=27648, k=4096, tile=(256, 128, 32),
                       sm_count=108, card="A800")      # the model alone, no measurement

Top: measured throughput against the swept dimension (one line per series and run, as in
a800lab.plots.throughput_figure). Bottom, sharing the x axis: what the quantisation model
(a800lab.core.quantisation) says of the same shapes with that tile on that many SMs: the useful
share of the tile work, the share of wave slots filled, and their product (the predicted
relative throughput), with the number of waves written where it changes. The model is relative
and ignores memory bandwidth and caches: it explains steps and saw-teeth (N=1537 vs 1536), not
the absolute TFLOP/s, so it gets its own axis rather than being scaled onto the measurements.
"""

from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure

from .core.quantisation import quantise
from .plot_look import describe_devices
from .plots import throughput_figure

SHAPE_AXES = ("m", "n", "k", "size")


def _shape(row: pd.Series, x: str, value: float) -> tuple[int, int, int]:
    """(m, n, k) of a point with `x` set to `value` ("size" sets all three)."""
    if x == "size":
        return int(value), int(value), int(value)
    dims = {d: int(row[d]) for d in ("m", "n", "k")}
    dims[x] = int(value)
    return dims["m"], dims["n"], dims["k"]


def model_frame(df: pd.DataFrame, x: str, tile: tuple[int, int, int], sm_count: int) -> \
        pd.DataFrame:
    """One row per distinct x of `df`: the model's tile, wave and predicted efficiency."""
    if x not in SHAPE_AXES:
        raise ValueError(f"the quantisation model needs a shape axis ({', '.join(SHAPE_AXES)}), "
                         f"not {x!r}")
    rows = []
    for value, points in df.groupby(x, sort=True):
        m, n, k = _shape(points.iloc[0], x, value)
        q = quantise(m, n, k, *tile, sm_count=sm_count)
        rows.append({x: value, "tile_efficiency": q.tile_efficiency,
                     "wave_efficiency": q.wave_efficiency,
                     "predicted_efficiency": q.predicted_efficiency, "waves": q.waves,
                     "tiles": q.tiles})
    return pd.DataFrame(rows)


def shape_sweep_figure(df: pd.DataFrame, x: str, *, tile: tuple[int, int, int] | None,
                       sm_count: int | None, card: str, series: str | None = None,
                       earlier_runs: str = "faded") -> Figure:
    """Measured throughput vs a shape axis over the model's efficiency for `tile` on
    `sm_count` SMs (`card` names them in the model's legend); see the module docstring.
    Without a tile (cuBLAS picks its own) or an SM count, the bottom axes says so."""
    fig = Figure(figsize=(8.6, 6.6), layout="constrained")
    top, bottom = fig.subplots(2, 1, sharex=True, height_ratios=(3, 2))
    throughput_figure(df, x, series=series, ax=top, earlier_runs=earlier_runs)
    top.set_title(top.get_title().split("\n")[0])  # the devices go in the figure's title
    fig.suptitle(describe_devices(df), fontsize="medium")
    top.set_xlabel("")
    bottom.set_xlabel(x)
    bottom.set_ylabel("model efficiency (%)")
    if df.empty or tile is None or sm_count is None:
        why = ("no tile to model: cuBLAS picks its own" if tile is None and not df.empty
               else "no SM count to model" if sm_count is None and not df.empty
               else "no points yet")
        bottom.text(0.5, 0.5, why, transform=bottom.transAxes, ha="center", va="center",
                    color="dimgray")
        return fig
    _draw_model(bottom, model_frame(df, x, tile, sm_count), x, tile, sm_count, card)
    if top.get_xscale() == "log":
        bottom.set_xscale("log", base=2)
    return fig


def _draw_model(ax, model: pd.DataFrame, x: str, tile: tuple[int, int, int], sm_count: int,
                card: str) -> None:
    """The model's three curves on `ax`, the number of waves written where it changes."""
    xs = model[x].to_numpy(float)
    lines = [
        ax.plot(xs, 100 * model["tile_efficiency"], ":", color="tab:gray",
                label="useful share of tile work")[0],
        ax.plot(xs, 100 * model["wave_efficiency"], "--", color="tab:gray",
                label="share of wave slots filled")[0],
        ax.plot(xs, 100 * model["predicted_efficiency"], "-o", color="black", markersize=4,
                label=f"predicted (their product): {card}, {sm_count} SM{'s' * (sm_count != 1)}"
                      f", tile {tile[0]}x{tile[1]}x{tile[2]}")[0],
    ]
    lines[-1].set_gid("predicted")
    if sm_count > 1:  # waves on their own axis: labels at every step would collide
        waves_ax = ax.twinx()
        (waves,) = waves_ax.step(xs, model["waves"], where="mid", color="tab:blue", alpha=0.5,
                                 label="waves (right axis)")
        waves_ax.set_ylabel("waves", color="tab:blue")
        waves_ax.set_ylim(0, max(model["waves"]) * 1.15)
        lines.append(waves)
    ax.set_ylim(0, 110)
    ax.set_ylabel("model efficiency (%)")
    ax.legend(lines, [line.get_label() for line in lines], loc="upper center",
              bbox_to_anchor=(0.5, -0.2), ncols=2, fontsize="small", frameon=False)


def model_figure(x: str, values, *, m: int = 4096, n: int = 4096, k: int = 4096,
                 tile: tuple[int, int, int], sm_count: int, card: str) -> Figure:
    """The quantisation model alone over `values` of the shape axis `x` (the other dimensions
    fixed): what a card would lose to tile and wave quantisation. Titled as a model, not a
    measurement."""
    shapes = pd.DataFrame({"m": m, "n": n, "k": k, x: list(values)})
    fig = Figure(figsize=(8.6, 3.8), layout="constrained")
    ax = fig.add_subplot()
    _draw_model(ax, model_frame(shapes, x, tile, sm_count), x, tile, sm_count, card)
    fixed = ", ".join(f"{d}={v}" for d, v in (("m", m), ("n", n), ("k", k)) if d != x)
    ax.set_title(f"tile and wave quantisation vs {x} at {fixed}")
    ax.set_xlabel(x)
    fig.suptitle(f"model for {card} ({sm_count} SMs): arithmetic, not a measurement",
                 fontsize="medium")
    return fig


def error_figure(df: pd.DataFrame, x: str, *, series: str = "precision") -> Figure:
    """Relative error against float64 (log scale) vs ``x`` (e.g. the inner dimension k), one
    line per ``series``: how each precision's rounding grows with the problem."""
    fig = Figure(figsize=(7.4, 4.2), layout="constrained")
    ax = fig.add_subplot()
    df = df[pd.to_numeric(df["rel_error"], errors="coerce").notna()]  # unsupported: no point
    for key, rows in df.groupby(series, sort=False):
        rows = rows.sort_values(x)
        ax.plot(rows[x], rows["rel_error"], "-o", label=str(key))
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel(x)
    ax.set_ylabel("relative error vs float64")
    ax.set_title(f"rounding error vs {x}")
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1), fontsize="small", frameon=False)
    fig.suptitle(describe_devices(df), fontsize="medium")
    return fig
