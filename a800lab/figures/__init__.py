"""The lab's figures: results frames (or a lab's own records) -> matplotlib Figures, one module
per lab, all built without pyplot (safe off the kernel's main thread and headless).

    from a800lab.figures import throughput_figure, heatmap_figure
    fig = throughput_figure(df, "n", series="precision")   # df: a800lab.load_results(...)
    fig.savefig("matmul.png")

    sweep.py      throughput_figure, memory_figure, throughput_and_memory_figure (any sweep)
    tiles.py      heatmap_figure, shape_sweep_figure, model_figure, error_figure,
                  roofline_figure (chapters 02-03)
    training.py   training_figure, memory_breakdown_figure, loss_curves_figure, scaler_figure,
                  gradient_histogram_figure, max_batch_figure (chapters 04-06)
    pipeline.py   pipeline_figure, timeline_figure (chapter 07)
    comm.py       collectives_figure, ddp_figure (chapter 08)
    diff.py       lineup_figure; health.py stress_figure (chapter 09)
    cost.py       cost_figure (chapter 10)
    device.py     telemetry_figure (chapter 01)
    look.py, parts.py   what every figure shares: series, runs, noise, failures, legends

The report's own figures are in a800lab.report.figures. What every figure says: its device(s)
and mode in the title; one line per series and run (the newest strongest, never averaged);
noisy points hollow; failed points marked on the x axis; legends outside the axes.
"""

from .comm import collectives_figure, ddp_figure
from .cost import cost_figure
from .device import telemetry_figure
from .diff import lineup_figure
from .health import stress_figure
from .parts import NO_POINTS_TEXT
from .pipeline import pipeline_figure, timeline_figure
from .sweep import memory_figure, throughput_and_memory_figure, throughput_figure
from .tiles import (
    error_figure,
    heatmap_figure,
    model_figure,
    roofline_figure,
    shape_sweep_figure,
)
from .training import (
    gradient_histogram_figure,
    loss_curves_figure,
    max_batch_figure,
    memory_breakdown_figure,
    scaler_figure,
    training_figure,
)

__all__ = [
    "NO_POINTS_TEXT", "collectives_figure", "cost_figure", "ddp_figure", "error_figure",
    "gradient_histogram_figure", "heatmap_figure", "lineup_figure", "loss_curves_figure",
    "max_batch_figure", "memory_breakdown_figure", "memory_figure", "model_figure",
    "pipeline_figure", "roofline_figure", "scaler_figure", "shape_sweep_figure",
    "stress_figure", "telemetry_figure", "throughput_and_memory_figure", "throughput_figure",
    "timeline_figure", "training_figure",
]
