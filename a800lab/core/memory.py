"""Memory readings around a measured point, and out-of-memory handling.

    reset_peak("cuda"); run(); mem = read_memory("cuda")   # peak_allocated_bytes, ...
    except Exception as exc:
        if is_oom(exc): free_after_oom()                  # an OOM is a result, not a crash

On CUDA the peaks come from torch's caching allocator (allocated = live tensors, reserved =
what the allocator holds from the driver). On CPU torch keeps no allocator statistics, so peaks
are None and the process's resident set size is reported instead (`rss_bytes`).
"""

from __future__ import annotations

import gc
import os

import torch


def reset_peak(device: str) -> None:
    """Start a new peak-memory window on `device` (no-op on CPU)."""
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats(device)


def read_memory(device: str) -> dict:
    """Peak allocated/reserved bytes since reset_peak, device capacity and free bytes."""
    if device.startswith("cuda"):
        free_bytes, capacity_bytes = torch.cuda.mem_get_info(device)
        return {
            "peak_allocated_bytes": torch.cuda.max_memory_allocated(device),
            "peak_reserved_bytes": torch.cuda.max_memory_reserved(device),
            "capacity_bytes": capacity_bytes,
            "free_bytes": free_bytes,
        }
    meminfo = _proc_meminfo()
    return {
        "peak_allocated_bytes": None,
        "peak_reserved_bytes": None,
        "capacity_bytes": meminfo.get("MemTotal"),
        "free_bytes": meminfo.get("MemAvailable"),
        "rss_bytes": _rss_bytes(),
    }


# How allocation failures read: CUDA ("CUDA out of memory"), torch's CPU allocator ("can't
# allocate memory", "not enough memory"), cuBLAS/cuDNN ("CUBLAS_STATUS_ALLOC_FAILED").
_OOM_MESSAGES = ("out of memory", "can't allocate memory", "not enough memory", "alloc_failed")


def is_oom(exc: BaseException) -> bool:
    """True for CUDA out-of-memory errors and host allocation failures."""
    if isinstance(exc, (torch.OutOfMemoryError, MemoryError)):
        return True
    text = str(exc).lower()
    return isinstance(exc, RuntimeError) and any(m in text for m in _OOM_MESSAGES)


def free_after_oom() -> None:
    """Drop garbage and the allocator's cached blocks so the next point starts clean."""
    gc.collect()
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


def _proc_meminfo() -> dict[str, int]:
    out: dict[str, int] = {}
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                key, _, rest = line.partition(":")
                parts = rest.split()
                if parts and parts[0].isdigit():
                    out[key] = int(parts[0]) * 1024  # values are in kB
    except OSError:
        pass
    return out


def _rss_bytes() -> int | None:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None
