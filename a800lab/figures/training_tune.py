"""The figure of a training-config tuning run: every candidate's samples/s against its peak
memory (colour: precision; square: checkpointing; hollow: eliminated early), the frontier
joined, the winner starred and those within its noise ringed.

    fig = frontier_figure(tune_train(...).entry)     # a stored or fresh entry
"""

from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from ..core.units import byte_unit
from .look import PALETTE, place_legend
from .parts import say


def frontier_figure(entry: dict) -> Figure:
    """samples/s vs peak memory of a tune_train entry (see the module docstring)."""
    fig = Figure(figsize=(8.6, 4.8), layout="constrained")
    ax = fig.add_subplot()
    candidates = entry.get("candidates", [])
    if not candidates:
        say(ax, "no candidate measured")
        return fig
    scale, unit = byte_unit(max(c["peak_bytes"] for c in candidates))
    full_budget = max(c["budget_s"] for c in candidates)
    precisions = list(dict.fromkeys(c["config"]["precision"] for c in candidates))
    color = {p: PALETTE[i % len(PALETTE)] for i, p in enumerate(precisions)}
    best, near = entry.get("best"), entry.get("within_noise_configs", [])
    for c in candidates:
        cfg = c["config"]
        marker = "s" if cfg.get("checkpointing") else "o"
        final = c["budget_s"] >= full_budget
        ax.plot(c["peak_bytes"] / scale, c["samples_per_s"], marker, color=color[cfg["precision"]],
                mfc=color[cfg["precision"]] if final else "white", markersize=7,
                linestyle="none", gid="candidate")
        if cfg in near:
            ax.plot(c["peak_bytes"] / scale, c["samples_per_s"], "o", mfc="none", color="black",
                    markersize=13, gid="within-noise")
    frontier = entry.get("frontier", [])
    ax.plot([c["peak_bytes"] / scale for c in frontier],
            [c["samples_per_s"] for c in frontier], "-", color="gray", lw=1, gid="frontier")
    winner = next((c for c in candidates if c["config"] == best), None)
    if winner is not None:
        ax.plot(winner["peak_bytes"] / scale, winner["samples_per_s"], "*", color="gold",
                markeredgecolor="black", markersize=18, gid="winner")
    entries = [(Line2D([], [], marker="o", color=color[p], linestyle="none"), p)
               for p in precisions]
    entries += [(Line2D([], [], marker="s", color="gray", linestyle="none"), "checkpointing on"),
                (Line2D([], [], marker="o", color="gray", mfc="white", linestyle="none"),
                 "timed with less than the full budget"),
                (Line2D([], [], color="gray"), "frontier"),
                (Line2D([], [], marker="*", color="gold", markeredgecolor="black",
                        linestyle="none", markersize=12), "winner")]
    if near:
        entries.append((Line2D([], [], marker="o", mfc="none", color="black",
                               linestyle="none", markersize=10),
                        f"within the winner's noise ({len(near)})"))
    title = (f"tuning for an effective batch of {entry.get('target_batch', '?')}: "
             f"{len(candidates)} configs measured")
    if entry.get("frontier_note"):  # the text says which rate, from which round
        title += "\nthe winner is off the frontier: a faster-looking point ran in an earlier round"
    ax.set(xlabel=f"peak memory ({unit}, verified step)", ylabel="samples/s", title=title,
           xlim=(0, None), ylim=(0, None))
    place_legend(ax, entries)
    noisy = ("; timed on a contended CPU: the ranking may not hold (not stored)"
             if entry.get("contended") else "")
    fig.suptitle(f"{entry.get('device_name', 'device not recorded')} "
                 f"({entry.get('mode', 'mode not recorded')}){noisy}", fontsize="medium")
    return fig
