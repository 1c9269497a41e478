"""Telemetry snapshots and the background sampler, driven by the fake NVML."""

import json
import threading
import time

import pytest

from a800lab.core.telemetry import TelemetrySampler, snapshot
from tests.fake_nvml import FakeNvml

SNAPSHOT_KEYS = {"t_s", "gpu_util_pct", "mem_util_pct", "mem_used_bytes", "mem_total_bytes",
                 "power_w", "power_source", "power_limit_w", "sm_clock_mhz", "mem_clock_mhz",
                 "temperature_c", "throttle_reasons"}


def sampler_threads():
    return [t for t in threading.enumerate() if t.name == "a800lab-telemetry"]


def test_snapshot_reads_the_throttled_gpu():
    before = time.time()
    snap = snapshot(2, nvml=FakeNvml())
    assert set(snap) == SNAPSHOT_KEYS
    assert snap["t_s"] >= before
    assert (snap["gpu_util_pct"], snap["mem_util_pct"]) == (100, 61)
    assert (snap["power_w"], snap["power_limit_w"]) == (398.5, 400.0)
    assert snap["power_source"] == "power_usage"  # GA100: PowerUsage is instantaneous
    assert (snap["sm_clock_mhz"], snap["mem_clock_mhz"], snap["temperature_c"]) == (1095, 1593, 87)
    assert snap["mem_total_bytes"] == 80 * 2**30
    assert snap["throttle_reasons"] == ["sw_power_cap", "hw_thermal_slowdown"]


def test_snapshot_unsupported_and_unavailable_values_are_none():
    snap = snapshot(0, nvml=FakeNvml(not_supported={"nvmlDeviceGetPowerUsage"}))
    assert snap["power_w"] is None and snap["power_source"] is None
    assert snap["power_limit_w"] == 400.0
    dead = snapshot(0, nvml=FakeNvml(init_error=FakeNvml.NVMLError_DriverNotLoaded))
    assert set(dead) == SNAPSHOT_KEYS
    assert all(value is None for key, value in dead.items() if key != "t_s")


def test_sampler_summary_follows_changing_values():
    fake = FakeNvml()
    gpu = fake.gpus[0]
    gpu.gpu_util_pct, gpu.power_mw, gpu.sm_clock_mhz = 20, 100_000, 1410
    with TelemetrySampler(0, interval_s=0.005, nvml=fake) as sampler:
        time.sleep(0.05)
        gpu.gpu_util_pct, gpu.power_mw, gpu.sm_clock_mhz = 90, 350_000, 1200
        gpu.throttle_mask = 0x4  # sw_power_cap
        gpu.mem_used_bytes = 40 * 2**30
        time.sleep(0.05)
    summary = sampler.summary()
    assert summary["available"] is True and summary["reason"] == ""
    assert summary["n_samples"] >= 3 and len(sampler.samples) == summary["n_samples"]
    assert summary["gpu_util_pct"]["min"] == 20 and summary["gpu_util_pct"]["max"] == 90
    assert 20 < summary["gpu_util_pct"]["mean"] < 90
    assert (summary["power_w"]["min"], summary["power_w"]["max"]) == (100.0, 350.0)
    assert (summary["sm_clock_mhz"]["min"], summary["sm_clock_mhz"]["max"]) == (1200, 1410)
    assert summary["mem_used_bytes"]["max"] == 40 * 2**30
    assert summary["throttle_reasons"] == ["gpu_idle", "sw_power_cap"]
    assert 0.09 <= summary["duration_s"] < 5
    json.dumps(summary)


def test_sampler_timestamps_are_relative_and_ordered():
    with TelemetrySampler(1, interval_s=0.01, nvml=FakeNvml()) as sampler:
        time.sleep(0.05)
    times = [s["t_s"] for s in sampler.samples]
    assert times[0] >= 0 and times == sorted(times)
    assert times[-1] <= sampler.summary()["duration_s"]
    assert set(sampler.samples[0]) == SNAPSHOT_KEYS


def test_short_run_still_has_first_and_last_sample():
    fake = FakeNvml()
    sampler = TelemetrySampler(0, interval_s=60, nvml=fake).start()
    fake.gpus[0].gpu_util_pct = 77
    sampler.stop()
    assert [s["gpu_util_pct"] for s in sampler.samples] == [0, 77]
    assert not sampler_threads()


def test_sampler_without_nvml_says_why_and_starts_no_thread():
    fake = FakeNvml(init_error=FakeNvml.NVMLError_LibraryNotFound)
    with TelemetrySampler(0, interval_s=0.01, nvml=fake) as sampler:
        assert not sampler_threads()
        time.sleep(0.02)
    summary = sampler.summary()
    assert summary["available"] is False and summary["n_samples"] == 0
    assert "NVML Shared Library Not Found" in summary["reason"]
    assert summary["power_w"] == {"mean": None, "min": None, "max": None}
    assert summary["throttle_reasons"] == []


def test_sampler_for_a_missing_gpu_says_why():
    with TelemetrySampler(12, nvml=FakeNvml()) as sampler:
        pass
    assert sampler.summary()["available"] is False
    assert "Invalid Argument" in sampler.summary()["reason"]


def test_sampler_validates_and_refuses_double_start():
    with pytest.raises(ValueError, match="interval_s=0"):
        TelemetrySampler(interval_s=0)
    sampler = TelemetrySampler(0, interval_s=0.01, nvml=FakeNvml()).start()
    with pytest.raises(RuntimeError, match="already running"):
        sampler.start()
    sampler.stop()
    sampler.stop()  # a second stop is harmless
    assert not sampler_threads()


def test_summary_before_start():
    summary = TelemetrySampler(nvml=FakeNvml()).summary()
    assert summary["available"] is False and "start()" in summary["reason"]


def test_a_failing_reading_stops_sampling_without_raising():
    class Flaky(FakeNvml):
        calls = 0

        def nvmlDeviceGetUtilizationRates(self, gpu):
            Flaky.calls += 1
            if Flaky.calls > 1:
                raise ZeroDivisionError("bad reading")
            return super().nvmlDeviceGetUtilizationRates(gpu)

    with TelemetrySampler(0, interval_s=0.001, nvml=Flaky()) as sampler:
        time.sleep(0.05)
    summary = sampler.summary()
    assert summary["n_samples"] == 1 and summary["available"] is True
    assert summary["reason"] == "sampling stopped: ZeroDivisionError: bad reading"


def test_sampler_for_a_cuda_device_samples_the_gpu_behind_it():
    fake = FakeNvml()
    fake.gpus[3].gpu_util_pct = 55
    props = fake.cuda_properties()
    # as under CUDA_VISIBLE_DEVICES=3: torch's cuda:0 is NVML GPU 3, not NVML GPU 0
    with TelemetrySampler(cuda_device="cuda:0", interval_s=60, nvml=fake,
                          cuda_properties=[props[3]]) as sampler:
        pass
    assert sampler.device_index == 3
    assert [s["gpu_util_pct"] for s in sampler.samples] == [55, 55]
    assert sampler.summary()["available"] is True


def test_sampler_for_an_unmapped_cuda_device_says_why_and_starts_no_thread():
    fake = FakeNvml()
    with TelemetrySampler(cuda_device="cuda:1", nvml=fake,
                          cuda_properties=fake.cuda_properties()[:1]) as sampler:
        assert not sampler_threads()
    summary = sampler.summary()
    assert sampler.device_index is None and summary["available"] is False
    assert summary["reason"] == ("no NVML GPU to sample for 'cuda:1': there is no cuda:1: "
                                 "torch sees 1 CUDA device(s)")


def test_sampler_takes_an_nvml_index_or_a_cuda_device_not_both():
    with pytest.raises(ValueError, match="not both"):
        TelemetrySampler(0, cuda_device="cuda:0", nvml=FakeNvml())
    with pytest.raises(ValueError, match="'cuda:N'"):
        TelemetrySampler(cuda_device="cpu", nvml=FakeNvml())
    assert TelemetrySampler(nvml=FakeNvml()).device_index == 0


def test_hopper_samples_instant_power_and_say_so():
    t = [0.0]
    fake = FakeNvml(model="H200", clock=lambda: t[0])  # 62 W from t = 0
    averaged = FakeNvml(model="H200", clock=lambda: t[0],
                        not_supported={"nvmlDeviceGetFieldValues"})
    t[0] = 3.0
    fake.gpus[1].power_mw = averaged.gpus[1].power_mw = 650_000  # a kernel starts
    t[0] = 3.1
    snap = snapshot(1, nvml=fake)
    assert (snap["power_w"], snap["power_source"]) == (650.0, "instant")
    snap = snapshot(1, nvml=averaged)  # the 1 s average still says ~121 W
    assert snap["power_source"] == "average_1s" and snap["power_w"] == pytest.approx(120.8)
    with TelemetrySampler(1, interval_s=60, nvml=fake) as sampler:
        pass
    assert sampler.summary()["power_source"] == "instant"


def test_summary_says_when_the_power_source_changed():
    class Switching(FakeNvml):
        calls = 0

        def nvmlDeviceGetFieldValues(self, handle, fieldIds):
            Switching.calls += 1
            if Switching.calls > 1:
                raise self.NVMLError_NotSupported()
            return super().nvmlDeviceGetFieldValues(handle, fieldIds)

    with TelemetrySampler(0, interval_s=60, nvml=Switching(model="H200")) as sampler:
        pass
    assert sampler.summary()["power_source"] == "mixed (average_1s, instant)"
    with TelemetrySampler(0, nvml=FakeNvml(not_supported={"nvmlDeviceGetPowerUsage"})) as s:
        pass
    assert s.summary()["power_source"] is None


def test_a_slow_reading_does_not_stretch_the_schedule():
    """Readings that take 30 ms on a 50 ms schedule: duration / interval samples (+ first and
    last), not duration / (interval + reading), which sleep-then-sample would take (~0.6)."""

    class SlowNvml(FakeNvml):
        def nvmlDeviceGetUtilizationRates(self, handle):
            time.sleep(0.03)
            return super().nvmlDeviceGetUtilizationRates(handle)

    with TelemetrySampler(0, interval_s=0.05, nvml=SlowNvml()) as sampler:
        time.sleep(1.0)
    summary = sampler.summary()
    expected = summary["duration_s"] / 0.05 + 2
    assert 0.8 <= summary["n_samples"] / expected <= 1.05, (summary["n_samples"], expected)
