"""PipelineExplorer: vary a DataLoader's workers, pinned memory, copies, prefetch depth and
preprocessing cost; see samples/s, how idle the device is, and where each step's time goes.

    panel = PipelineExplorer()              # the device stage on the GPU, or on the CPU
    panel.run(wait=True, num_workers=[0, 1, 2, 4], cost="wait")
    panel.results[["num_workers", "throughput", "idle_fraction", "data_wait_ms"]]
"""

import functools
import html
from pathlib import Path

import ipywidgets as widgets

from ..core.backends import resolve_device
from ..core.knobs import knobs
from ..figures.pipeline import pipeline_figure
from ..workloads.pipeline import PipelineSpec, pipeline_point
from .explorer import DATA_DIR, Explorer
from .params import Choice, Range, spec_params

CPU_NOTE = ("CPU fallback: the device stage (the training step) runs on the CPU, beside the "
            "loader workers, on the same cores; pinned memory and non_blocking copies need a "
            "GPU and are fixed off. Use cost 'wait' to model reading from storage (workers "
            "overlap it even beyond the core count) and 'cpu' for decoding (bounded by cores).")


class PipelineExplorer(Explorer):
    """Each point (workloads.pipeline.pipeline_point) times training steps of a small MLP fed
    by a DataLoader. `budget_s`: timing budget per point (0.3 s on a CPU, 0.5 s on a GPU)."""

    def __init__(self, *, device: str = "auto", budget_s: float | None = None,
                 cpu_threads: int | None = None,
                 title: str = "Input pipeline: workers, pinned memory, copies and idle time",
                 recorded_dir: Path | str = DATA_DIR, out: str | None = None):
        device = resolve_device(device)
        on_cpu = device == "cpu"
        declared = knobs(PipelineSpec)
        params = {  # the fields' own checks; workers and preprocessing at the values worth trying
            "num_workers": Choice((0, 1, 2, 4, 8), 0, declared["num_workers"].check),
            **spec_params(PipelineSpec, device, ("pin_memory", "non_blocking", "prefetch_factor"),
                          fixed={"pin_memory": False, "non_blocking": False} if on_cpu else {}),
            "preprocess_ms": Range(0.0, 5.0, step=0.05, default=0.2,
                                   check_with=declared["preprocess_ms"].check),
            **spec_params(PipelineSpec, device, ("cost", "batch_size"),
                          initial={"cost": "wait", "batch_size": 64 if on_cpu else 256}),
        }
        workload = functools.partial(pipeline_point, budget_s=budget_s or (0.3 if on_cpu else 0.5))
        note = [widgets.HTML(f"<small>{html.escape(CPU_NOTE)}</small>")] if on_cpu else []
        super().__init__(workload, params, sweep="num_workers", name="pipeline",
                         device=device, cpu_threads=cpu_threads, title=title,
                         recorded_dir=recorded_dir, out=out, figure=pipeline_figure,
                         figure_title="samples/s and device idle fraction vs {x}, above the "
                                      "newest point's timeline",
                         table_columns=(("throughput", "idle_fraction", "data_wait_ms",
                                         "copy_ms", "compute_ms"), ("median_ms", "iqr_ms")),
                         extras={"before_status": note})
