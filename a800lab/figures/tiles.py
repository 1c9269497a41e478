"""Figures of the tile lab (chapters 02-03): the tile heatmap, a shape sweep beside the tile and
wave quantisation model, error against float64, and the roofline.

    fig = heatmap_figure(df, "block_m", "block_n")      # TFLOP/s per tile shape, failures named
    fig = shape_sweep_figure(df, "n", tile=(128, 128, 32), sm_count=108, card="A800")
    fig = model_figure("n", range(1024, 2049, 64), tile=(256, 128, 32), sm_count=108,
                       card="A800")                     # the model alone, no measurement
    fig = roofline_figure(df, peak_tflops=312, mem_bw_gbs=2039)
"""

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Rectangle

from ..workloads.tiles.config import overhang
from ..workloads.tiles.facts import refusal_kind
from ..workloads.tiles.quantisation import quantise
from .look import NOISY_MARKER, LabFigure, Look, describe_devices, noisy_handle
from .parts import (
    NO_POINTS_TEXT,
    caption_under,
    flags,
    floats,
    fmt,
    name_devices,
    new_axes,
    ordered,
    require_columns,
    say,
    series_look,
    wrapped_legend,
)
from .sweep import throughput_figure

SHAPE_AXES = ("m", "n", "k", "size")
_MODEL_COLUMNS = ("tile_efficiency", "wave_efficiency", "predicted_efficiency", "waves", "tiles")


def _shape(row: pd.Series, x: str, value: float) -> tuple[int, int, int]:
    """(m, n, k) of a point with `x` set to `value` ("size" sets all three)."""
    return tuple(int(value) if x in (d, "size") else int(row[d]) for d in ("m", "n", "k"))


def model_frame(df: pd.DataFrame, x: str, tile: tuple[int, int, int], sm_count: int,
                blocks_per_sm: int = 1) -> pd.DataFrame:
    """One row per distinct x of `df`: the model's tile, wave and predicted efficiency."""
    if x not in SHAPE_AXES:
        raise ValueError(f"the quantisation model needs a shape axis ({', '.join(SHAPE_AXES)}), "
                         f"not {x!r}")
    rows = []
    for value, points in df.groupby(x, sort=True):
        m, n, k = _shape(points.iloc[0], x, value)
        q = quantise(m, n, k, *tile, sm_count=sm_count, blocks_per_sm=blocks_per_sm)
        rows.append({x: value, **{column: getattr(q, column) for column in _MODEL_COLUMNS}})
    return pd.DataFrame(rows)


def shape_sweep_figure(df: pd.DataFrame, x: str, *, tile: tuple[int, int, int] | None,
                       sm_count: int | None, card: str, series: str | None = None,
                       earlier_runs: str = "faded", blocks_per_sm: int = 1) -> Figure:
    """Measured throughput vs a shape axis (m, n, k or size) above the quantisation model of the
    same shapes (`tile` on `sm_count` SMs x `blocks_per_sm` resident blocks): tile and wave
    efficiency and their product, on an axis of its own (relative, memory ignored)."""
    fig = LabFigure(figsize=(8.6, 6.6), layout="constrained")
    top, bottom = fig.subplots(2, 1, sharex=True, height_ratios=(3, 2))
    throughput_figure(df, x, series=series, ax=top, earlier_runs=earlier_runs)
    top.set(title=top.get_title().split("\n")[0], xlabel="")  # the devices: the figure's title
    fig.suptitle(describe_devices(df), fontsize="medium")
    bottom.set(xlabel=x, ylabel="model efficiency (%)")
    if df.empty or tile is None or sm_count is None:
        say(bottom, "no tile to model: cuBLAS picks its own" if tile is None and not df.empty
            else "no SM count to model" if sm_count is None and not df.empty else "no points yet")
        return fig
    _draw_model(bottom, model_frame(df, x, tile, sm_count, blocks_per_sm), x, tile, sm_count,
                card, blocks_per_sm)
    if top.get_xscale() == "log":
        bottom.set_xscale("log", base=2)
    return fig


def _draw_model(ax, model: pd.DataFrame, x: str, tile: tuple[int, int, int], sm_count: int,
                card: str, blocks_per_sm: int = 1) -> None:
    """The model's three curves on `ax`, the number of waves written where it changes."""
    xs = model[x].to_numpy(float)
    lines = [
        ax.plot(xs, 100 * model["tile_efficiency"], ":", color="tab:gray",
                label="useful share of tile work")[0],
        ax.plot(xs, 100 * model["wave_efficiency"], "--", color="tab:gray",
                label="share of wave slots filled")[0],
        ax.plot(xs, 100 * model["predicted_efficiency"], "-o", color="black", markersize=4,
                label=f"predicted (their product): {card}, {sm_count} SM{'s' * (sm_count != 1)}"
                      f"{f' x {blocks_per_sm} blocks' if blocks_per_sm > 1 else ''}, tile "
                      f"{tile[0]}x{tile[1]}x{tile[2]}")[0],
    ]
    lines[-1].set_gid("predicted")
    if sm_count > 1:  # waves on their own axis: labels at every step would collide
        waves_ax = ax.twinx()
        (waves,) = waves_ax.step(xs, model["waves"], where="mid", color="tab:blue", alpha=0.5,
                                 label="waves (right axis)")
        waves_ax.set_ylabel("waves", color="tab:blue")
        waves_ax.set_ylim(0, max(model["waves"]) * 1.15)
        lines.append(waves)
    ax.set(ylim=(0, 110), ylabel="model efficiency (%)")
    ax.legend(lines, [line.get_label() for line in lines], loc="upper center",
              bbox_to_anchor=(0.5, -0.2), ncols=2, fontsize="small", frameon=False)


def model_figure(x: str, values, *, m: int = 4096, n: int = 4096, k: int = 4096,
                 tile: tuple[int, int, int], sm_count: int, card: str,
                 blocks_per_sm: int = 1) -> Figure:
    """The quantisation model alone over `values` of the shape axis `x` (the other dimensions
    fixed), titled as a model, not a measurement."""
    shapes = pd.DataFrame({"m": m, "n": n, "k": k, x: list(values)})
    fig, ax, _ = new_axes(None, figsize=(8.6, 3.8))
    _draw_model(ax, model_frame(shapes, x, tile, sm_count, blocks_per_sm), x, tile, sm_count,
                card, blocks_per_sm)
    fixed = ", ".join(f"{d}={v}" for d, v in (("m", m), ("n", n), ("k", k)) if d != x)
    ax.set(title=f"tile and wave quantisation vs {x} at {fixed}", xlabel=x)
    blocks = f" x {blocks_per_sm} resident blocks" if blocks_per_sm > 1 else ""
    fig.suptitle(f"model for {card} ({sm_count} SMs{blocks}): arithmetic, not a measurement",
                 fontsize="medium")
    return fig


def error_figure(df: pd.DataFrame, x: str, *, series: str = "precision") -> Figure:
    """Relative error against float64 (log scale) vs ``x`` (e.g. k), one line per ``series``."""
    fig, ax, _ = new_axes(None, figsize=(7.4, 4.2))
    df = df[pd.to_numeric(df["rel_error"], errors="coerce").notna()]  # unsupported: no point
    for key, rows in df.groupby(series, sort=False):
        rows = rows.sort_values(x)
        ax.plot(rows[x], rows["rel_error"], "-o", label=str(key))
    ax.set_xscale("log", base=2)
    ax.set(yscale="log", xlabel=x, ylabel="relative error vs float64",
           title=f"rounding error vs {x}")
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1), fontsize="small", frameon=False)
    fig.suptitle(describe_devices(df), fontsize="medium")
    return fig


def _failure_note(cell: pd.DataFrame) -> str:
    """A cell without a good point: "refused" (turned down before it ran, with the compiler's
    kind of reason: "refused\nshared memory"), else its outcome (wrong / oom / error)."""
    last = cell.iloc[-1]
    if last["outcome"] == "ok":
        return "n/a"
    message = str(last.get("message", ""))
    if last["outcome"] == "error" and message.startswith("ValueError"):
        kind = refusal_kind(message)
        return f"refused\n{kind}" if kind else "refused"
    return str(last["outcome"])


def heatmap_figure(df: pd.DataFrame, x: str, y: str, *, value: str = "throughput",
                   ax: Axes | None = None) -> Figure:
    """``value`` over the grid ``x`` by ``y``: failed cells named in grey, noisy cells marked
    "~", tiles larger than the output hatched (never crowned while another fits), the best
    outlined; a cell measured in several runs shows its newest run."""
    fig, ax, own = new_axes(ax, figsize=(6.4, 4.8))
    ax.set_title(f"{value} over {x} x {y}")
    if not df.empty:
        require_columns(df, x, y, value, "outcome")
    if df.empty or floats(df, value)[df["outcome"] == "ok"].dropna().empty:
        say(ax, NO_POINTS_TEXT, "large")
        name_devices(fig, ax, df, own)
        return fig
    xs, ys = ordered(df[x]), ordered(df[y])
    grid = np.full((len(ys), len(xs)), np.nan)
    masked = np.zeros(grid.shape, bool)  # a tile past the matrix's edge: the same work
    notes, noisy_cells, rerun_cells = {}, set(), 0
    runs = Look(df, None).run
    tiled = {x, y} == {"block_m", "block_n"} and {"m", "n"} <= set(df)
    for (xv, yv), cell in df.groupby([x, y], sort=False):
        good = cell[cell["outcome"] == "ok"]
        vals = floats(good, value).dropna()
        i, j = ys.index(yv), xs.index(xv)
        masked[i, j] = tiled and bool(overhang(
            *(int(cell.iloc[-1][c]) for c in ("m", "n", "block_m", "block_n"))))
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
        v = grid[i, j]
        ax.text(j, i, mark + (f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}"), ha="center",
                va="center", fontsize="small", color="white" if dark else "black")
    for (i, j), text in notes.items():
        ax.text(j, i, text, ha="center", va="center", fontsize="small", color="gray",
                style="italic")
    notes_below = []
    for i, j in zip(*np.nonzero(masked), strict=True):
        ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, hatch="///",
                               edgecolor="white", linewidth=0, gid="masked"))
    if masked.any():
        first = df.iloc[-1]
        notes_below.append(f"hatched: tile larger than the {int(first['m'])}x{int(first['n'])} "
                           "output (edges masked, the same work): not crowned")
    fits = np.where(masked, np.nan, grid)  # never crowned while another fits
    only_masked = np.isnan(fits).all()
    best_i, best_j = np.unravel_index(np.nanargmax(grid if only_masked else fits), grid.shape)
    ax.add_patch(Rectangle((best_j - 0.5, best_i - 0.5), 1, 1, fill=False, edgecolor="red",
                           linewidth=2.5, gid="best"))
    notes_below.append(f"red outline: best ({x}={fmt(xs[best_j])}, {y}={fmt(ys[best_i])}"
                       + (", masked: every tile measured is larger than the output)"
                          if only_masked else ")"))
    if noisy_cells:
        notes_below.append(f"~: noisy timing ({len(noisy_cells)} cells), see the table")
    ax.set_xticks(range(len(xs)), [fmt(v) for v in xs])
    ax.set_yticks(range(len(ys)), [fmt(v) for v in ys])
    ax.set(xlabel=x, ylabel=y)
    caption_under(ax, "; ".join(notes_below), False)
    if rerun_cells:
        ax.set_title(f"{value} over {x} x {y} ({rerun_cells} cells measured in several runs: "
                     "newest shown)")
    label = value
    if value == "throughput" and "throughput_unit" in df.columns:
        units = df.loc[df["outcome"] == "ok", "throughput_unit"].unique()
        label = f"throughput ({', '.join(map(str, units))})"
    fig.colorbar(image, ax=ax, label=label)
    name_devices(fig, ax, df, own)
    return fig


def _positive(name: str, value) -> float | None:
    if value is None:
        return None
    if not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"{name} must be a positive number or None (unknown), got {value!r}; "
                         "see a800lab.core.specs.lookup(device_name) for datasheet values")
    return float(value)


def roofs_of(peak_tflops: float | None, mem_bw_gbs: float | None,
             measured_peak_tflops: float | None = None,
             measured_bw_gbs: float | None = None) -> list[tuple[str, float, float, str]]:
    """The roofs to draw, (name, TFLOP/s, GB/s, line style): the datasheet's solid, the
    measured one dashed (a missing measured value reuses the datasheet's); without a datasheet
    row (a CPU) the measured roof alone."""
    peak, bw = _positive("peak_tflops", peak_tflops), _positive("mem_bw_gbs", mem_bw_gbs)
    m_peak = _positive("measured_peak_tflops", measured_peak_tflops)
    m_bw = _positive("measured_bw_gbs", measured_bw_gbs)
    if peak is not None and bw is not None:
        out = [("datasheet", peak, bw, "-")]
        if m_peak is not None or m_bw is not None:
            out.append(("measured", m_peak or peak, m_bw or bw, "--"))
        return out
    if m_peak is not None and m_bw is not None:
        return [("measured", m_peak, m_bw, "--")]
    return []


def draw_roofs(ax: Axes, roofs: list[tuple[str, float, float, str]], intensities,
               labels: dict[str, str] | None = None) -> list[tuple[object, str]]:
    """Each roof (roofs_of) with its ridge (peak / bandwidth, FLOP/byte) marked, spanning the
    points' `intensities`; `labels` rename roofs in the legend. Returns the legend entries."""
    if not roofs:
        ax.set_title(f"{ax.get_title()} (peak unknown: no ceilings)")
        return []
    ridges = [1e3 * p / b for _, p, b, _ in roofs]  # TFLOP/s / (GB/s) = 1e3 FLOP/byte
    span = [*intensities, *ridges]
    lo, hi = min(span) / 8, max(span) * 8
    entries = []
    for (name, p, b, style), ridge in zip(roofs, ridges, strict=True):
        ax.plot([lo, ridge, hi], [b * lo / 1e3, p, p], style, color="black", gid=f"roof:{name}")
        entries.append((Line2D([], [], color="black", linestyle=style),
                        f"{(labels or {}).get(name, name)}: {p:.4g} TFLOP/s, {b:.4g} GB/s"))
        ax.plot([ridge], [p], "o", mfc="none", color="black", markersize=9, gid=f"ridge:{name}")
        ax.annotate(f"ridge {ridge:.0f} FLOP/B", (ridge, p), textcoords="offset points",
                    xytext=(6, 6 if name == "datasheet" else -14), fontsize="small")
    return entries


def roofline_figure(df: pd.DataFrame, *, peak_tflops: float | None, mem_bw_gbs: float | None,
                    measured_peak_tflops: float | None = None,
                    measured_bw_gbs: float | None = None, series: str | None = None,
                    ax: Axes | None = None, earlier_runs: str = "faded") -> Figure:
    """Achieved TFLOP/s vs arithmetic intensity (flop_count / bytes_moved) under the roofs."""
    fig, ax, own = new_axes(ax)
    roofs = roofs_of(peak_tflops, mem_bw_gbs, measured_peak_tflops, measured_bw_gbs)
    ax.set(xscale="log", yscale="log", xlabel="arithmetic intensity (FLOP/byte)",
           ylabel="achieved TFLOP/s", title="roofline")
    points = pd.DataFrame({"ai": [], "tflops": [], "key": []})
    entries: list[tuple[object, str]] = []
    if not df.empty:
        require_columns(df, "outcome", "flop_count", "bytes_moved")
        look = series_look(df, series, earlier_runs)
        shown = look.visible(df)
        ok = shown[shown["outcome"] == "ok"]
        flop = floats(ok, "flop_count")
        # TFLOP/s = flop / (ms * 1e-3 s) / 1e12 when the workload gave no tflops metric
        tflops = floats(ok, "tflops").fillna(flop / floats(ok, "median_ms") / 1e9)
        points = pd.DataFrame({"ai": flop / floats(ok, "bytes_moved"), "tflops": tflops,
                               "key": look.key[ok.index], "newest": look.newest[ok.index],
                               "noisy": flags(ok, "noisy")})
        points = points[np.isfinite(points["ai"]) & (points["ai"] > 0) & (points["tflops"] > 0)]
        for (key, newest, hollow), rows in points.groupby(["key", "newest", "noisy"],
                                                           sort=False):
            ax.plot(rows["ai"], rows["tflops"], "o", color=look.color(key),
                    alpha=look.alpha(bool(newest)), label=key, gid="data",
                    **(NOISY_MARKER if hollow else {}))
        entries = look.series_handles()
        if points["noisy"].any():
            entries.append(noisy_handle())
    entries += draw_roofs(ax, roofs, points["ai"])
    if points.empty:
        say(ax, NO_POINTS_TEXT, "large")
    wrapped_legend(ax, entries)
    name_devices(fig, ax, df, own)
    return fig
