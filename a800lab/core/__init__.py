"""Measurement core: the harness and the machine's facts. Timing, the measured window, noise,
devices and telemetry, hardware specs, precision, memory, results (one resume rule), sweeps, the
search every tuner shares, units, and the lab's cache files. Imports nothing of the layers above
(workloads, figures, report, widgets, cli) and no UI module (tests/test_layers.py checks).

    from a800lab.core import measure, run_sweep, load_results
"""

from .backends import HAS_CUDA, HAS_NVML, HAS_TRITON, resolve_device, why_unavailable
from .cancel import Cancelled, CancelToken
from .results import Record, append_record, load_results, read_records, records_to_frame
from .sweep import SweepResult, grid, run_sweep
from .timing import Timing, measure

__all__ = [
    "HAS_CUDA", "HAS_NVML", "HAS_TRITON", "Cancelled", "CancelToken", "Record", "SweepResult",
    "Timing", "append_record", "grid", "load_results", "measure", "read_records",
    "records_to_frame", "resolve_device", "run_sweep", "why_unavailable",
]
