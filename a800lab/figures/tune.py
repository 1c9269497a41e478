"""The figure of a tuning run (tune train, tune serve --offline): every candidate's samples/s
against its cost, peak memory or a request batch's p99 (colour: precision; hollow: timed with
less than the full budget; square: checkpointing on; x: over the p99 target), the frontier
joined, the winner starred (a serving winner where it was measured again), those within its
noise ringed, the p99 target dashed.

    fig = frontier_figure(tune_train(...))     # or tune_serve(...); a reused entry draws too
"""

from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from ..core.units import byte_unit
from .look import PALETTE, LabFigure, place_legend
from .parts import say


def frontier_figure(outcome) -> Figure:
    """samples/s against the outcome's cost (see the module docstring)."""
    fig = LabFigure(figsize=(8.6, 4.8), layout="constrained")
    ax = fig.add_subplot()
    entry, memory = outcome.entry, outcome.cost == "peak_bytes"
    candidates = entry.get("candidates") or outcome.candidates
    noisy = "; timed on a contended CPU: the ranking may not hold (not stored)" \
        if entry.get("contended") else ""
    fig.suptitle(f"{entry.get('device_name') or outcome.device_name or 'device not recorded'} "
                 f"({entry.get('mode') or outcome.mode or 'mode not recorded'}){noisy}",
                 fontsize="medium")
    if not candidates:
        say(ax, "no candidate measured")
        return fig
    scale, unit = byte_unit(max(c["peak_bytes"] for c in candidates)) if memory else (1, "ms")
    full_budget = max(c["budget_s"] or 0 for c in candidates)
    precisions = list(dict.fromkeys(c["config"]["precision"] for c in candidates))
    color = {p: PALETTE[i % len(PALETTE)] for i, p in enumerate(precisions)}
    near = entry.get("within_noise_configs", [])
    for c in candidates:
        cfg, x, y = c["config"], c[outcome.cost] / scale, c["samples_per_s"]
        if c.get("meets_target", True):
            filled = (c["budget_s"] or 0) >= full_budget
            ax.plot(x, y, "s" if cfg.get("checkpointing") else "o", color=color[cfg["precision"]],
                    mfc=color[cfg["precision"]] if filled else "white", markersize=7,
                    linestyle="none", gid="candidate")
        else:
            ax.plot(x, y, "x", color=color[cfg["precision"]], gid="over-target")
        if not memory:
            ax.annotate(f"{cfg['batch_size']}", (x, y), textcoords="offset points",
                        xytext=(4, 3), fontsize="x-small")
        if cfg in near:
            ax.plot(x, y, "o", mfc="none", color="black", markersize=13, gid="within-noise")
    frontier = outcome.frontier
    ax.plot([c[outcome.cost] / scale for c in frontier], [c["samples_per_s"] for c in frontier],
            "-", color="gray", lw=1, gid="frontier")
    winner = outcome.remeasured or next((c for c in candidates if c["config"] == outcome.winner),
                                        None)
    if winner:
        ax.plot(winner[outcome.cost] / scale, winner["samples_per_s"], "*", color="gold",
                markeredgecolor="black", markersize=18, gid="winner")
    entries = [(Line2D([], [], marker="o", color=color[p], linestyle="none"), p)
               for p in precisions]
    if memory:
        entries.append((Line2D([], [], marker="s", color="gray", linestyle="none"),
                        "checkpointing on"))
    entries += [(Line2D([], [], marker="o", color="gray", mfc="white", linestyle="none"),
                 "timed with less than the full budget")]
    if not memory:
        entries.append((Line2D([], [], marker="x", color="gray", linestyle="none"),
                        "p99 over the target"))
    entries.append((Line2D([], [], color="gray"), "frontier"))
    if not memory:
        ax.axvline(outcome.p99_ms, color="tab:red", linestyle="--", lw=1.2, gid="target")
        entries.append((Line2D([], [], color="tab:red", linestyle="--"),
                        f"target p99 {outcome.p99_ms:g} ms"))
    star = "winner" if memory else "winner, re-measured" if outcome.winner else \
        "best, re-measured: missed"
    entries.append((Line2D([], [], marker="*", color="gold", markeredgecolor="black",
                           linestyle="none", markersize=12), star))
    if near:
        entries.append((Line2D([], [], marker="o", mfc="none", color="black",
                               linestyle="none", markersize=10),
                        f"within the winner's noise ({len(near)})"))
    if memory:
        title = (f"tuning for an effective batch of {entry.get('target_batch', '?')}: "
                 f"{len(candidates)} configs measured")
        if entry.get("frontier_note"):  # the text says which rate, from which round
            title += ("\nthe winner is off the frontier: a faster-looking point ran in an "
                      "earlier round")
    else:
        title = f"tuning for p99 <= {outcome.p99_ms:g} ms: {len(candidates)} configs"
    ax.set(xlabel=f"peak memory ({unit}, verified step)" if memory else
           "p99 latency of a request batch (ms; labels: batch)", ylabel="samples/s",
           title=title, xlim=(0, None), ylim=(0, None))
    place_legend(ax, entries)
    return fig
