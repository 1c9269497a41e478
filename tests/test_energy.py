"""Energy: NVML's millijoule counter, power x time (and what Hopper's 1 s average means), RAPL
where readable, CPU time always; and the arithmetic of energy per sample and cost."""

import math

import pytest

from a800lab.workloads.energy import (
    EnergyMeter,
    counter_energy_j,
    integrate_power_j,
    rapl_delta_j,
    rapl_zones,
)
from tests.fake_nvml_counters import CounterFakeNvml


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


# ---- arithmetic --------------------------------------------------------------------------------
def test_counter_energy_is_the_difference_in_joules():
    assert counter_energy_j(1_000_000, 1_350_500) == 350.5
    assert counter_energy_j(5_000, 4_000) is None  # went backwards: the driver was reloaded


def test_power_is_integrated_by_trapezoids():
    flat = [{"t_s": 0.0, "power_w": 300.0}, {"t_s": 1.0, "power_w": 300.0},
            {"t_s": 2.5, "power_w": 300.0}]
    assert integrate_power_j(flat) == pytest.approx(750.0)
    ramp = [{"t_s": 1.0, "power_w": 200.0}, {"t_s": 0.0, "power_w": 100.0},
            {"t_s": 2.0, "power_w": None}]
    assert integrate_power_j(ramp) == pytest.approx(150.0)  # sorted; the None reading skipped
    assert integrate_power_j([{"t_s": 0.0, "power_w": 300.0}]) is None


def test_rapl_counters_wrap_at_their_range():
    assert rapl_delta_j([100, 9_000_000], [1_100, 500_000], [10**7, 10**7]) == \
        pytest.approx((1_000 + 1_500_000) / 1e6)


# ---- RAPL --------------------------------------------------------------------------------------
def fake_powercap(root, packages=(1_000_000, 2_000_000)):
    for i, uj in enumerate(packages):
        zone = root / f"intel-rapl:{i}"
        zone.mkdir(parents=True)
        (zone / "energy_uj").write_text(f"{uj}\n")
        (zone / "max_energy_range_uj").write_text("262143328850\n")
        (zone / "name").write_text(f"package-{i}\n")
        sub = root / f"intel-rapl:{i}:0"  # a sub-zone (core): inside the package, not added
        sub.mkdir()
        (sub / "energy_uj").write_text("5\n")
    return root


def set_uj(root, zone, uj):
    (root / zone / "energy_uj").write_text(f"{uj}\n")


def test_rapl_zones_are_the_readable_packages(tmp_path):
    root = fake_powercap(tmp_path / "powercap")
    assert [z.name for z in rapl_zones(root)] == ["intel-rapl:0", "intel-rapl:1"]
    assert "does not exist" in rapl_zones(tmp_path / "missing").reason
    (root / "intel-rapl:1" / "energy_uj").write_text("")  # as unreadable as a root-only file
    assert "usually needs root" in rapl_zones(root).reason


def test_cpu_meter_reads_rapl_when_readable(tmp_path):
    root = fake_powercap(tmp_path / "powercap")
    clock, cpu = Clock(), Clock()
    meter = EnergyMeter("cpu", powercap_root=root, clock=clock, cpu_clock=cpu)
    with meter:
        set_uj(root, "intel-rapl:0", 31_000_000)   # +30 J
        set_uj(root, "intel-rapl:1", 12_000_000)   # +10 J
        clock.t, cpu.t = 2.0, 1.5
    r = meter.reading()
    assert r.source == "rapl" and r.energy_j == pytest.approx(40.0)
    assert r.power_w == pytest.approx(20.0) and r.cpu_time_s == 1.5
    assert "whole CPU package" in r.note and r.telemetry is None


def test_cpu_meter_without_rapl_reports_cpu_time_and_says_why(tmp_path):
    clock, cpu = Clock(), Clock()
    with EnergyMeter("cpu", powercap_root=tmp_path / "none", clock=clock,
                     cpu_clock=cpu) as meter:
        clock.t, cpu.t = 1.0, 0.9
    r = meter.reading()
    assert r.energy_j is None and r.power_w is None and r.source == "unavailable"
    assert "energy unavailable" in r.note and "CPU time" in r.note
    assert r.cpu_time_s == 0.9 and r.duration_s == 1.0


# ---- GPU ---------------------------------------------------------------------------------------
def gpu_meter(fake, clock, **kwargs):
    return EnergyMeter(device_index=0, nvml=fake, clock=clock, cpu_clock=Clock(),
                       interval_s=0.01, **kwargs)


def test_gpu_meter_uses_the_energy_counter():
    clock = Clock()
    fake = CounterFakeNvml(clock=clock)
    fake.gpus[0].power_mw = 300_000
    meter = gpu_meter(fake, clock)
    with meter:
        clock.t = 4.0
        fake.gpus[0].power_mw = 200_000
        clock.t = 10.0
    r = meter.reading()
    assert r.source == "energy_counter"
    assert r.energy_j == pytest.approx(300 * 4 + 200 * 6)
    assert r.power_w == pytest.approx(240.0)
    assert "millijoules" in r.note and "rough" not in r.note
    assert r.telemetry["available"] and r.telemetry["n_samples"] >= 2


def test_a_short_run_is_called_rough():
    clock = Clock()
    fake = CounterFakeNvml(clock=clock)
    with gpu_meter(fake, clock) as meter:
        clock.t = 0.2
    assert "run longer" in meter.reading().note


def test_without_a_counter_power_is_integrated_and_a800_readings_are_instantaneous():
    clock = Clock()
    fake = CounterFakeNvml(clock=clock, not_supported={"nvmlDeviceGetTotalEnergyConsumption"})
    fake.gpus[0].power_mw = 250_000
    meter = gpu_meter(fake, clock)
    with meter:
        clock.t = 3.0
    r = meter.reading()
    samples = meter._sampler.samples
    span = samples[-1]["t_s"] - samples[0]["t_s"]  # the sampler's own (real) timestamps
    assert r.source == "power_x_time" and r.energy_j == pytest.approx(250 * span)
    assert "Not Supported" in r.note and "instantaneous on A100/A800" in r.note


def test_hopper_power_x_time_warns_about_the_one_second_average():
    clock = Clock()
    fake = CounterFakeNvml(model="H200", clock=clock, not_supported={
        "nvmlDeviceGetTotalEnergyConsumption", "nvmlDeviceGetFieldValues"})
    with gpu_meter(fake, clock) as meter:
        clock.t = 2.0
    r = meter.reading()
    assert r.source == "power_x_time" and r.telemetry["power_source"] == "average_1s"
    assert "over the last second" in r.note and "10 s or more" in r.note


def test_a_counter_that_went_backwards_falls_back_to_power():
    clock = Clock()
    fake = CounterFakeNvml(clock=clock)
    fake.energy_offset_mj[0] = 10**9
    meter = gpu_meter(fake, clock)
    meter.start()
    fake.energy_offset_mj[0] = 0  # "the driver was reloaded"
    clock.t = 2.0
    r = meter.stop()
    assert r.source == "power_x_time" and "went backwards" in r.note


def test_no_counter_and_no_power_is_unavailable_with_both_reasons():
    clock = Clock()
    fake = CounterFakeNvml(clock=clock, not_supported={
        "nvmlDeviceGetTotalEnergyConsumption", "nvmlDeviceGetPowerUsage",
        "nvmlDeviceGetFieldValues"})
    with gpu_meter(fake, clock) as meter:
        clock.t = 2.0
    r = meter.reading()
    assert r.energy_j is None and r.source == "unavailable"
    assert "no energy counter" in r.note and "no power readings" in r.note


def test_meter_use_errors_say_what_to_do():
    meter = EnergyMeter("cpu")
    with pytest.raises(RuntimeError, match="context manager"):
        meter.reading()
    with pytest.raises(RuntimeError, match="before start"):
        meter.stop()
    meter.start()
    first = meter.stop()
    assert meter.stop() is first and not math.isnan(first.duration_s)


def test_the_counters_fake_matches_pynvml():
    import inspect

    import pynvml

    fake = CounterFakeNvml()
    for name in ("nvmlDeviceGetTotalEnergyConsumption", "nvmlDeviceGetRemappedRows",
                 "nvmlDeviceGetRetiredPages", "nvmlDeviceGetRetiredPagesPendingStatus"):
        real = [p.name for p in inspect.signature(getattr(pynvml, name)).parameters.values()]
        mine = [p.name for p in inspect.signature(getattr(fake, name)).parameters.values()]
        assert mine == real, name
    for name in ("NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS",
                 "NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR"):
        assert getattr(CounterFakeNvml, name) == getattr(pynvml, name)
