"""The health lab's figure (chapter 09): a stress run's cards against their siblings' median and
their datasheet, flagged cards marked.

    fig = stress_figure(stress_report())
"""

import numpy as np
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from .look import LabFigure
from .parts import wrapped_legend


def stress_figure(report) -> Figure:
    """Each card's matmul rate and copy bandwidth as bars: the siblings' median dashed, the
    threshold below it dotted, the datasheet figure solid; flagged cards red."""
    from ..workloads.stress import METRICS

    cards = report.cards
    names = list(dict.fromkeys(c.name for c in cards))
    mode = "GPU" if any(c.device.startswith("cuda") for c in cards) else "CPU fallback"
    fig = LabFigure(figsize=(10.0, 3.8), layout="constrained")
    fig.suptitle(f"{' | '.join(names) or 'no cards'} ({mode}), {len(cards)} card(s)",
                 fontsize="medium")
    axes = fig.subplots(1, 2)
    flagged = {(f.device, f.metric) for f in report.flags}
    for ax, (metric, label) in zip(axes, METRICS.items(), strict=True):
        values = np.array([getattr(c, metric) for c in cards], dtype=float)  # None: NaN
        colors = ["tab:red" if (c.device, metric) in flagged else "tab:blue" for c in cards]
        ax.bar(range(len(cards)), np.nan_to_num(values), color=colors)
        ax.set_xticks(range(len(cards)), [c.device for c in cards], fontsize="small",
                      rotation=30 if len(cards) > 4 else 0)
        ax.set_title(label)
        for name in names:
            idx = [i for i, c in enumerate(cards) if c.name == name]
            mine = values[idx][np.isfinite(values[idx])]
            span = (min(idx) - 0.4, max(idx) + 0.4)
            if len(mine) >= 2:
                median = float(np.median(mine))
                ax.hlines(median, *span, colors="black", linestyles="--")
                ax.hlines((1 - report.threshold) * median, *span, colors="black",
                          linestyles=":")
            sheet = cards[idx[0]].datasheet(metric)
            if sheet:
                ax.hlines(sheet, *span, colors="dimgray", linestyles="-")
    entries = [(Patch(color="tab:blue"), "card"), (Patch(color="tab:red"), "flagged card"),
               (Line2D([], [], color="black", linestyle="--"), "median of the cards"),
               (Line2D([], [], color="black", linestyle=":"),
                f"{100 * report.threshold:.0f}% below it: flag line"),
               (Line2D([], [], color="dimgray"), "datasheet")]
    wrapped_legend(axes[-1], entries)
    return fig
