"""Figures of a profiled training step: where each profile's step time goes (a stacked bar of
shares per category, the step's milliseconds on top) above one profile's step timeline (host
and device lanes, segments coloured by the same categories); a step's memory over time by
category (profile_step(..., memory=True)).

    fig = profile_figure([small, large])     # ProfileReports (profile_step); the last's timeline
    fig = memory_timeline_figure(report)     # stacked bytes per category, the peak marked
"""

from matplotlib.figure import Figure
from matplotlib.patches import Patch

from ..core.knobs import levers_set
from ..core.units import MIB, format_bytes
from ..workloads.training.spec import TrainSpec
from ..workloads.training.trace import CATEGORIES, HOST, IDLE, category_label
from .look import LabFigure, place_legend
from .parts import say

COLORS = {"matmul/conv": "#4c72b0", "other compute": "#dd8452", "copy H2D": "#55a868",
          "copy D2H": "#8c8c3c", "copy on device": "#64b5cd", "communication": "#8172b2",
          IDLE: "#dddddd", HOST: "#707070"}


def label_of(report) -> str:
    """A profile's name in the figure: micro-batch x accumulation, precision and any lever."""
    spec = report.spec
    text = f"b={spec['batch_size']}" + (f"x{spec['accum_steps']}" if spec["accum_steps"] > 1
                                        else "") + f" {spec['precision']}"
    return "\n".join([text, *levers_set(TrainSpec, spec),
                      *(["checkpointing"] if spec.get("checkpointing") else [])])


def profile_figure(reports: list) -> Figure:
    """Stacked shares per profile above the step timeline of the last."""
    fig = Figure(figsize=(10, 6.4), layout="constrained")
    bars, line = fig.subplots(2, 1, gridspec_kw={"height_ratios": [1, 1.1]})
    if not reports:
        say(bars, "no profile yet: press Profile")
        line.set_axis_off()
        return fig
    on_cuda = reports[-1].on_cuda
    positions = range(len(reports))
    bottoms = [0.0] * len(reports)
    for cat in CATEGORIES:
        shares = [100 * r.breakdown.categories_ms[cat] / r.breakdown.window_ms
                  if r.breakdown.window_ms else 0.0 for r in reports]
        if any(shares):
            bars.bar(positions, shares, bottom=bottoms, color=COLORS[cat], width=0.6,
                     gid=f"bar:{cat}")
            bottoms = [b + s for b, s in zip(bottoms, shares, strict=True)]
    for i, r in enumerate(reports):
        bars.annotate(f"{r.breakdown.window_ms:.3g} ms profiled\n{r.step_ms:.3g} ms unprofiled"
                      f"\n{r.bound}", (i, 100), ha="center",
                      va="bottom", fontsize="small", xytext=(0, 2), textcoords="offset points")
    bars.set_xticks(list(positions), [label_of(r) for r in reports], fontsize="small")
    bars.set(ylim=(0, 135), ylabel="share of the profiled step (%)",
             title="where a step's time goes" + ("" if on_cuda else
                                                 " (CPU mode: op self times on the host)"))
    shown = [c for c in CATEGORIES if any(r.breakdown.categories_ms[c] for r in reports)]
    place_legend(bars, [(Patch(color=COLORS[c]), category_label(c, on_cuda)) for c in shown])
    _timeline(line, reports[-1])
    devices = sorted({f"{r.device_name} ({r.mode}" + ("" if r.on_cuda else
                      f", {r.torch_threads} torch thread{'s' * (r.torch_threads != 1)}") + ")"
                      for r in reports})
    fig.suptitle(" | ".join(devices), fontsize="medium")
    return fig


def _timeline(ax, report) -> None:
    segments = report.breakdown.timeline
    if not segments:
        say(ax, "no segments in the profiled step")
        return
    lanes = list(dict.fromkeys(s.lane for s in segments))
    spans: dict[tuple[str, str], list[tuple[float, float]]] = {}  # (lane, category) -> ms
    for s in segments:
        spans.setdefault((s.lane, s.category), []).append((s.start_us / 1e3,
                                                           (s.end_us - s.start_us) / 1e3))
    for (lane, cat), bars in spans.items():
        ax.broken_barh(bars, (lanes.index(lane) - 0.4, 0.8), facecolors=COLORS.get(cat, "black"),
                       gid=f"timeline:{cat}")
    ax.set_yticks(range(len(lanes)), lanes, fontsize="small")
    ax.invert_yaxis()
    gaps = "gaps: the device idle" if report.on_cuda else "gaps: outside ops"
    ax.set(xlabel="ms from the step's start",
           title=f"one step's timeline ({label_of(report).replace(chr(10), ', ')}; the middle "
                 f"of {report.steps} profiled steps; {gaps})")
    seen = {cat for _, cat in spans}
    place_legend(ax, [(Patch(color=COLORS.get(c, "black")), category_label(c, report.on_cuda))
                      for c in (HOST, *CATEGORIES) if c in seen])


# torch's memory profiler's categories (memory_timeline.py), bottom of the stack first
MEMORY_COLORS = {"parameter": "darkgreen", "optimizer_state": "goldenrod", "input": "black",
                 "gradient": "mediumblue", "activation": "red", "autograd_detail": "royalblue",
                 "temporary": "mediumpurple", "unknown": "grey"}


def memory_timeline_figure(report) -> Figure:
    """One profiled step's bytes per category stacked over time, the peak marked and named."""
    fig = LabFigure(figsize=(10, 4.2), layout="constrained")
    ax = fig.subplots()
    timeline = report.memory
    if timeline is None:
        say(ax, "no memory timeline: profile with memory=True (--memory)")
        return fig
    by = timeline.bytes_by_category
    shown = [c for c in (*MEMORY_COLORS, *by) if c in by and any(by[c])]
    shown = list(dict.fromkeys(shown))
    ax.stackplot(timeline.times_ms, [[b / MIB for b in by[c]] for c in shown],
                 colors=[MEMORY_COLORS.get(c, "pink") for c in shown], step="post")
    ax.axvline(timeline.peak_ms, color="black", linestyle="--", linewidth=1)
    ax.annotate(f"peak {format_bytes(timeline.peak_bytes)}", (timeline.peak_ms,
                timeline.peak_bytes / MIB), xytext=(-4, 4), textcoords="offset points",
                ha="right", fontsize="small")
    ax.set(xlabel="ms from the step's start", ylabel="MiB live", ylim=(0, 1.15 *
           timeline.peak_bytes / MIB), title=f"one step's memory by category "
           f"({label_of(report).replace(chr(10), ', ')}; torch's memory profiler)")
    live = timeline.at_peak
    place_legend(ax, [(Patch(color=MEMORY_COLORS.get(c, "pink")), c.replace("_", " ") +
                       (f": {format_bytes(live[c])} at the peak" if c in live else ""))
                      for c in reversed(shown)])
    fig.suptitle(f"{report.device_name} ({report.mode})", fontsize="medium")
    return fig
