"""Building blocks of every lab figure, so that they draw runs, noise and failures the same way:
columns as numbers, where x values sit, failure markers, IQR bands, one Line2D per series and
run, and a figure's frame (axes, device title, captions, legends).
"""

import textwrap

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from .look import (
    FADED_ALPHA,
    NOISY_MARKER,
    LabFigure,
    Look,
    describe_devices,
    noisy_handle,
    place_legend,
    unique_entries,
)

NO_POINTS_TEXT = "no successful points yet"
# outcome -> (marker, colour) for failed points
FAILURE_STYLES = {"oom": ("x", "tab:red"), "wrong": ("D", "tab:orange"), "error": ("s", "black")}
OTHER_FAILURE = ("v", "tab:gray")
TICK_CHAR_PT = 6.0  # about the width of a tick-label character (10 pt sans), for crowding


def floats(df: pd.DataFrame, name: str) -> pd.Series:
    """A numeric column as floats; all NaN when the frame lacks it."""
    if name not in df.columns:
        return pd.Series(np.nan, index=df.index, dtype=float)
    return pd.to_numeric(df[name], errors="coerce").astype(float)


def float_values(df: pd.DataFrame, name: str) -> np.ndarray:
    return floats(df, name).to_numpy(float)


def flags(df: pd.DataFrame, name: str) -> pd.Series:
    """A boolean column (e.g. "noisy"); all False when the frame lacks it."""
    if name not in df.columns:
        return pd.Series(False, index=df.index)
    return df[name].fillna(False).astype(bool)


def fmt(value) -> str:
    if isinstance(value, (float, np.floating)) and float(value).is_integer():
        return str(int(value))
    return str(value)


def ordered(values: pd.Series) -> list:
    """Distinct values: numbers sorted, anything else in the order first seen."""
    values = values.dropna()
    if pd.api.types.is_numeric_dtype(values) and not pd.api.types.is_bool_dtype(values):
        return sorted(values.unique())
    return list(dict.fromkeys(values))


class XAxis:
    """Where x values sit: numbers at themselves, anything else at 0..n-1 in the order seen."""

    def __init__(self, values: pd.Series):
        values = values.dropna()
        numeric = pd.to_numeric(values, errors="coerce")
        self.values = numeric.to_numpy(float)
        self.categories = None
        if pd.api.types.is_bool_dtype(values) or numeric.isna().any():
            self.categories = {v: i for i, v in enumerate(dict.fromkeys(values.astype(str)))}

    def positions(self, values: pd.Series) -> np.ndarray:
        if self.categories is None:
            return pd.to_numeric(values, errors="coerce").to_numpy(float)
        return np.array([self.categories.get(str(v), np.nan) for v in values], dtype=float)

    def apply(self, ax: Axes, name: str) -> bool:
        """Label the x axis; returns whether its tick labels are slanted."""
        ax.set_xlabel(name)
        if self.categories is not None:
            ax.set_xlim(-0.5, len(self.categories) - 0.5)
            return set_xticks(ax, range(len(self.categories)), list(self.categories))
        distinct = np.unique(self.values[np.isfinite(self.values)])
        powers_of_two = distinct.size > 2 and all(
            v > 0 and v.is_integer() and int(v) & (int(v) - 1) == 0 for v in distinct)
        if powers_of_two:  # sizes swept as 256, 512, 1024 ... read best on a log2 axis
            ax.set_xscale("log", base=2)
            if distinct.size <= 12:
                return set_xticks(ax, distinct, [fmt(v) for v in distinct])
        return False


def set_xticks(ax: Axes, positions, labels: list[str]) -> bool:
    """Tick labels, slanted when flat ones would collide; returns whether they are slanted."""
    width_pt = ax.get_position().width * ax.figure.get_figwidth() * 72
    crowded = sum(len(label) + 2 for label in labels) * TICK_CHAR_PT > width_pt
    ax.set_xticks(positions, labels, rotation=30 if crowded else 0,
                  ha="right" if crowded else "center", rotation_mode="anchor")
    return crowded


def mark_failures(ax: Axes, df: pd.DataFrame, x: str, xa: XAxis, look: Look,
                   y: float | None = None) -> list[tuple[object, str]]:
    """One marker per failed point, on the x axis whatever the y scale (or at data height `y`);
    failures of earlier runs faded. Returns the legend entries."""
    entries = []
    failed = df[df["outcome"] != "ok"]
    for outcome, rows in failed.groupby("outcome", sort=True):
        marker, color = FAILURE_STYLES.get(outcome, OTHER_FAILURE)
        transform = ax.get_xaxis_transform() if y is None else ax.transData
        newest = look.newest[rows.index]
        for part, alpha in ((rows[newest], 1.0), (rows[~newest], FADED_ALPHA)):
            if part.empty:
                continue
            (line,) = ax.plot(xa.positions(part[x]), np.full(len(part), 0.0 if y is None else y),
                              linestyle="none", marker=marker, color=color, markersize=9,
                              mew=2, clip_on=False, zorder=5, transform=transform, alpha=alpha)
            line.set_gid(f"outcome:{outcome}")
        entries.append((Line2D([], [], linestyle="none", marker=marker, color=color, mew=2),
                        f"{outcome} ({len(rows)})"))
    return entries


def throughput_band(ok: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Throughput at the timing quartiles: time q75 gives the low edge, q25 the high edge;
    both at the throughput itself for a point with fewer than two samples."""
    thr = ok["throughput"].to_numpy(float)
    q25, q50, q75 = np.zeros(len(ok)), np.full(len(ok), np.nan), np.zeros(len(ok))
    samples = [np.asarray(s if isinstance(s, (list, tuple, np.ndarray)) else [], float)
               for s in (ok["time_ms"] if "time_ms" in ok.columns else [None] * len(ok))]
    by_length: dict[int, list[int]] = {}
    for i, s in enumerate(samples):
        if s.size >= 2 and np.isfinite(s).all():
            by_length.setdefault(s.size, []).append(i)
    for rows in by_length.values():  # one percentile call per sample count, not per point
        q25[rows], q50[rows], q75[rows] = np.percentile(np.stack([samples[i] for i in rows]),
                                                        [25, 50, 75], axis=1)
    median = floats(ok, "median_ms").to_numpy(float)
    median = np.where(np.isfinite(median), median, q50)
    spread = q25 > 0
    with np.errstate(divide="ignore", invalid="ignore"):
        low = np.where(spread, thr * median / q75, thr)
        high = np.where(spread, thr * median / q25, thr)
    return low, high


def groups(rows: pd.DataFrame, look: Look) -> dict[tuple[str, str], np.ndarray]:
    """(series key, run id) -> positions of its rows in `rows`, in the order first seen."""
    found: dict[tuple[str, str], list[int]] = {}
    for i, pair in enumerate(zip(look.key[rows.index], look.run[rows.index], strict=True)):
        found.setdefault(pair, []).append(i)
    return {pair: np.array(positions) for pair, positions in found.items()}


def per_position(pos: np.ndarray, values: dict[str, np.ndarray]
                  ) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """Distinct x positions (sorted), how many points sit at each, and each value's median
    there (a run measures each x once, so usually a plain reordering)."""
    upos, inverse, counts = np.unique(pos, return_inverse=True, return_counts=True)
    out = {}
    for name, v in values.items():
        if (counts == 1).all():
            out[name] = np.empty(len(upos))
            out[name][inverse] = v
        else:
            out[name] = np.array([np.median(v[inverse == g]) for g in range(len(upos))])
    return upos, counts, out


class Lines:
    """Lines of one style collected run by run and drawn as one Line2D per series and
    strength: runs are separated by a gap (NaN), so they never join, and a figure with many
    runs stays quick to build."""

    def __init__(self) -> None:
        self._parts: dict[tuple[str, bool], list[tuple[np.ndarray, np.ndarray, np.ndarray]]] = {}

    def add(self, key: str, newest: bool, x: np.ndarray, y: np.ndarray,
            hollow: np.ndarray | None = None) -> None:
        hollow = np.zeros(len(x), bool) if hollow is None else hollow
        self._parts.setdefault((key, newest), []).append((x, y, hollow))

    def draw(self, ax: Axes, look: Look, style: str, gid: str) -> bool:
        """Plot everything added; returns whether any hollow markers were drawn."""
        any_hollow = False
        for (key, newest), parts in self._parts.items():
            xs, ys, hs = [], [], []
            for x, y, hollow in parts:  # a NaN after each run: the line breaks there
                xs += [x, [np.nan]]
                ys += [y, [np.nan]]
                hs += [hollow, [True]]
            x, y, hollow = (np.concatenate(a)[:-1] for a in (xs, ys, hs))
            color, alpha, size = look.color(key), look.alpha(newest), 6 if newest else 4
            ax.plot(x, y, style, color=color, alpha=alpha, lw=1.8 if newest else 1.0,
                    markersize=size, markevery=np.flatnonzero(~hollow).tolist(), label=key,
                    gid=gid)
            shown = hollow & np.isfinite(y)
            if shown.any():
                any_hollow = True
                ax.plot(x[shown], y[shown], style[-1], linestyle="none", color=color,
                        alpha=alpha, markersize=size, gid="noisy", **NOISY_MARKER)
        return any_hollow


# ---- a figure's frame: axes, titles, captions, legends ---------------------------------------
LABEL_WIDTH = 36    # legend labels wrap here so a long device name stays inside the figure
CAPTION_WIDTH = 70  # a caption under the axes wraps before the figure's right edge


def new_axes(ax: Axes | None, figsize=(8.6, 4.6)) -> tuple[Figure, Axes, bool]:
    """(figure, axes, whether the figure is ours); ours have room for a legend on the right."""
    if ax is not None:
        return ax.figure, ax, False
    fig = LabFigure(figsize=figsize, layout="constrained")
    return fig, fig.add_subplot(), True


def name_devices(fig: Figure, ax: Axes, df: pd.DataFrame, own: bool) -> None:
    """Device(s) and mode as the figure's subtitle, or under the title of an Axes we were lent."""
    devices = describe_devices(df)
    if own:
        fig.suptitle(devices, fontsize="medium")
    else:
        ax.set_title(f"{ax.get_title()}\n{devices}")


def require_columns(df: pd.DataFrame, *columns: str | None) -> None:
    for name in columns:
        if name is not None and name not in df.columns:
            raise ValueError(f"column {name!r} is not in the results frame; available columns: "
                             f"{sorted(map(str, df.columns))}; pass one of those")


def say(ax: Axes, text: str, fontsize: str = "medium") -> None:
    """A message in the middle of empty axes ("no successful points yet")."""
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center",
            color="dimgray", fontsize=fontsize)


def caption_under(ax: Axes, text: str, slanted: bool) -> None:
    """A note under the axes, below the x label."""
    if text:
        wrapped = "\n".join(textwrap.fill(line, CAPTION_WIDTH) for line in text.split("\n"))
        ax.annotate(wrapped, xy=(0, 0), xycoords="axes fraction",
                    xytext=(0, -46 if slanted else -34), textcoords="offset points", va="top",
                    fontsize="small", color="dimgray")


def wrapped_entries(entries: list[tuple[object, str]]) -> list[tuple[object, str]]:
    return [(h, textwrap.fill(label, LABEL_WIDTH, subsequent_indent="  "))
            for h, label in unique_entries(entries)]


def wrapped_legend(ax: Axes, entries: list) -> None:
    place_legend(ax, wrapped_entries(entries))


def figure_legend(fig: Figure, entries: list[tuple[object, str]], anchor_x: float,
                  top: float = 0.93) -> None:
    """One legend for a figure of several axes, its corner at (`anchor_x`, `top`) (figure
    fraction)."""
    if entries:
        handles, labels = zip(*unique_entries(entries), strict=True)
        fig.legend(handles, labels, loc="upper left", bbox_to_anchor=(anchor_x, top),
                   fontsize="small", frameon=False)


def series_look(df: pd.DataFrame, series: str | None, earlier_runs: str) -> Look:
    """The Look of a frame by `series` (default "label" where the frame has one); a series
    the frame lacks is refused."""
    series = "label" if series is None and "label" in df.columns else series
    if not df.empty:
        require_columns(df, series)
    return Look(df, series, earlier_runs=earlier_runs)


def laid_out(df: pd.DataFrame, series: str | None, earlier_runs: str, figsize: tuple,
             *rects: tuple) -> tuple[Figure, list[Axes], Look]:
    """A figure laid out by hand (quick to re-plot) with axes at `rects` (figure fractions),
    its points' devices in its title, and their series_look."""
    fig = LabFigure(figsize=figsize)
    look = series_look(df, series, earlier_runs)
    fig.suptitle(look.devices, fontsize="medium")
    return fig, [fig.add_axes(rect) for rect in rects], look


def metric_lines(ax: Axes, df: pd.DataFrame, x: str, column: str, look: Look, *,
                 ylabel: str, scale: float = 1.0) -> list[tuple[object, str]]:
    """`column` / `scale` against `x`, one line per series and run of the ok points (markers
    only over categories); noisy points hollow, failures marked. Returns extra legend entries."""
    ax.set_ylabel(ylabel)
    if df.empty or column not in df:
        say(ax, NO_POINTS_TEXT)
        return []
    xa = XAxis(df[x])
    shown = look.visible(df)
    ok = shown[(shown["outcome"] == "ok") & floats(shown, column).notna()]
    values = floats(ok, column).to_numpy(float) / scale
    noisy = flags(ok, "noisy").to_numpy(float)
    positions = xa.positions(ok[x])
    lines = Lines()
    for (key, _run), idx in groups(ok, look).items():
        newest = bool(look.newest.loc[ok.index[idx[0]]])
        upos, _, agg = per_position(positions[idx], {"v": values[idx], "noisy": noisy[idx]})
        lines.add(key, newest, upos, agg["v"], agg["noisy"] > 0)
    hollow = lines.draw(ax, look, "o" if xa.categories is not None else "-o", "data")
    failures = mark_failures(ax, shown, x, xa, look)
    xa.apply(ax, x)
    if ok.empty:
        say(ax, NO_POINTS_TEXT)
    return ([noisy_handle()] if hollow else []) + failures


