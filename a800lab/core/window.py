"""The measured window of one sweep point: only the workload, never the harness. The first
timed section restarts it (memory peak, telemetry, CPU load), so a float64 check made before
timing stays outside; harness work on a CPU (a panel drawing) waits between points.

    with PointWindow("cuda:0", sampler=...) as window: raw = point_fn(**params)
    window.memory(), window.telemetry(), window.conditions()
"""

import contextlib
import contextvars
import threading
import time
from collections.abc import Iterator
from typing import Any

from .memory import MemoryProbe, probe_for, read_memory
from .noise import CpuLoadMeter, cpu_conditions

_current: contextvars.ContextVar["PointWindow | None"] = contextvars.ContextVar(
    "a800lab_point_window", default=None)


class _QuietGate:
    """Mutual exclusion between CPU point windows and harness work, harness first when waiting."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._count_lock = threading.Lock()
        self._harness_waiting = 0

    @contextlib.contextmanager
    def harness(self) -> Iterator[None]:
        with self._count_lock:
            self._harness_waiting += 1
        with self._lock:
            with self._count_lock:
                self._harness_waiting -= 1
            yield

    def acquire_for_point(self) -> None:
        while self._harness_waiting:  # let a waiting draw go first (it takes the lock next)
            time.sleep(0.001)
        self._lock.acquire()

    def release_for_point(self) -> None:
        self._lock.release()


_GATE = _QuietGate()


def harness_work() -> contextlib.AbstractContextManager[None]:
    """Run harness work (drawing, rendering) between CPU points, never inside one's window."""
    return _GATE.harness()


@contextlib.contextmanager
def timed_section() -> Iterator[None]:
    """Mark the timed part of this thread's sweep point (measure() does); a no-op outside one."""
    window = _current.get()
    if window is None:
        yield
        return
    window._open_section()
    try:
        yield
    finally:
        window._close_section()


@contextlib.contextmanager
def outside_window() -> Iterator[None]:
    """Harness measurements a point makes before its own timing (a reference bandwidth):
    measure() inside sees no window, so they open none of the point's timed sections."""
    token = _current.set(None)
    try:
        yield
    finally:
        _current.reset(token)


def count_as_baseline(nbytes: int) -> None:
    """Harness memory allocated inside a point but kept for good (the L2-flush buffer, made on
    first use): add it to the point's baseline so it is not the workload's."""
    window = _current.get()
    if window is not None and window._baseline is not None and window.probe.on_cuda:
        window._baseline += nbytes


class PointWindow:
    """Context manager around one point; see the module docstring."""

    def __init__(self, device: str, *, sampler: Any = None,
                 probe: MemoryProbe | None = None) -> None:
        self.device = device
        self.probe = probe or probe_for(device)
        self._sampler = sampler      # a TelemetrySampler (start/stop/summary) or None
        self._meter = CpuLoadMeter()
        self._baseline: int | None = None
        self._peak: int | None = None
        self._peak_reserved: int | None = None
        self._windowed = True        # False when the host cannot reset a peak (CPU without /proc)
        self._whole_point = True     # until the first timed section opens
        self._depth = 0              # timed sections may nest (measure() inside measure())
        self._loads: list[dict] = []
        self._token: contextvars.Token | None = None

    def __enter__(self) -> "PointWindow":
        self._quiet = not self.probe.on_cuda
        if self._quiet:
            _GATE.acquire_for_point()
        try:
            self.probe.warm()  # cuBLAS's lasting workspace is the process's, not this point's
            self._baseline = self.probe.current_bytes()
            self._start()
        except BaseException:
            self._release()
            raise
        self._token = _current.set(self)
        return self

    def __exit__(self, *exc_info: Any) -> None:
        try:
            _current.reset(self._token)
            if self._whole_point:
                self._finish_section()
            if self._sampler is not None:
                self._sampler.stop()
        finally:
            self._release()

    def _release(self) -> None:
        if self._quiet:
            self._quiet = False
            _GATE.release_for_point()

    # ---- sections ----------------------------------------------------------------------------
    def _start(self) -> None:
        self._windowed = self.probe.reset_peak()
        self._meter.start()
        if self._sampler is not None:
            self._sampler.start()

    def _open_section(self) -> None:
        self._depth += 1
        if self._depth > 1:
            return
        if self._whole_point:  # the point prepared itself: restart the window here
            self._whole_point = False
            if self._sampler is not None:
                self._sampler.stop()
            self._start()
        else:  # a later section: keep the peaks so far, reset for this one
            self._windowed = self.probe.reset_peak() and self._windowed
            self._meter.start()

    def _close_section(self) -> None:
        self._depth -= 1
        if self._depth == 0:
            self._finish_section()

    def _finish_section(self) -> None:
        peak = self.probe.peak_bytes()
        if peak is not None:
            self._peak = peak if self._peak is None else max(self._peak, peak)
        reserved = self.probe.peak_reserved_bytes()
        if reserved is not None:
            self._peak_reserved = max(self._peak_reserved or 0, reserved)
        self._loads.append(self._meter.stop())

    # ---- what the window saw -----------------------------------------------------------------
    def memory(self) -> dict:
        """The point's own peak (named by what it counts), the baseline, capacity and free."""
        own = None
        if self._windowed and self._peak is not None and self._baseline is not None:
            own = max(0, self._peak - self._baseline)
        out = {f"peak_{self.probe.kind}_bytes": own,
               f"baseline_{self.probe.kind}_bytes": self._baseline}
        if self._peak_reserved is not None:
            out["peak_reserved_bytes"] = self._peak_reserved
        return {**out, **read_memory(self.device)}

    def telemetry(self) -> dict | None:
        """The sampler's summary over the window, or None without a sampler."""
        return None if self._sampler is None else self._sampler.summary()

    def conditions(self) -> dict:
        """torch threads, usable cores and, when long enough to read, the busiest CPU load seen
        in a timed section (cores busy in this process and in others)."""
        readable = [load for load in self._loads if load["others_busy_cores"] is not None]
        busiest = max(readable, key=lambda load: load["others_busy_cores"], default=None)
        return cpu_conditions(busiest)
