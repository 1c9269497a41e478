"""Memory around a measured point: the workload's own peak (torch's allocator on a GPU, the
resident set on a CPU: approximate to a few MiB), capacity, and out-of-memory as a result.

    probe = probe_for("cuda:0"); base = probe.current_bytes(); probe.reset_peak()
    check_fits(3 * 2**30, "cpu", what=...)   # WontFit before allocating
    free_after_oom()    # after leaving the except block (the traceback pins tensors)
"""

import ctypes
import gc
from dataclasses import dataclass

import torch

from .units import GIB
from .warmup import warm_runtime

# How allocation failures read: CUDA ("CUDA out of memory"), torch's CPU allocator ("can't
# allocate memory", "not enough memory"), cuBLAS/cuDNN ("CUBLAS_STATUS_ALLOC_FAILED").
_OOM_MESSAGES = ("out of memory", "can't allocate memory", "not enough memory", "alloc_failed")
# what the CPU probe can tell apart: RSS counts every thread, allocator slack and one-time
# initialisation, so two CPU peaks closer than this are the same reading (figures draw it)
RSS_RESOLUTION_BYTES = 4 * 2**20


class WontFit(MemoryError):
    """A point that needs more memory than the device has free; raised before allocating."""


@dataclass(frozen=True)
class MemoryProbe:
    """Reads one device's memory: bytes in use now, and the peak since reset_peak()."""

    device: str

    @property
    def on_cuda(self) -> bool:
        return self.device.startswith("cuda")

    @property
    def kind(self) -> str:
        """What the bytes are: "allocated" (CUDA live tensors) or "rss" (CPU resident set)."""
        return "allocated" if self.on_cuda else "rss"

    def warm(self) -> None:
        """Run a800lab.core.warmup before a baseline is read, so no first point of a process
        counts torch's one-time costs (cuBLAS's lasting workspace, 32 MiB on Hopper and ~8 MiB
        otherwise; the optimizers' imports on a CPU) as its own."""
        warm_runtime(self.device)

    def current_bytes(self) -> int | None:
        if self.on_cuda:
            return torch.cuda.memory_allocated(self.device)
        _trim_heap()
        return read_kib_file("/proc/self/status").get("VmRSS")

    def reset_peak(self) -> bool:
        """Start a new peak window; False when this host cannot (the peak is then unknown)."""
        if self.on_cuda:
            torch.cuda.reset_peak_memory_stats(self.device)
            return True
        _trim_heap()
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")  # resets VmHWM to the current RSS
        except OSError:
            return False
        return True

    def peak_bytes(self) -> int | None:
        if self.on_cuda:
            return torch.cuda.max_memory_allocated(self.device)
        return read_kib_file("/proc/self/status").get("VmHWM")

    def peak_reserved_bytes(self) -> int | None:
        """CUDA only: the most the caching allocator held from the driver (cached blocks too)."""
        return torch.cuda.max_memory_reserved(self.device) if self.on_cuda else None


def probe_for(device: str) -> MemoryProbe:
    """The memory probe of `device` ("cpu" or "cuda[:N]")."""
    return MemoryProbe(device)


def read_memory(device: str) -> dict:
    """Capacity and free bytes of `device` (CPU: MemTotal and MemAvailable)."""
    capacity_bytes = (torch.cuda.mem_get_info(device)[1] if device.startswith("cuda")
                      else read_kib_file("/proc/meminfo").get("MemTotal"))
    return {"capacity_bytes": capacity_bytes, "free_bytes": available_bytes(device)}


def available_bytes(device: str) -> int | None:
    """Bytes a new allocation could get: CUDA free memory plus the allocator's unused cache;
    on CPU the kernel's MemAvailable. None when unknown."""
    if device.startswith("cuda"):
        free, _ = torch.cuda.mem_get_info(device)
        cached = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
        return free + cached
    return read_kib_file("/proc/meminfo").get("MemAvailable")


def check_fits(needed_bytes: int, device: str, *, what: str) -> None:
    """Raise WontFit (an out-of-memory result) when `needed_bytes` exceed what `device` has
    available, so an impossible point is recorded as "oom" without allocating anything."""
    available = available_bytes(device)
    if available is not None and needed_bytes > available:
        raise WontFit(f"out of memory (not attempted): {what} needs {needed_bytes / GIB:.2f} GiB, "
                      f"{device} has {available / GIB:.2f} GiB available; use a smaller size")


def is_oom(exc: BaseException) -> bool:
    """True for CUDA out-of-memory errors and host allocation failures."""
    if isinstance(exc, (torch.OutOfMemoryError, MemoryError)):
        return True
    text = str(exc).lower()
    return isinstance(exc, RuntimeError) and any(m in text for m in _OOM_MESSAGES)


def free_after_oom() -> None:
    """Drop garbage and the allocator's cached blocks so the next point starts clean: call it
    after the except block (inside it the traceback still holds the failed point's tensors)."""
    gc.collect()
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


def _trim_heap() -> None:
    """Hand memory the C allocator keeps after frees back to the kernel (glibc malloc_trim), so
    the resident set counts what is live; a no-op where glibc is not the allocator."""
    global _malloc_trim
    if _malloc_trim is None:
        try:
            _malloc_trim = ctypes.CDLL("libc.so.6").malloc_trim
        except (OSError, AttributeError):
            _malloc_trim = False
    if _malloc_trim:
        _malloc_trim(0)


_malloc_trim = None


def read_kib_file(path: str) -> dict[str, int]:
    """`Key: <n> kB` lines of a /proc file as bytes; {} when the file cannot be read."""
    out: dict[str, int] = {}
    try:
        with open(path) as f:
            for line in f:
                key, _, rest = line.partition(":")
                parts = rest.split()
                if parts and parts[0].isdigit():
                    out[key] = int(parts[0]) * 1024  # the kernel writes kB (KiB)
    except OSError:
        pass
    return out
