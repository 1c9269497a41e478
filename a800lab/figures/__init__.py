"""The lab's figures: results frames (or a lab's own records) -> matplotlib Figures, one module
per lab, built without pyplot (safe off the kernel's main thread and headless).

    from a800lab.figures import throughput_figure
    throughput_figure(load_results("runs.jsonl"), "n", series="precision").savefig("n.png")

Every figure names its device(s) and mode in the title; draws one line per series and run (the
newest strongest, never averaged); noisy points hollow; failed points marked; legends outside.
Each name below is imported from its module when first used.
"""

from ..core.face import face

_NAMES = {
    ".comm": "collectives_figure ddp_figure",
    ".cost": "cost_figure",
    ".device": "telemetry_figure",
    ".diff": "lineup_figure",
    ".health": "stress_figure",
    ".parts": "NO_POINTS_TEXT",
    ".pipeline": "pipeline_figure",
    ".sweep": "memory_figure throughput_and_memory_figure throughput_figure",
    ".tiles": "error_figure heatmap_figure model_figure roofline_figure shape_sweep_figure",
    ".training": "gradient_histogram_figure loss_curves_figure max_batch_figure "
                "memory_breakdown_figure scaler_figure training_figure",
}
__getattr__, __dir__, __all__ = face(__name__, _NAMES)
