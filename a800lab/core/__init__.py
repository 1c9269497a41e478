"""Measurement core: the harness and the machine's facts. Imports nothing of the layers above
(workloads, figures, report, widgets, cli) and no UI module (tests/test_layers.py checks).

    from a800lab.core import measure, run_sweep, load_results, HAS_CUDA, why_unavailable

Every name below is importable from here (each module is imported when a name of it is first
used; `environment()` is also its module's name: `from a800lab.core.environment import
environment`):

    backends.py     HAS_CUDA, HAS_NVML, HAS_TRITON (detected once), why_unavailable,
                    resolve_device
    timing.py       measure (warm-up, CUDA events or perf_counter, raw samples) -> Timing
    results.py      Record, append_record, read_records, load_results, records_to_frame,
                    check_writable, check_folder (refused before anything is measured)
    sweep.py        grid, run_sweep -> SweepResult, thread_count
    cancel.py       CancelToken, Cancelled
    noise.py        default_cpu_threads, usable_cores (the CPU's share of the lab)
    precision.py    parse_precision, check_supported, matmul_precision, tf32_settings,
                    unsupported_reason
    specs.py        lookup, match, peak_for, arch_limits: the datasheet table
    device.py       discover_gpus, cpu_info, system_info, topology
    doctor.py       build_report, advice, format_report, format_reading (`python -m a800lab
                    doctor`)
    environment.py  fingerprint (and environment())
    envdiff.py      diff_files, format_diff (`python -m a800lab diff`)
    telemetry.py    snapshot, TelemetrySampler
    nvml.py         nvml_call, NotAvailable; gpu_map.py nvml_index, cuda_ordinal
    sharing.py      sharing_status, describe_sharing (MPS, MIG)
    nccl_env.py     NCCL_VARIABLES, nccl_settings, transport_advice, transports_from_log
    cuda_compat.py  cuda_runtime_problem

Also here, by module only: window, memory, operands, warmup (a measured point's window), search
(the search every tuner shares), store (the lab's cache files), units, face (these faces).
"""

from .face import face

__getattr__, __dir__, __all__ = face(__name__, {
    "backends": "HAS_CUDA HAS_NVML HAS_TRITON resolve_device why_unavailable",
    "timing": "Timing measure",
    "results": "Record append_record check_folder check_writable load_results read_records "
               "records_to_frame",
    "sweep": "SweepResult grid run_sweep thread_count",
    "cancel": "CancelToken Cancelled",
    "noise": "default_cpu_threads usable_cores",
    "precision": "check_supported matmul_precision parse_precision tf32_settings "
                 "unsupported_reason",
    "specs": "arch_limits lookup match peak_for",
    "device": "cpu_info discover_gpus system_info topology",
    "doctor": "advice build_report format_reading format_report",
    "environment": "fingerprint",
    "envdiff": "diff_files format_diff",
    "telemetry": "TelemetrySampler snapshot",
    "nvml": "NotAvailable nvml_call",
    "gpu_map": "cuda_ordinal nvml_index",
    "sharing": "describe_sharing sharing_status",
    "nccl_env": "NCCL_VARIABLES nccl_settings transport_advice transports_from_log",
    "cuda_compat": "cuda_runtime_problem",
})
