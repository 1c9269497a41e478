"""The cost panel and its figure: metered points, prices that re-plot without re-measuring,
your own workload, and a figure that names the device, the mode and the energy source."""

import pandas as pd
import pytest

from a800lab.core.results import Record, records_to_frame
from a800lab.figures.cost import cost_figure
from a800lab.widgets import CostExplorer

GPU_ENV = {"device_name": "NVIDIA H200", "mode": "GPU", "fingerprint": "h200"}


def gpu_point(batch_size, rate, j_per_sample, source, run="20260101T000000.000Z-aaaa"):
    return Record(workload="train_usage", params={"batch_size": batch_size}, outcome="ok",
                  throughput=rate, throughput_unit="samples/s", env=GPU_ENV, run_id=run,
                  time_ms=(1.0, 1.1, 1.0), metrics={
                      "j_per_sample": j_per_sample, "energy_source": source,
                      "sample_unit": "samples", "cpu_ms_per_sample": 0.01})


def test_training_cost_panel_on_a_cpu():
    panel = CostExplorer("train", duration_s=0.05, price_per_gpu_hour_usd=3.6)
    assert panel.run(wait=True, batch_size=[4, 16])
    assert "Done: 2 points (2 ok)" in panel.status_text
    table = panel.comparison()
    assert list(table["batch_size"]) == [4, 16]
    rate = table["throughput"]
    assert table["cost_per_million_usd"].tolist() == pytest.approx(list(1000.0 / rate))
    assert table["energy_source"].tolist() == ["unavailable"] * 2
    assert "energy unavailable on this CPU" in panel.table.value
    assert "$ per million" in panel.table.value
    axes = panel.figure.axes
    assert "CPU fallback" in axes[0].get_title()
    assert axes[1].get_title() == "energy unavailable: CPU time per sample"
    assert "at $3.6 per machine-hour\n(CPU fallback: the price of this CPU machine" in \
        axes[2].get_title()


def test_a_price_change_replots_without_measuring():
    panel = CostExplorer("matmul", duration_s=0.05)
    panel.run(wait=True)
    before = panel.records
    panel.price.value = 7.5
    panel.gpus.value = 8
    panel.wait()
    panel.refresh()
    assert panel.records == before
    assert "at $7.5 per machine-hour x 8 machines" in panel.figure.axes[2].get_title()
    assert "$7.5 per machine-hour" in panel.caption.value
    assert panel.comparison()["cost_per_million_usd"].iloc[0] == pytest.approx(
        7.5 * 8 / (3600 * before[0].throughput) * 1e6)


def test_your_own_workload():
    import torch

    def make_step(width, device):
        x = torch.ones(width, width, device=device)
        return (lambda: x @ x), width

    panel = CostExplorer(make_step=make_step, params={"width": [8, 32]}, duration_s=0.05)
    panel.run(wait=True)
    assert [r.params["width"] for r in panel.records] == [8, 32]
    assert all(r.metrics["samples_per_step"] == r.params["width"] for r in panel.records)
    with pytest.raises(ValueError, match="does not match params"):
        CostExplorer(make_step=make_step, params={"height": [8]})
    with pytest.raises(ValueError, match="needs params"):
        CostExplorer(make_step=make_step)
    with pytest.raises(ValueError, match="workload='fft'"):
        CostExplorer("fft")


def test_cost_figure_with_gpu_energy_marks_the_source():
    df = records_to_frame([gpu_point(32, 1000.0, 0.40, "energy_counter"),
                           gpu_point(256, 2500.0, 0.20, "energy_counter"),
                           gpu_point(1024, 2600.0, 0.22, "power_x_time")])
    fig = cost_figure(df, "batch_size", price_per_gpu_hour_usd=3.6, price_per_kwh_usd=0.2)
    top, middle, bottom = fig.axes[:3]
    assert "NVIDIA H200 (GPU)" in top.get_title()
    assert middle.get_title() == "energy per sample"
    labels = [t.get_text() for t in middle.get_legend().get_texts()]
    assert any("energy counter" in t for t in labels) and any("estimate" in t for t in labels)
    cost_line = bottom.get_lines()[0]  # drawn first: the cost per million at $3.6 per hour
    assert list(cost_line.get_ydata()) == pytest.approx(
        [3.6 / (3600 * rate) * 1e6 for rate in (1000.0, 2500.0, 2600.0)])
    assert any("electricity" in t.get_text() for t in bottom.get_legend().get_texts())
    fig.canvas.draw()
    for ax in (middle, bottom):  # legends outside the axes, on the right
        assert ax.get_legend().get_window_extent().x0 > ax.get_window_extent().x1


def test_cost_figure_without_a_price_or_points():
    df = records_to_frame([gpu_point(32, 1000.0, 0.40, "energy_counter")])
    assert "enter a price" in cost_figure(df, "batch_size").axes[2].get_title()
    empty = cost_figure(pd.DataFrame(), "batch_size")
    assert any("no successful points" in t.get_text() for t in empty.axes[1].texts)
