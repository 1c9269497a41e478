"""Measurement core: the harness and the machine's facts; imports no layer above it and no UI
module. Every name of the table below imports from here, its module loaded on first use:

    from a800lab.core import measure, run_sweep, load_results, HAS_CUDA, why_unavailable
"""

from .face import face

_NAMES = {
    ".backends": "HAS_CUDA HAS_NVML HAS_TRITON resolve_device why_unavailable",
    ".timing": "Timing measure",
    ".results": "Record append_record check_folder check_writable load_results read_records "
               "records_to_frame",
    ".sweep": "SweepResult grid run_sweep thread_count",
    ".cancel": "CancelToken Cancelled",
    ".noise": "default_cpu_threads usable_cores",
    ".precision": "check_supported matmul_precision parse_precision tf32_settings "
                 "unsupported_reason",
    ".specs": "arch_limits lookup match peak_for",
    ".device": "cpu_info discover_gpus system_info topology",
    ".doctor": "advice build_report format_reading format_report",
    ".environment": "fingerprint",
    ".envdiff": "diff_files format_diff",
    ".telemetry": "TelemetrySampler snapshot",
    ".nvml": "NotAvailable nvml_call",
    ".gpu_map": "cuda_ordinal nvml_index",
    ".sharing": "describe_sharing sharing_status",
    ".nccl_env": "NCCL_VARIABLES nccl_settings transport_advice transports_from_log",
    ".cuda_compat": "cuda_runtime_problem",
}
__getattr__, __dir__, __all__ = face(__name__, _NAMES)
