"""Copy and compute overlapping on two CUDA streams, measured (NVIDIA GPUs only).

    stream_overlap(copy_mb=256, matmul_size=4096, pinned=True, device="cuda")
    # copy_ms, compute_ms, serial_ms, overlapped_ms, overlap_share
"""

import functools

import torch

from ..core.backends import HAS_CUDA, why_unavailable
from ..core.timing import measure


def why_no_streams(device: str = "auto") -> str:
    """Why the demonstration cannot run on `device` ("" when it can)."""
    if device == "cpu" or not HAS_CUDA:
        reason = why_unavailable("cuda") or "the device is the CPU"
        return (f"CUDA streams need an NVIDIA GPU ({reason}); on a CPU copies and compute "
                "share the same cores, there is no copy engine to overlap with")
    return ""


def stream_overlap(copy_mb: int = 256, matmul_size: int = 4096, pinned: bool = True, *,
                   device: str = "cuda", budget_s: float = 0.3) -> dict:
    """The four timings and the overlap share."""
    reason = why_no_streams(device)
    if reason:
        raise ValueError(reason)
    host = torch.empty(copy_mb * 2**20, dtype=torch.uint8, pin_memory=pinned)
    target = torch.empty_like(host, device=device)
    a, b = (torch.randn(matmul_size, matmul_size, device=device) for _ in range(2))
    out = torch.empty_like(a)
    side = torch.cuda.Stream(device)

    copy = functools.partial(target.copy_, host, non_blocking=True)
    compute = functools.partial(torch.mm, a, b, out=out)

    def serial() -> None:
        copy()
        compute()

    def overlapped() -> None:
        current = torch.cuda.current_stream(device)
        side.wait_stream(current)  # the side stream starts after what came before
        with torch.cuda.stream(side):
            copy()
        compute()
        current.wait_stream(side)  # the end event waits for the copy too

    times = {name: measure(fn, device=device, budget_s=budget_s, flush_l2=False).median_ms
             for name, fn in (("copy", copy), ("compute", compute), ("serial", serial),
                              ("overlapped", overlapped))}
    hidden = times["serial"] - times["overlapped"]
    return {**{f"{name}_ms": ms for name, ms in times.items()},
            "overlap_share": max(0.0, hidden) / min(times["copy"], times["compute"]),
            "copy_gbs": copy_mb * 2**20 / (times["copy"] * 1e-3) / 1e9, "pinned": pinned,
            "device_name": torch.cuda.get_device_name(device)}
