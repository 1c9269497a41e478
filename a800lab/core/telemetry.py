"""GPU telemetry through the NVML wrapper: snapshots, and a sampler that reads on a fixed
schedule beside a workload (a first and a last sample always; no thread without NVML).

    with TelemetrySampler(cuda_device="cuda:0", interval_s=0.1) as sampler: run()
    sampler.summary()    # {"available", "n_samples", "power_w": {mean, min, max}, ...}
"""

import threading
import time
from typing import Any

from .gpu_map import nvml_index
from .nvml import (
    NotAvailable,
    device_handle,
    milli_to_unit,
    nvml_call,
    nvml_const,
    or_none,
    power_reading,
    temperature_c,
    throttle_reasons,
)

# Fields summarised as mean/min/max by TelemetrySampler.summary().
SUMMARY_FIELDS = ("gpu_util_pct", "mem_used_bytes", "power_w", "sm_clock_mhz")


def snapshot(device_index: int = 0, nvml: Any = None, t_s: float | None = None) -> dict:
    """One reading of NVML GPU `device_index` (None where NVML gives nothing; power_source as in
    core.nvml.power_reading), stamped `t_s` (default time.time())."""
    h = device_handle(device_index, nvml)
    util = nvml_call("nvmlDeviceGetUtilizationRates", h, nvml=nvml)
    memory = nvml_call("nvmlDeviceGetMemoryInfo", h, nvml=nvml)
    reasons = throttle_reasons(h, nvml=nvml)
    power_w, power_source = power_reading(h, nvml=nvml)
    return {
        "t_s": time.time() if t_s is None else t_s,
        "gpu_util_pct": None if isinstance(util, NotAvailable) else util.gpu,
        "mem_util_pct": None if isinstance(util, NotAvailable) else util.memory,
        "mem_used_bytes": None if isinstance(memory, NotAvailable) else memory.used,
        "mem_total_bytes": None if isinstance(memory, NotAvailable) else memory.total,
        "power_w": or_none(power_w),
        "power_source": or_none(power_source),
        "power_limit_w": or_none(milli_to_unit(
            nvml_call("nvmlDeviceGetEnforcedPowerLimit", h, nvml=nvml))),
        "sm_clock_mhz": or_none(nvml_call("nvmlDeviceGetClockInfo", h,
                                          nvml_const("NVML_CLOCK_SM", nvml), nvml=nvml)),
        "mem_clock_mhz": or_none(nvml_call("nvmlDeviceGetClockInfo", h,
                                           nvml_const("NVML_CLOCK_MEM", nvml), nvml=nvml)),
        "temperature_c": or_none(temperature_c(h, nvml=nvml)),
        "throttle_reasons": None if isinstance(reasons, NotAvailable) else list(reasons),
    }


def _stats(values: list) -> dict:
    present = [v for v in values if v is not None]
    if not present:
        return {"mean": None, "min": None, "max": None}
    return {"mean": sum(present) / len(present), "min": min(present), "max": max(present)}


class TelemetrySampler:
    """Samples a GPU every `interval_s` seconds on a background thread: NVML's `device_index`
    (default 0), or the GPU behind torch's `cuda_device` (matched by UUID / PCI bus id; none: no
    samples, and the summary says why). A context manager; `samples`, `summary()`."""

    def __init__(self, device_index: int | None = None, interval_s: float = 0.1,
                 nvml: Any = None, *, cuda_device: Any = None,
                 cuda_properties: list | None = None) -> None:
        if not interval_s > 0:
            raise ValueError(f"interval_s={interval_s!r} must be a positive number of seconds, "
                             "e.g. 0.1")
        if device_index is not None and cuda_device is not None:
            raise ValueError("give device_index (an NVML index) or cuda_device (e.g. 'cuda:0'), "
                             "not both")
        self._unmapped = ""  # why cuda_device has no NVML GPU
        if cuda_device is not None:
            mapped = nvml_index(cuda_device, nvml=nvml, cuda_properties=cuda_properties)
            if isinstance(mapped, NotAvailable):
                self._unmapped = f"no NVML GPU to sample for {cuda_device!r}: {mapped.reason}"
                mapped = None
            device_index = mapped
        elif device_index is None:
            device_index = 0
        self.device_index = device_index  # NVML index; None when cuda_device did not map
        self.interval_s = interval_s
        self._nvml = nvml
        self._samples: list[dict] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._start_s: float | None = None
        self._duration_s = 0.0
        self._reason = ""

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self) -> "TelemetrySampler":
        """Take the first sample and start the background thread (no thread without NVML)."""
        if self._thread is not None:
            raise RuntimeError("this TelemetrySampler is already running; stop() it first")
        self._start_s = time.perf_counter()
        self._duration_s, self._samples, self._reason = 0.0, [], ""
        self._stop.clear()
        handle = NotAvailable(self._unmapped) if self._unmapped else \
            device_handle(self.device_index, self._nvml)  # NotAvailable too without NVML
        if isinstance(handle, NotAvailable):
            self._reason = handle.reason
            return self
        self._sample()
        self._thread = threading.Thread(target=self._run, name="a800lab-telemetry", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the thread and take a last sample. Safe to call twice."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
            if not self._reason:  # the thread stopped early on an error: don't repeat it here
                self._sample()
        if self._start_s is not None:
            self._duration_s = time.perf_counter() - self._start_s
            self._start_s = None

    def __enter__(self) -> "TelemetrySampler":
        return self.start()

    def __exit__(self, *exc_info: Any) -> None:
        self.stop()

    def _sample(self) -> None:
        reading = snapshot(self.device_index, nvml=self._nvml,
                           t_s=time.perf_counter() - self._start_s)
        with self._lock:
            self._samples.append(reading)

    def _run(self) -> None:
        # a fixed schedule (start + k x interval), so a slow reading does not stretch the
        # interval; a slot missed while a reading ran is skipped, not made up back to back
        slot = 1
        while not self._stop.wait(max(0.0, self._start_s + slot * self.interval_s
                                      - time.perf_counter())):
            try:
                self._sample()
            except Exception as exc:  # a bug in a reading: say why sampling stopped, don't crash
                self._reason = f"sampling stopped: {type(exc).__name__}: {exc}"
                return
            slot = max(slot + 1, int((time.perf_counter() - self._start_s) / self.interval_s) + 1)

    # -- results --------------------------------------------------------------------------------
    @property
    def samples(self) -> list[dict]:
        """A copy of the snapshots taken so far (t_s = seconds since start)."""
        with self._lock:
            return list(self._samples)

    def summary(self) -> dict:
        """available, reason, n_samples, duration_s, mean/min/max of SUMMARY_FIELDS, the
        sorted union of throttle reasons seen, and power_source (what power_w is; "mixed (...)"
        when it changed, None without power readings)."""
        samples = self.samples
        running = self._start_s is not None
        result: dict[str, Any] = {
            "available": bool(samples),
            "reason": self._reason or ("" if samples else "no samples yet: use the sampler as a "
                                       "context manager or start()"),
            "n_samples": len(samples),
            "duration_s": time.perf_counter() - self._start_s if running else self._duration_s,
            **{field: _stats([s[field] for s in samples]) for field in SUMMARY_FIELDS},
        }
        result["throttle_reasons"] = sorted(
            {reason for s in samples for reason in s["throttle_reasons"] or ()})
        sources = sorted({s["power_source"] for s in samples if s["power_source"]})
        result["power_source"] = (sources[0] if len(sources) == 1 else
                                  f"mixed ({', '.join(sources)})" if sources else None)
        return result
