"""The diff lab's figure (chapter 09): two machines' throughputs of the same configs, as B / A.

    fig = lineup_figure(diff_files("a.jsonl", "b.jsonl"))
"""

import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from ..core.envdiff import EnvDiff, format_params
from .look import note_handle
from .parts import new_axes, say, wrapped_legend

_MAX_LINEUP_ROWS = 30


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
    fig, ax, _ = new_axes(None, figsize=(9.0, 1.6 + 0.32 * max(len(rows), 3)))
    fig.suptitle(f"{_side_label(diff, 'B')} vs {_side_label(diff, 'A')}", fontsize="medium")
    ax.set_title("throughput B / A, same configs (newest ok record of each side)")
    if not rows:
        ax.set_axis_off()
        say(ax, "no config measured ok on both sides: run the same sweep on both machines")
        return fig
    ratios = np.array([r.ratio for r in rows])
    labels = [f"{r.workload} {format_params(r.params)} ({r.unit})" for r in rows]
    same = diff.same_environment  # then every bar is run-to-run variation
    # a difference the two sides' timings cannot tell from none is neither faster nor slower
    colors = ["tab:gray" if same or r.within_spread else "tab:green" if r.ratio >= 1 else "tab:red"
              for r in rows]
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
    ax.set(xlabel="B / A", xlim=(0, max(1.1, ratios.max() * 1.15)))
    entries = [(Patch(color=c, alpha=0.8), text) for c, text in (
        ("tab:green", "B faster"), ("tab:red", "B slower"),
        ("tab:gray", "same environment: run-to-run variation, no difference" if same else
         "inside the timing spread (middle halves of both sides allow 1x)")) if c in colors]
    if any(noisy):
        entries.append((Patch(facecolor="white", edgecolor="black", hatch="//"),
                        "hatched: a side's timing was noisy"))
    entries.append(note_handle(f"geometric mean {diff.geomean_ratio:.2f}x over "
                               f"{len(diff.lineup)}"))
    if len(diff.lineup) > len(rows):
        entries.append(note_handle(f"first {len(rows)} of {len(diff.lineup)} configs drawn"))
    wrapped_legend(ax, entries)
    return fig
