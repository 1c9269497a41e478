"""Energy of a run on a GPU or a CPU, saying what it was measured from: NVML's energy counter,
else power x time, else a CPU's RAPL counters; else "unavailable" and why. Reading only.

    with EnergyMeter("cuda:0") as meter:          # "cpu" without a GPU
        run_steps()
    meter.reading().energy_j, meter.reading().source, meter.reading().note
"""

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..core.backends import resolve_device
from ..core.gpu_map import nvml_index
from ..core.nvml import NotAvailable, device_handle, nvml_call
from ..core.telemetry import TelemetrySampler

POWERCAP = Path("/sys/class/powercap")
SHORT_RUN_S = 1.0  # shorter runs: counters and averaged power say little; say so
_POWER_NOTES = {
    "average_1s": "NVML averages this GPU's power over the last second (Ampere and newer, "
                  "except GA100): readings lag the load by up to 1 s, so runs of a few seconds "
                  "read low; run for 10 s or more, or repeat the run",
    "instant": "instantaneous readings: spikes between samples are missed",
    "power_usage": "nvmlDeviceGetPowerUsage, instantaneous on A100/A800 and older per NVML's "
                   "documentation: spikes between samples are missed",
}


@dataclass(frozen=True)
class EnergyReading:
    """What an EnergyMeter saw between start and stop."""

    energy_j: float | None
    source: str          # "energy_counter", "power_x_time", "rapl" or "unavailable"
    note: str            # what the number is and how far to trust it
    duration_s: float
    cpu_time_s: float
    telemetry: dict | None = None

    @property
    def power_w(self) -> float | None:
        """Mean power over the run (energy / duration); None without energy."""
        if self.energy_j is None or self.duration_s <= 0:
            return None
        return self.energy_j / self.duration_s

    def to_dict(self) -> dict:
        return {**asdict(self), "power_w": self.power_w}


# ---- arithmetic --------------------------------------------------------------------------------
def counter_energy_j(start_mj: int, end_mj: int) -> float | None:
    """Joules between two readings of NVML's millijoule counter; None if it went backwards."""
    return None if end_mj < start_mj else (end_mj - start_mj) / 1000.0


def integrate_power_j(samples: Sequence[dict]) -> float | None:
    """Energy of power samples ({"t_s", "power_w"}) by trapezoids; None with fewer than two."""
    points = sorted((s["t_s"], s["power_w"]) for s in samples if s.get("power_w") is not None)
    if len(points) < 2:
        return None
    pairs = zip(points, points[1:], strict=False)
    return sum((t1 - t0) * (p0 + p1) / 2 for (t0, p0), (t1, p1) in pairs)


def rapl_delta_j(start_uj: Sequence[int], end_uj: Sequence[int],
                 max_range_uj: Sequence[int]) -> float:
    """Joules between two readings of RAPL zones, each counter wrapping at its max range."""
    return sum(b - a if b >= a else b + wrap - a
               for a, b, wrap in zip(start_uj, end_uj, max_range_uj, strict=True)) / 1e6


# ---- RAPL --------------------------------------------------------------------------------------
def rapl_zones(root: Path = POWERCAP) -> Any:
    """The readable RAPL package zones under `root`, or NotAvailable saying why there are none."""
    if not root.is_dir():
        return NotAvailable(f"{root} does not exist (no RAPL driver, or not exposed in this "
                            "container)")
    zones = sorted(p for p in root.glob("intel-rapl:*") if p.name.count(":") == 1)
    if not zones:
        return NotAvailable(f"{root} has no intel-rapl package zones")
    try:
        for zone in zones:
            int((zone / "energy_uj").read_text())
    except (OSError, ValueError) as exc:
        return NotAvailable(f"cannot read {zone / 'energy_uj'} ({exc}); reading RAPL usually "
                            "needs root")
    return zones


def _read_uj(zones: list[Path], name: str) -> list[int]:
    return [int((zone / name).read_text()) for zone in zones]


# ---- the meter ---------------------------------------------------------------------------------
class EnergyMeter:
    """Energy, CPU time and (on a GPU) telemetry between start() and stop(); `device` in
    torch's numbering (mapped to NVML by UUID), or `device_index` in NVML's."""

    def __init__(self, device: str = "auto", *, device_index: int | None = None,
                 interval_s: float = 0.1, nvml: Any = None, cuda_properties: list | None = None,
                 powercap_root: Path = POWERCAP, clock: Callable[[], float] = time.perf_counter,
                 cpu_clock: Callable[[], float] = time.process_time) -> None:
        self._nvml, self._clock, self._cpu_clock = nvml, clock, cpu_clock
        self._powercap_root = powercap_root
        self._sampler: TelemetrySampler | None = None
        self._gpu_reason = ""
        self.on_gpu = device_index is not None or resolve_device(device).startswith("cuda")
        if self.on_gpu:
            if device_index is None:
                device_index = nvml_index(device, nvml=nvml, cuda_properties=cuda_properties)
            if isinstance(device_index, NotAvailable):
                self._gpu_reason = f"no NVML GPU for {device}: {device_index.reason}"
                device_index = None
            else:
                self._sampler = TelemetrySampler(device_index=device_index,
                                                 interval_s=interval_s, nvml=nvml)
        self.device_index = device_index
        self._start: tuple | None = None
        self._reading: EnergyReading | None = None

    def __enter__(self) -> "EnergyMeter":
        return self.start()

    def __exit__(self, *exc_info: Any) -> None:
        self.stop()

    def _counter_mj(self) -> Any:
        if self.device_index is None:
            return NotAvailable(self._gpu_reason)
        handle = device_handle(self.device_index, self._nvml)
        return nvml_call("nvmlDeviceGetTotalEnergyConsumption", handle, nvml=self._nvml)

    def _rapl(self) -> tuple[Any, list[int] | None]:
        zones = rapl_zones(self._powercap_root)
        if isinstance(zones, NotAvailable):
            return zones, None
        try:
            return zones, _read_uj(zones, "energy_uj")
        except (OSError, ValueError) as exc:
            return NotAvailable(f"RAPL became unreadable: {exc}"), None

    def start(self) -> "EnergyMeter":
        """Read the counters and start sampling."""
        self._reading = None
        if self._sampler is not None:
            self._sampler.start()
        # the clocks are read right beside the energy counters: duration and energy cover
        # the same span, not the sampler's start-up
        counter = self._counter_mj() if self.on_gpu else None
        rapl = (None, None) if self.on_gpu else self._rapl()
        self._start = (self._clock(), self._cpu_clock(), counter, rapl)
        return self

    def stop(self) -> EnergyReading:
        """Read the counters again, stop sampling, return the reading (again if called twice)."""
        if self._start is None:
            if self._reading is None:
                raise RuntimeError("EnergyMeter.stop() before start()")
            return self._reading
        t0, cpu0, counter0, (zones, rapl0) = self._start
        duration_s, cpu_time_s = self._clock() - t0, self._cpu_clock() - cpu0
        counter1 = self._counter_mj() if self.on_gpu else None
        rapl1 = _read_uj(zones, "energy_uj") if rapl0 is not None else None
        if self._sampler is not None:
            self._sampler.stop()
        self._start = None
        telemetry = self._sampler.summary() if self._sampler is not None else None
        energy, source, note = (self._gpu_energy(counter0, counter1) if self.on_gpu
                                else _cpu_energy(zones, rapl0, rapl1))
        if energy is not None and duration_s < SHORT_RUN_S:
            note += f"; a run under {SHORT_RUN_S:g} s: counters step and averages lag, so this " \
                    "is rough; run longer"
        self._reading = EnergyReading(energy, source, note, duration_s, cpu_time_s, telemetry)
        return self._reading

    @property
    def power_samples_w(self) -> list[float]:
        """The power readings sampled during the run, in watts ([] without a GPU sampler)."""
        samples = self._sampler.samples if self._sampler is not None else []
        return [s["power_w"] for s in samples if s.get("power_w") is not None]

    def reading(self) -> EnergyReading:
        if self._reading is None:
            raise RuntimeError("no reading yet: use the meter as a context manager, or call "
                               "start() and stop()")
        return self._reading

    def _gpu_energy(self, counter0: Any, counter1: Any) -> tuple[float | None, str, str]:
        if not isinstance(counter0, NotAvailable) and not isinstance(counter1, NotAvailable):
            energy = counter_energy_j(int(counter0), int(counter1))
            if energy is not None:
                return energy, "energy_counter", (
                    f"NVML's total-energy counter of GPU {self.device_index} (millijoules since "
                    "the driver loaded), read at start and stop")
            counter0 = NotAvailable("the energy counter went backwards (driver reloaded?)")
        why_counter = counter0.reason if isinstance(counter0, NotAvailable) else counter1.reason
        samples = self._sampler.samples if self._sampler is not None else []
        energy = integrate_power_j(samples)
        if energy is None:
            power_why = self._sampler.summary()["reason"] if self._sampler else self._gpu_reason
            return None, "unavailable", (f"energy unavailable: no energy counter ({why_counter})"
                                         f" and no power readings ({power_why or 'none taken'})")
        power_source = self._sampler.summary()["power_source"]
        n = sum(s.get("power_w") is not None for s in samples)
        detail = _POWER_NOTES.get(power_source, f"power source {power_source}")
        return energy, "power_x_time", (
            f"power x time from {n} power readings of GPU {self.device_index} every "
            f"{self._sampler.interval_s:g} s, no energy counter ({why_counter}); {detail}")


def _cpu_energy(zones: Any, rapl0: list[int] | None,
                rapl1: list[int] | None) -> tuple[float | None, str, str]:
    if rapl0 is None or rapl1 is None:
        why = zones.reason if isinstance(zones, NotAvailable) else "RAPL not read"
        return None, "unavailable", (f"energy unavailable on this CPU: {why}; the process's CPU "
                                     "time is reported instead")
    energy = rapl_delta_j(rapl0, rapl1, _read_uj(zones, "max_energy_range_uj"))
    names = ", ".join(z.name for z in zones)
    return energy, "rapl", (f"RAPL package energy ({names}): the whole CPU package(s), every "
                            "process on them, DRAM not included")
