"""Measurement core: timing, devices and telemetry, hardware specs, precision, memory, results
and sweeps. Never imports ipywidgets, IPython or matplotlib (tests/test_layers.py checks).

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
