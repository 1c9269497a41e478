"""Cost and energy per sample: the arithmetic, a metered run (steady steps, energy per sample
from mean power / samples/s), the point functions and the side-by-side comparison."""

import pandas as pd
import pytest

from a800lab.core.sweep import run_sweep
from a800lab.workloads.energy import EnergyMeter
from a800lab.workloads.usage import (
    compare_usage,
    cost_per_million_samples_usd,
    custom_usage_point,
    energy_cost_per_million_samples_usd,
    matmul_usage_point,
    metered_run,
    train_usage_point,
)
from tests.fake_nvml_counters import CounterFakeNvml
from tests.test_energy import Clock


def test_cost_per_million_samples():
    # $3.60 per GPU-hour = $0.001 per second; 1000 samples/s -> 1000 s per million = $1
    assert cost_per_million_samples_usd(1000.0, 3.60) == pytest.approx(1.0)
    assert cost_per_million_samples_usd(1000.0, 3.60, gpus=8) == pytest.approx(8.0)
    assert cost_per_million_samples_usd(2000.0, 3.60) == pytest.approx(0.5)
    assert cost_per_million_samples_usd(5.0, 0.0) == 0.0
    for bad in (0.0, -1.0, float("nan"), True):
        with pytest.raises(ValueError, match="samples_per_s"):
            cost_per_million_samples_usd(bad, 3.6)
    with pytest.raises(ValueError, match="gpus"):
        cost_per_million_samples_usd(1.0, 3.6, gpus=0)
    with pytest.raises(ValueError, match="price_per_gpu_hour_usd"):
        cost_per_million_samples_usd(1.0, -3.6)


def test_energy_cost_per_million_samples():
    # 0.36 J x 1e6 = 360 kJ = 0.1 kWh; at $0.20 per kWh: $0.02
    assert energy_cost_per_million_samples_usd(0.36, 0.20) == pytest.approx(0.02)
    with pytest.raises(ValueError, match="j_per_sample"):
        energy_cost_per_million_samples_usd(0.0, 0.2)


def test_metered_run_gives_energy_per_sample_from_mean_power():
    clock = Clock()
    fake = CounterFakeNvml(clock=clock)
    fake.gpus[0].power_mw = 300_000
    meter = EnergyMeter(device_index=0, nvml=fake, clock=clock, interval_s=0.01)
    calls = []

    def step():
        calls.append(1)
        clock.t += 0.01  # the fake GPU burns 300 W x 10 ms = 3 J per step

    out = metered_run(step, 4, device="cpu", duration_s=0.05, warmup_s=0.0, meter=meter)
    assert out["energy_source"] == "energy_counter" and out["power_w"] == pytest.approx(300)
    assert out["j_per_sample"] == pytest.approx(300 / out["throughput"])
    assert out["samples"] == 4 * out["steps"] and out["steps"] + 2 <= len(calls)
    assert out["throughput_unit"] == "samples/s" and len(out["time_ms"]) >= 3
    assert out["telemetry"]["available"]


def test_metered_run_on_a_cpu_reports_cpu_time_instead(tmp_path):
    meter = EnergyMeter("cpu", powercap_root=tmp_path)
    out = metered_run(lambda: sum(range(2000)), 1, device="cpu", duration_s=0.05,
                      warmup_s=0.0, sample_unit="sums", meter=meter)
    assert out["energy_j"] is None and out["j_per_sample"] is None
    assert out["energy_source"] == "unavailable" and "CPU time" in out["energy_note"]
    assert out["cpu_ms_per_sample"] > 0 and out["throughput_unit"] == "sums/s"
    with pytest.raises(ValueError, match="samples_per_step"):
        metered_run(lambda: None, 0, device="cpu")


def test_point_functions_on_a_cpu():
    out = matmul_usage_point(32, "fp32", device="cpu", duration_s=0.05)
    assert out["throughput_unit"] == "matmuls/s" and out["rel_error"] < 1e-5
    assert out["tflops"] == pytest.approx(2 * 32**3 * out["throughput"] / 1e12)
    out = train_usage_point("mlp", "tiny", 8, "fp32", device="cpu", duration_s=0.05)
    assert out["samples_per_step"] == 8 and out["loss"] >= 0

    def make_step(width, device):
        import torch

        x = torch.ones(width, device=device)
        return (lambda: x * 2), width

    out = custom_usage_point(make_step, {"width": 16}, device="cpu", duration_s=0.05)
    assert out["samples_per_step"] == 16
    with pytest.raises(ValueError, match="must return"):
        custom_usage_point(lambda width: 3, {"width": 1}, device="cpu")


def test_a_sweep_of_metered_points_records_energy_and_cost_inputs():
    res = run_sweep(matmul_usage_point, {"precision": ["fp32"], "size": [16, 32]},
                    fixed={"duration_s": 0.05}, workload="usage", device="cpu")
    assert [r.outcome for r in res.records] == ["ok", "ok"]
    metrics = res.records[0].metrics
    assert metrics["energy_source"] == "unavailable" and metrics["cpu_ms_per_sample"] > 0
    assert res.records[0].memory  # the metered steps are the point's measured window


def test_compare_usage_side_by_side():
    df = pd.DataFrame({"precision": ["fp32", "bf16"], "outcome": ["ok", "ok"],
                       "throughput": [1000.0, 2500.0], "throughput_unit": ["samples/s"] * 2,
                       "j_per_sample": [0.40, 0.20],
                       "energy_source": ["energy_counter"] * 2,
                       "cpu_ms_per_sample": [0.1, 0.05]})
    table = compare_usage(df, 3.6, price_per_kwh_usd=0.2)
    assert list(table["precision"]) == ["fp32", "bf16"]
    assert table["cost_per_million_usd"].tolist() == pytest.approx([1.0, 0.4])
    assert table["throughput_vs_first"].tolist() == pytest.approx([1.0, 2.5])
    assert table["j_per_sample_vs_first"].tolist() == pytest.approx([1.0, 0.5])
    assert table["energy_cost_per_million_usd"].tolist() == pytest.approx([0.4 / 18, 0.2 / 18])
    assert table["cpu_ms_per_sample"].tolist() == [0.1, 0.05] and "power_w" not in table
