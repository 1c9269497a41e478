"""How a results frame looks in every lab figure: which device, which series, which run, which
noise. A series' newest run is drawn strongest, its earlier runs faded (or hidden); points of
different runs are never averaged together.

    look = Look(df, series="precision", earlier_runs="faded")
    look.color(key), look.newest, look.series_handles()   # colours, newest rows, legend
    place_legend(ax, entries)                               # outside the axes, on the right
"""

import io

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

LEGEND_MAX_SERIES = 8          # series named in a legend; the rest are grey and summarised
EARLIER_RUNS = ("faded", "hidden")
FADED_ALPHA = 0.3              # earlier runs: visible for comparison, clearly not the newest
OTHER_COLOR = "0.6"            # series beyond the legend cap
PALETTE = ("C0", "C1", "C2", "C3", "C4", "C5", "C6", "C8", "C9")  # tab10 without its grey
NOISY_MARKER = dict(markerfacecolor="white", markeredgewidth=1.5)  # hollow: not a clean number
_MAX_DEVICES_NAMED = 3


class LabFigure(Figure):
    """A Figure (no pyplot) that a notebook shows as a picture without `%matplotlib inline`."""

    def _repr_png_(self) -> bytes:
        buf = io.BytesIO()
        self.savefig(buf, format="png", bbox_inches="tight")  # legends sit outside the axes
        return buf.getvalue()


def mode_of(df: pd.DataFrame) -> pd.Series:
    """Each row's mode, "GPU" or "CPU fallback" (guessed from the device name if unrecorded)."""
    recorded = df["mode"] if "mode" in df else pd.Series(None, index=df.index, dtype=object)
    known = recorded.notna() & (recorded.astype(str) != "")
    if known.all():
        return recorded
    names = df["device_name"].astype(str) if "device_name" in df else pd.Series("", df.index)
    guessed = pd.Series(np.where(names.str.startswith("CPU"), "CPU fallback", "GPU"), df.index)
    return recorded.where(known, guessed)


def describe_devices(df: pd.DataFrame, modes: pd.Series | None = None) -> str:
    """The device(s) and mode of a frame's points for a title: "NVIDIA A800-SXM4-80GB (GPU)",
    "CPU: <model> (CPU fallback, 1 torch thread)", several joined by " | "."""
    if df.empty or "device_name" not in df:
        return "device not recorded"
    modes = mode_of(df) if modes is None else modes
    threads = df["torch_threads"] if "torch_threads" in df else [None] * len(df)
    seen: dict[tuple, set] = {}  # (device, mode) in the order first seen -> thread counts
    for name, mode, count in zip(df["device_name"].astype(str), modes, threads, strict=True):
        counts = seen.setdefault((name, mode), set())
        if not pd.isna(count):
            counts.add(int(count))
    parts = []
    for (name, mode), counts in seen.items():
        if mode != "GPU" and counts:
            mode += f", {', '.join(map(str, sorted(counts)))} torch thread{'s' * (counts != {1})}"
        parts.append(f"{name} ({mode})")
    if len(parts) > _MAX_DEVICES_NAMED:
        extra = len(parts) - _MAX_DEVICES_NAMED + 1
        parts = parts[:_MAX_DEVICES_NAMED - 1] + [f"+{extra} more devices"]
    return " | ".join(parts)


class Look:
    """Colour, strength and legend entries for the rows of one frame: at most LEGEND_MAX_SERIES
    series named (the most recently measured), the rest grey."""

    def __init__(self, df: pd.DataFrame, series: str | None, *, earlier_runs: str = "faded"):
        if earlier_runs not in EARLIER_RUNS:
            raise ValueError(f"earlier_runs={earlier_runs!r}: use one of {EARLIER_RUNS}")
        self.series, self.earlier_runs = series, earlier_runs
        self.modes = mode_of(df)
        self.devices = describe_devices(df, self.modes)
        self.key = pd.Series("", index=df.index) if series is None else df[series].astype(str)
        # run ids sort by start time; "" for records written before runs had ids
        self.run = df.get("run_id", pd.Series("", index=df.index)).fillna("").astype(str)
        runs: dict[str, set] = {}  # series in the order first seen -> its run ids
        for key, run in zip(self.key, self.run, strict=True):
            runs.setdefault(key, set()).add(run)
        latest = {key: max(ids) for key, ids in runs.items()}
        self.newest = self.run == self.key.map(latest)
        self.runs_per_series = {key: len(ids) for key, ids in runs.items()}
        order = list(latest)
        recent = set(sorted(order, key=latest.get, reverse=True)[:LEGEND_MAX_SERIES])  # the latest
        self.colors = dict(zip([k for k in order if k in recent], PALETTE, strict=False))
        self.others = [k for k in order if k not in self.colors]
        self.faded_drawn = False    # set by the figure when it draws an earlier run

    def visible(self, df: pd.DataFrame) -> pd.DataFrame:
        """The rows to draw: all, or each series' newest run when earlier runs are hidden."""
        return df if self.earlier_runs == "faded" else df[self.newest[df.index]]

    def color(self, key: str) -> str:
        return self.colors.get(key, OTHER_COLOR)

    def alpha(self, newest: bool) -> float:
        if not newest:
            self.faded_drawn = True
        return 1.0 if newest else FADED_ALPHA

    def series_handles(self) -> list[tuple[object, str]]:
        """Legend entries: each named series (the devices for an unnamed one), the rest in one,
        and faded earlier runs if any were drawn."""
        entries = []
        for key, color in self.colors.items():
            label = key or self.devices
            runs = int(self.runs_per_series.get(key, 1))
            if runs > 1:
                label += f" (newest of {runs} runs)" if self.earlier_runs == "faded" else \
                    f" (newest run; {runs - 1} earlier hidden)"
            entries.append((Line2D([], [], color=color, marker="o"), label))
        if self.others:
            names = ", ".join(self.others[:2]) + (", ..." if len(self.others) > 2 else "")
            entries.append((Line2D([], [], color=OTHER_COLOR, marker="o"),
                            f"+{len(self.others)} more series (grey): {names}"))
        if self.faded_drawn:
            entries.append((Line2D([], [], color="black", alpha=FADED_ALPHA, marker="o"),
                            "earlier runs (faded)"))
        return entries


def noisy_handle() -> tuple[object, str]:
    return (Line2D([], [], color="black", marker="o", linestyle="none", **NOISY_MARKER),
            "noisy point (hollow): see the table")


def band_handle(categorical: bool) -> tuple[object, str]:
    if categorical:
        return (Line2D([], [], color="black", marker="|", linestyle="none", markersize=12),
                "bars: IQR of the time samples")
    return Patch(color="black", alpha=0.2, linewidth=0), "shaded: IQR of the time samples"


def note_handle(text: str) -> tuple[object, str]:
    return Line2D([], [], linestyle="none"), text


def place_legend(ax: Axes, entries: list[tuple[object, str]]) -> None:
    """A legend outside the axes, to the right, so it never covers data."""
    if entries:
        handles, labels = zip(*entries, strict=True)
        ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.02, 1.0),
                  borderaxespad=0.0, fontsize="small")


def unique_entries(entries: list[tuple[object, str]]) -> list[tuple[object, str]]:
    """Entries with repeated labels dropped (first kept)."""
    first: dict[str, object] = {}
    for handle, label in entries:
        first.setdefault(label, handle)
    return [(handle, label) for label, handle in first.items()]
