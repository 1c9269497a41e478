"""GPU paths of energy and cost (marker `gpu`, skipped without CUDA): the card's own energy
counter, a metered matmul, and the cost panel's fp32 vs bf16 comparison."""

import time

import pytest
import torch

from a800lab.workloads.energy import EnergyMeter
from a800lab.workloads.usage import matmul_usage_point

pytestmark = pytest.mark.gpu


def test_the_energy_counter_of_a_real_gpu():
    x = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    meter = EnergyMeter("cuda:0", interval_s=0.05)
    with meter:
        end = time.perf_counter() + 3.0
        while time.perf_counter() < end:
            x @ x
            torch.cuda.synchronize()
    r = meter.reading()
    assert r.source == "energy_counter", r.note  # Volta and newer have the counter
    assert 30 < r.power_w < 1200, r.to_dict()
    sampled = r.telemetry["power_w"]["mean"] * r.duration_s  # power x time, for comparison
    assert 0.5 < sampled / r.energy_j < 1.5, (sampled, r.energy_j, r.telemetry["power_source"])
    assert r.telemetry["gpu_util_pct"]["max"] > 50


def test_a_metered_matmul_reports_energy_per_matmul():
    out = matmul_usage_point(4096, "bf16", device="cuda", duration_s=2.0)
    assert out["energy_source"] == "energy_counter", out["energy_note"]
    assert out["j_per_sample"] > 0 and out["tflops"] > 10
    assert out["j_per_sample"] == pytest.approx(out["power_w"] / out["throughput"])
    assert out["gpu_util_pct"] > 50 and out["power_source"] is not None


def test_cost_panel_finds_bf16_cheaper_than_fp32():
    from a800lab.widgets import CostExplorer

    panel = CostExplorer("matmul", duration_s=1.0, device="cuda")
    panel.run(wait=True, precision=["fp32", "bf16"])
    table = panel.comparison()
    assert list(table["precision"]) == ["fp32", "bf16"], panel.status_text
    assert table["cost_per_million_usd"].iloc[1] < table["cost_per_million_usd"].iloc[0]
    assert table["j_per_sample"].iloc[1] < table["j_per_sample"].iloc[0]
    assert panel.figure.axes[1].get_title() == "energy per matmul"
