"""Figures of the training lab: memory breakdowns, loss curves, GradScaler dynamics, gradients
against fp16's range and the max-batch search; `df` is a frame of train points.

    fig = training_figure(df, "batch_size", series="precision")   # the TrainingExplorer plot
    breakdown_table(df, ["batch_size", "precision"])  # the memory breakdown in MiB, per point
    fig = max_batch_figure(find_max_batch_for(...))
"""

import numpy as np
import pandas as pd
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from ..core.environment import environment
from ..core.memory import RSS_RESOLUTION_BYTES
from ..core.units import byte_unit, format_bytes
from ..workloads.training.loss_scaling import (
    FP16_MAX,
    FP16_MIN_NORMAL,
    FP16_MIN_SUBNORMAL,
    fp16_fractions,
    log2_histogram,
)
from .look import FADED_ALPHA, PALETTE, LabFigure, Look, describe_devices, place_legend
from .parts import float_values as _floats
from .parts import name_devices, new_axes, ordered, say
from .sweep import NO_POINTS_TEXT, under_throughput

# component column, legend label, colour: bottom to top of each bar
COMPONENTS = (
    ("param_bytes", "parameters (and buffers)", "#4c72b0"),
    ("grad_bytes", "gradients", "#55a868"),
    ("optimizer_state_bytes", "optimizer state", "#c44e52"),
    ("weight_copy_bytes", "16-bit weight copies", "#8172b2"),
    ("activation_bytes", "activations (saved for backward)", "#ccb974"),
    ("recompute_bytes", "one block recomputed (checkpointing)", "#e5ae38"),
    ("data_bytes", "batches held", "#64b5cd"),
)
_METER_WORDS = {"counted": "step peak, counted at phase ends",
                "allocated": "step peak, CUDA allocated"}
_MAX_BARS = 24


def describe_device(device: str) -> str:
    """"CPU: <model> (CPU fallback, 1 torch thread)" or "<GPU name> (GPU)" for a title."""
    env = environment(device)
    return describe_devices(pd.DataFrame([{"device_name": env["device_name"], "mode": env["mode"],
                                           "torch_threads": torch.get_num_threads()}]))


def _point_label(row: pd.Series, x: str, series: str | None, several: bool) -> str:
    """A point's name: its x value, and its series when there are several."""
    text = str(row[x])
    if several and series and series in row and series != x:
        text += f"\n{row[series]}"
    return text


def _draw_breakdown(ax: Axes, df: pd.DataFrame, x: str, series: str | None) -> list:
    """Stacked components per point with the predicted and measured peaks; legend entries."""
    ax.set_title(f"memory breakdown vs {x}")
    if df.empty or "param_bytes" not in df:
        say(ax, NO_POINTS_TEXT)
        return []
    look = Look(df, series)
    ok = df[(df["outcome"] == "ok") & look.newest]  # each series' newest run
    # the throughput plot's order: numbers ascending, anything else as first measured
    rank = {value: i for i, value in enumerate(ordered(ok[x]))}
    ok = ok.iloc[np.argsort([rank.get(v, len(rank)) for v in ok[x]], kind="stable")].tail(_MAX_BARS)
    if ok.empty:
        say(ax, NO_POINTS_TEXT)
        return []
    several = look.key[ok.index].nunique() > 1
    pos = np.arange(len(ok))
    parts = {col: np.nan_to_num(_floats(ok, col)) for col, _, _ in COMPONENTS}
    peaks = {"predicted": _floats(ok, "predicted_peak_bytes"),
             "step": _floats(ok, "step_peak_bytes"),
             "own": np.where(np.isnan(_floats(ok, "peak_allocated_bytes")),
                             _floats(ok, "peak_rss_bytes"), _floats(ok, "peak_allocated_bytes"))}
    stack = sum(parts.values())
    # the axis fits the counted bars and the model; a CPU resident-set peak can be far above
    # them (allocator, one-time initialisation): drawn as a triangle on the top edge then
    top = 1.15 * np.nanmax([np.max(stack), *(np.nanmax(v) if np.isfinite(v).any() else 0
                                             for v in (peaks["predicted"], peaks["step"]))])
    if not top > 0:
        top = np.nanmax([*peaks["own"], 1.0])
    scale, unit = byte_unit(top)
    bottom = np.zeros(len(ok))
    entries = []
    for col, label, color in COMPONENTS:
        values = parts[col] / scale
        if values.any():
            ax.bar(pos, values, bottom=bottom, color=color, width=0.7, gid=f"part:{col}")
            entries.append((Patch(color=color), label))
        bottom += values
    meters = sorted(set(ok.get("memory_meter", pd.Series(dtype=str)).dropna()))
    cpu = bool((look.modes[ok.index] != "GPU").all())
    marks = (("predicted", dict(marker="_", markersize=26, mew=2.5, color="black"),
              "predicted peak (memory model, 2 probes)"),
             ("step", dict(marker="x", markersize=8, mew=2, color="black"),
              "; ".join(_METER_WORDS.get(m, m) for m in meters) or "step peak"),
             ("own", dict(marker="D", markersize=6, color="dimgray", mfc="white"),
              f"point's own peak (CPU: resident set, +-{RSS_RESOLUTION_BYTES // 2**20} MiB)"
              if cpu else "point's own peak, allocated"))
    for key, style, label in marks:
        values = peaks[key] / scale
        shown = np.isfinite(values) & (values <= top / scale)
        if shown.any():
            ax.plot(pos[shown], values[shown], linestyle="none", gid=f"peak:{key}", **style)
            entries.append((Line2D([], [], linestyle="none", **style), label))
            if key == "own" and cpu:  # 0.1 vs 1 MiB of RSS are one reading: never two
                ax.errorbar(pos[shown], values[shown], yerr=RSS_RESOLUTION_BYTES / scale,
                            fmt="none", ecolor="dimgray", alpha=0.5, capsize=3,
                            gid="resolution")
        above = np.isfinite(values) & (values > top / scale)
        if above.any():
            ax.plot(pos[above], np.full(above.sum(), top / scale), linestyle="none",
                    marker="^", color="dimgray", clip_on=False, gid=f"peak:{key}:above")
            entries.append((Line2D([], [], linestyle="none", marker="^", color="dimgray"),
                            f"{label.split(' (')[0]} above the axis (up to "
                            f"{format_bytes(np.max(values[above]) * scale)})"))
    labels = [_point_label(row, x, series, several) for _, row in ok.iterrows()]
    crowded = sum(len(s.split(chr(10))[-1]) + 2 for s in labels) > 50
    ax.set_xticks(pos, labels, rotation=30 if crowded else 0, ha="right" if crowded else "center",
                  fontsize="small")
    ax.set(xlabel=x, ylabel=f"bytes ({unit})", ylim=(0, top / scale))
    return entries


_LINE_STYLES = ("-", "--", ":", "-.")
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
_MAX_CURVES_NAMED = 12
COINCIDE_SHARE = 0.01  # curves closer than this share of the loss range at every step coincide


def _coinciding(curves: list[np.ndarray]) -> list[int | None]:
    """For each curve, the index of an earlier curve it lies on (within COINCIDE_SHARE of the
    loss range at every step), else None: the legend says so."""
    finite = [c[np.isfinite(c)] for c in curves]
    span = np.ptp(np.concatenate(finite)) if any(len(c) for c in finite) else 0.0
    tolerance = max(COINCIDE_SHARE * span, 1e-12)
    out: list[int | None] = []
    for i, curve in enumerate(curves):
        match = next((j for j, other in enumerate(curves[:i]) if len(other) == len(curve)
                      and np.all(np.abs(other - curve) <= tolerance)), None)
        out.append(match if match is None or out[match] is None else out[match])
    return out


def _draw_loss_curves(ax: Axes, df: pd.DataFrame, x: str | None, series: str | None) -> list:
    """A loss curve per point of each series' newest run (colour: the x value; line style: the
    series), earlier runs faded grey; returns the legend entries."""
    ax.set(title="training loss per optimizer step", xlabel="optimizer step", ylabel="loss")
    if df.empty or "loss_curve" not in df:
        say(ax, NO_POINTS_TEXT)
        return []
    look = Look(df, series)
    ok = df[df["outcome"] == "ok"]
    keys = list(dict.fromkeys(look.key[ok.index]))
    several = len(keys) > 1
    xs = list(dict.fromkeys(ok[x])) if x in ok else list(ok.index)
    entries, faded, drawn = [], False, []
    for index, row in ok.iterrows():
        curve = row["loss_curve"]
        if not isinstance(curve, (list, tuple)) or not curve:
            continue
        steps = np.arange(1, len(curve) + 1)
        values = np.array(curve, dtype=float)  # None: NaN
        if not look.newest[index]:
            faded = True
            ax.plot(steps, values, color="gray", alpha=FADED_ALPHA, lw=1.0, gid="loss:earlier")
            continue
        drawn.append((index, row, steps, values))
    same = _coinciding([values for *_, values in drawn])
    for n, (index, row, steps, values) in enumerate(drawn):
        color = PALETTE[xs.index(row[x] if x in ok else index) % len(PALETTE)]
        style = _LINE_STYLES[keys.index(look.key[index]) % len(_LINE_STYLES)]
        # a marker of its own on steps of its own: curves on top of each other stay findable
        every = max(1, len(steps) // 6, min(len(drawn), len(steps)))
        mark = dict(marker=_MARKERS[n % len(_MARKERS)], markevery=(n % every, every),
                    markersize=5, markerfacecolor="white")
        ax.plot(steps, values, color=color, linestyle=style, lw=1.6, gid="loss", **mark)
        label = f"{x}={_point_label(row, x, series, several)}".replace("\n", ", ") if x in ok \
            else str(look.key[index])
        if same[n] is not None:
            label += f" (lies on {entries[same[n]][1]})"
        entries.append((Line2D([], [], color=color, linestyle=style, **{
            k: v for k, v in mark.items() if k != "markevery"}), label))
    if len(entries) > _MAX_CURVES_NAMED:
        entries = entries[:_MAX_CURVES_NAMED - 1] + [
            (Line2D([], [], color="gray"), f"+{len(entries) - _MAX_CURVES_NAMED + 1} more")]
    if faded:
        entries.append((Line2D([], [], color="gray", alpha=FADED_ALPHA), "earlier runs"))
    values = [v for c in ok["loss_curve"] if isinstance(c, (list, tuple)) for v in c
              if v is not None and np.isfinite(v)]
    if values and min(values) > 0 and max(values) / min(values) > 10:
        ax.set_yscale("log")  # losses falling by decades read best on a log axis
    return entries


def training_figure(df: pd.DataFrame, x: str, *, series: str | None = None,
                    earlier_runs: str = "faded") -> Figure:
    """Three rows: throughput (the device and mode in its title), the memory breakdown, the
    loss curves."""
    fig, (memory_ax, loss_ax), series = under_throughput(  # room below memory: slanted labels
        df, x, series, earlier_runs, (0.08, 0.43, 0.46, 0.19), (0.08, 0.07, 0.46, 0.2))
    place_legend(memory_ax, _draw_breakdown(memory_ax, df, x, series))
    place_legend(loss_ax, _draw_loss_curves(loss_ax, df, x, series))
    return fig


def breakdown_table(df: pd.DataFrame, columns=("model", "batch_size", "precision")) -> \
        pd.DataFrame:
    """One row per ok point: the `columns`, each memory component in MiB, their sum, the
    step's peak, the memory model's prediction and the point's own window peak."""
    ok = df[df["outcome"] == "ok"] if "outcome" in df else df
    table = ok[[c for c in columns if c in ok]].copy()
    for column, label in (*((column, label.split(" (")[0]) for column, label, _ in COMPONENTS),
                          ("counted_bytes", "all counted"), ("step_peak_bytes", "step peak"),
                          ("predicted_peak_bytes", "predicted")):
        table[label] = _floats(ok, column) / 2**20
    own = _floats(ok, "peak_allocated_bytes")
    table["own window peak"] = np.where(np.isnan(own), _floats(ok, "peak_rss_bytes"), own) / 2**20
    return table.round(3).reset_index(drop=True)


def _one_axes(draw, df: pd.DataFrame, *args) -> Figure:
    fig, ax, _ = new_axes(None)
    place_legend(ax, draw(ax, df, *args))
    name_devices(fig, ax, df, own=True)
    return fig


def memory_breakdown_figure(df: pd.DataFrame, x: str, *, series: str | None = None) -> Figure:
    """Stacked memory components of each point (newest run per series), the memory model's
    predicted peak, the step's measured peak and the point's own window peak."""
    return _one_axes(_draw_breakdown, df, x, series)


def loss_curves_figure(df: pd.DataFrame, *, x: str | None = None,
                       series: str | None = None) -> Figure:
    """The loss of every point's training steps, one curve per point."""
    return _one_axes(_draw_loss_curves, df, x, series)


def scaler_figure(runs: dict[str, list[dict]], *, device: str) -> Figure:
    """Loss, loss scale (skipped steps marked) and the share of zero gradients per step, a
    line per run of compare_scaling()."""
    fig = LabFigure(figsize=(8.6, 7.2), layout="constrained")
    loss_ax, scale_ax, zero_ax = fig.subplots(3, 1, sharex=True)
    entries = []
    for (name, history), color in zip(runs.items(), PALETTE, strict=False):
        steps = [h["step"] for h in history]
        loss_ax.plot(steps, [h["loss"] for h in history], color=color, gid=f"loss:{name}")
        scales = [h["scale"] for h in history]
        if any(s is not None for s in scales):
            scale_ax.plot(steps, scales, color=color, drawstyle="steps-post", gid=f"scale:{name}")
            skipped = [(h["step"], h["scale"]) for h in history if h["skipped"]]
            if skipped:
                scale_ax.plot(*zip(*skipped, strict=True), "v", color="tab:red", gid="skipped")
        if any("zero_grad_fraction" in h for h in history):
            zero_ax.plot(steps, [100 * h.get("zero_grad_fraction", np.nan) for h in history],
                         color=color, gid=f"zero:{name}")
        skips = sum(h["skipped"] for h in history)
        entries.append((Line2D([], [], color=color), f"{name} ({skips} skipped)"))
    entries.append((Line2D([], [], color="tab:red", marker="v", linestyle="none"),
                    "skipped step (scale backed off)"))
    loss_ax.set(ylabel="loss", yscale="log", title="fp16 with and without a GradScaler")
    scale_ax.set(ylabel="loss scale", yscale="log")
    if not scale_ax.lines:
        say(scale_ax, "no run used a scaler")
    zero_ax.set(ylabel="gradient elements\nexactly zero (%)", xlabel="optimizer step",
                ylim=(0, None))
    place_legend(loss_ax, entries)
    fig.suptitle(describe_device(device), fontsize="medium")
    return fig


def gradient_histogram_figure(sample, *, scale: float = 2.0**16, device: str) -> Figure:
    """|gradient| values (parameters, activations; log2 bins) against fp16's zero, subnormal
    and overflow zones; dashed: the same times `scale`, as GradScaler would."""
    fig, ax, _ = new_axes(None, figsize=(8.6, 4.8))
    lo, hi = -40, 24
    ax.axvspan(lo, np.log2(FP16_MIN_SUBNORMAL / 2), color="tab:red", alpha=0.12, lw=0)
    ax.axvspan(np.log2(FP16_MIN_SUBNORMAL / 2), np.log2(FP16_MIN_NORMAL), color="tab:orange",
               alpha=0.12, lw=0)
    ax.axvspan(np.log2(FP16_MAX), hi, color="tab:purple", alpha=0.12, lw=0)
    entries = [(Patch(color="tab:red", alpha=0.25), "fp16 flushes to zero (≤ 2^-25)"),
               (Patch(color="tab:orange", alpha=0.25), "fp16 subnormal: fewer bits (< 2^-14)"),
               (Patch(color="tab:purple", alpha=0.25), "fp16 overflow: inf (≥ 65520)")]
    for kind, color in (("params", "C0"), ("activations", "C1")):
        values = sample.values(kind)
        if not values.numel():
            continue
        for factor, style in ((1.0, "-"), (scale, "--")):
            edges, counts = log2_histogram(values * factor, lo, hi)
            share = np.array(counts) / max(1, sum(counts))
            ax.stairs(100 * share, edges, color=color, linestyle=style, lw=1.6,
                      gid=f"hist:{kind}:{factor:g}")
            f = fp16_fractions(values, factor)
            what = "as computed" if factor == 1 else f"x {factor:g}"
            entries.append((Line2D([], [], color=color, linestyle=style),
                            f"{kind} {what}: {100 * f['underflow']:.1f}% to zero, "
                            f"{100 * f['subnormal']:.1f}% subnormal, "
                            f"{100 * f['overflow']:.2f}% inf"))
    ax.set(xlim=(lo, hi), xlabel="log2 |gradient|", ylabel="share of values (%)",
           title="gradient magnitudes vs the fp16 range")
    place_legend(ax, entries)
    fig.suptitle(describe_device(device), fontsize="medium")
    return fig


_TRIAL_STYLES = {"ok": ("o", "tab:green"), "over": ("s", "tab:orange"), "oom": ("X", "tab:red"),
                 "skipped": ("o", "lightgray")}


def max_batch_figure(result) -> Figure:
    """A max-batch search's trials (micro-batch vs peak), the limit, the budget and the
    memory model's line; the answer marked."""
    fig, ax, _ = new_axes(None)
    scale, unit = byte_unit(result.limit_bytes)
    batches = [t.batch_size for t in result.trials] or [1]
    entries = []
    if result.model is not None:
        xs = np.geomspace(1, max(batches) * 1.2, 200)
        ax.plot(xs, [result.model.predict(b) / scale for b in xs], color="gray", lw=1,
                gid="model")
        entries.append((Line2D([], [], color="gray"), "memory model (from the probes)"))
    for outcome, (marker, color) in _TRIAL_STYLES.items():
        trials = [t for t in result.trials if t.outcome == outcome]
        if not trials:
            continue
        ys = [next(v for v in (t.peak_bytes, t.predicted_bytes, result.limit_bytes)
                   if v is not None) / scale for t in trials]
        style = dict(marker=marker, color=color, linestyle="none",
                     mfc="white" if outcome == "skipped" else color)
        ax.plot([t.batch_size for t in trials], ys, gid=f"trial:{outcome}", **style)
        entries.append((Line2D([], [], **style), f"{outcome} ({len(trials)})"
                        + (": predicted, not run" if outcome == "skipped" else "")))
    ax.axhline(result.limit_bytes / scale, color="black", linestyle=":", gid="limit")
    ax.axhline(result.budget_bytes / scale, color="black", linestyle="--", gid="budget")
    entries += [(Line2D([], [], color="black", linestyle=":"), "limit"),
                (Line2D([], [], color="black", linestyle="--"),
                 f"budget (limit less {result.margin:.0%})")]
    if result.batch_size:
        ax.axvline(result.batch_size, color="tab:green", alpha=0.5, gid="answer")
        entries.append((Line2D([], [], color="tab:green", alpha=0.5),
                        f"answer: {result.batch_size}"))
    ax.set(xscale="log", xlabel="micro-batch", ylabel=f"peak ({unit})", ylim=(0, None),
           title=f"max-batch search: {result.runs} trials run, "
                 f"{len(result.trials) - result.runs} skipped")
    place_legend(ax, entries)
    fig.suptitle(describe_device(result.device or "cpu"), fontsize="medium")
    return fig
