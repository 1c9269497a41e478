"""The one timing function of the lab: `measure(fn)` -> Timing with the raw samples (CUDA
events and an L2 flush per call on a GPU, the clock on a CPU; the clock is injectable).

    t = measure(lambda: torch.matmul(a, b), budget_s=0.5); t.median_ms, t.iqr_ms, t.noisy
"""

import functools
import math
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import torch

from .backends import resolve_device
from .cancel import CancelToken
from .noise import quartiles, spread_is_noisy
from .window import count_as_baseline, timed_section

L2_FLUSH_BYTES = 256 * 1024 * 1024  # larger than any current L2 (H100/H200: 50 MB, A100: 40 MB)
_flush_buffers: dict[str, Any] = {}
_flush_lock = threading.Lock()
# a spin covers twice the host's launch time plus 20 us, so jitter cannot reopen the gap
GUARD_FACTOR, GUARD_MARGIN_MS = 2.0, 0.02
_device_rates: dict[str, tuple[float, float]] = {}  # device -> (flush ms, sleep cycles per ms)


@dataclass(frozen=True)
class Timing:
    """Raw per-call samples in milliseconds and their summary statistics."""

    samples_ms: tuple[float, ...]
    warmup: int
    device: str

    @property
    def median_ms(self) -> float:
        return statistics.median(self.samples_ms)

    @property
    def min_ms(self) -> float:
        return min(self.samples_ms)

    @property
    def q25_ms(self) -> float:
        return quartiles(self.samples_ms)[0]

    @property
    def q75_ms(self) -> float:
        return quartiles(self.samples_ms)[2]

    @property
    def iqr_ms(self) -> float:
        return self.q75_ms - self.q25_ms

    def percentile_ms(self, q: float) -> float:
        """The q-th percentile (0-100) of the samples, interpolated linearly between the two
        nearest (numpy's default): percentile_ms(99) is the p99 latency."""
        ordered = sorted(self.samples_ms)
        at = (len(ordered) - 1) * q / 100
        low = math.floor(at)
        high = min(low + 1, len(ordered) - 1)
        return ordered[low] + (ordered[high] - ordered[low]) * (at - low)

    @property
    def noisy(self) -> bool:
        """True when IQR/median exceeds 10%: the median is not a stable figure."""
        return spread_is_noisy(self.iqr_ms, self.median_ms)

    @property
    def noise_warning(self) -> str:
        if not self.noisy:
            return ""
        return (f"noisy timing: IQR {self.iqr_ms:.4g} ms is "
                f"{100 * self.iqr_ms / self.median_ms:.0f}% of the median {self.median_ms:.4g} ms; "
                "close other work on the device or raise budget_s")

    def to_dict(self) -> dict:
        return {**asdict(self), "samples_ms": list(self.samples_ms), "median_ms": self.median_ms,
                "iqr_ms": self.iqr_ms, "min_ms": self.min_ms, "noisy": self.noisy}


def measure(
    fn: Callable[[], object],
    *,
    device: str = "auto",
    budget_s: float = 0.5,
    min_reps: int = 5,
    max_reps: int = 1000,
    min_warmup: int = 2,
    warmup_s: float = 0.1,
    flush_l2: bool = True,
    clock: Callable[[], float] = time.perf_counter,
    cancel: CancelToken | None = None,
) -> Timing:
    """Time `fn()` repeatedly and return every sample: a warm-up of >= `min_warmup` calls and
    `warmup_s` seconds sets the repetitions (within [min_reps, max_reps]) to fill `budget_s`."""
    if min_reps < 1 or max_reps < min_reps:
        raise ValueError(f"need 1 <= min_reps <= max_reps, got min_reps={min_reps}, "
                         f"max_reps={max_reps}")
    for name, value in (("budget_s", budget_s), ("warmup_s", warmup_s)):
        if not (isinstance(value, int | float) and math.isfinite(value) and value >= 0):
            raise ValueError(f"{name}={value!r} must be a finite number of seconds >= 0, "
                             "e.g. 0.5")
    if min_warmup < 0:
        raise ValueError(f"min_warmup={min_warmup!r} must be >= 0")
    device = resolve_device(device)
    on_cuda = device.startswith("cuda")
    sync = functools.partial(torch.cuda.synchronize, device) if on_cuda else lambda: None
    flush = l2_flush_buffer(device) if on_cuda and flush_l2 else None  # before the window

    with timed_section():
        warmup, t0, launch_s = 0, clock(), []
        while warmup < min_warmup or (clock() - t0 < warmup_s and warmup < max_reps):
            _check(cancel)
            called = clock()
            fn()
            launch_s.append(clock() - called)  # on CUDA: the host's side only (before sync)
            sync()  # without it CUDA launches queue up unboundedly ahead of the clock
            warmup += 1
        per_call_s = (clock() - t0) / warmup if warmup else 0.0
        reps = max_reps if per_call_s <= 0 else round(budget_s / per_call_s)
        reps = max(min_reps, min(max_reps, reps))
        if on_cuda:
            guard = launch_guard_cycles(device, statistics.median(launch_s)) if \
                flush is not None and launch_s else 0
            samples = _time_cuda(fn, device, reps, flush, cancel, guard_cycles=guard)
        else:
            samples = _time_cpu(fn, reps, clock, cancel)
    return Timing(samples_ms=tuple(samples), warmup=warmup, device=device)


def l2_flush_buffer(device: str):
    """The L2-flush buffer of a CUDA device (L2_FLUSH_BYTES), allocated once and kept; never
    part of a measured point's memory (made before the window opens, counted as baseline)."""
    index = torch.device(device).index
    key = f"cuda:{torch.cuda.current_device() if index is None else index}"
    with _flush_lock:
        if key not in _flush_buffers:
            _flush_buffers[key] = torch.empty(L2_FLUSH_BYTES, dtype=torch.uint8, device=key)
            count_as_baseline(L2_FLUSH_BYTES)
        return _flush_buffers[key]


def guard_cycles_for(launch_ms: float, flush_ms: float, cycles_per_ms: float) -> int:
    """GPU spin cycles to queue after a `flush_ms` flush so a call whose host side takes
    `launch_ms` is enqueued before the GPU reaches its start event (0: the flush covers it)."""
    need_ms = GUARD_FACTOR * launch_ms + GUARD_MARGIN_MS
    if need_ms <= flush_ms:
        return 0
    return int((need_ms - flush_ms) * cycles_per_ms)


def launch_guard_cycles(device: str, launch_s: float) -> int:
    """guard_cycles_for this device: its flush time and spin rate, measured once (events)."""
    if not hasattr(torch.cuda, "_sleep"):
        return 0
    if device not in _device_rates:
        flush = l2_flush_buffer(device)
        with torch.cuda.device(device):
            ms = []
            for work in (flush.zero_, lambda: torch.cuda._sleep(1_000_000)) * 3:
                start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
                start.record()
                work()
                end.record()
                end.synchronize()
                ms.append(start.elapsed_time(end))
        flush_ms, sleep_ms = min(ms[0::2]), min(ms[1::2])
        _device_rates[device] = (flush_ms, 1_000_000 / max(sleep_ms, 1e-6))
    flush_ms, cycles_per_ms = _device_rates[device]
    return guard_cycles_for(launch_s * 1e3, flush_ms, cycles_per_ms)


def _check(cancel: CancelToken | None) -> None:
    if cancel is not None:
        cancel.raise_if_cancelled()


def _time_cpu(fn, reps: int, clock, cancel) -> list[float]:
    samples = []
    for _ in range(reps):
        _check(cancel)
        start = clock()
        fn()
        samples.append((clock() - start) * 1e3)
    return samples


def _time_cuda(fn, device: str, reps: int, flush, cancel, cuda: Any = None,
               guard_cycles: int = 0) -> list[float]:
    """Per-call milliseconds from CUDA events, a spin of `guard_cycles` after each flush (see
    the module docstring); `cuda` is torch.cuda (tests pass a recorder)."""
    cuda = torch.cuda if cuda is None else cuda
    with cuda.device(device):  # events, flush and sync on the device being timed
        events = []
        for _ in range(reps):
            _check(cancel)
            if flush is not None:
                flush.zero_()  # evict L2 outside the timed span
            if guard_cycles:
                cuda._sleep(guard_cycles)  # the GPU waits here, not inside the timed span
            start = cuda.Event(enable_timing=True)
            end = cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            events.append((start, end))
        cuda.synchronize(device)
    return [start.elapsed_time(end) for start, end in events]
