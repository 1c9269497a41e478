"""ServingExplorer on a CPU: each view's Run, bad values refused in its status line, your own
model checked when the panel is built, the tuner's winner and code shown."""

import pytest
import torch
from torch import nn

from a800lab.widgets import ServingExplorer

pytestmark = pytest.mark.usefixtures("quiet_cpu")


def small_model():
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def small_batch(n):
    x = torch.randn(n, 8)
    return x, x[:, :4].argmax(1)


def test_the_views_run_and_draw_their_own_points():
    panel = ServingExplorer(requests=100, budget_s=0.02, cpu_threads=1)
    assert panel.run(wait=True, batch_size=[1, 4], precision="fp32")
    assert panel.status_text.startswith("Done: 2 points (2 ok)")
    assert "samples/s vs p99" in panel.caption.value
    assert panel.run(wait=True, view="concurrency", streams=[1, 2])
    frame = panel.results
    assert list(frame["workload"]) == ["serve", "serve", "concurrency", "concurrency"]
    assert frame["p99_ms"].notna().all() and "mps" in frame
    assert "<td>2</td>" in panel.table.value and "serve" not in panel._table_html(
        frame[frame["workload"] == "serve"])  # the streams view tabulates its own points
    assert panel.run(wait=True, view="tune", p99_target_ms=50.0, batch_size=[1, 4])
    assert panel.tune_outcome.winner is not None
    assert "the code to paste" in panel.tune_text.value
    assert {line.get_gid() for line in panel.figure.axes[0].lines} >= {"frontier", "winner"}


@pytest.mark.parametrize("values, says", [
    ({"batch_size": [0]}, "batch_size=0 is outside the allowed range"),
    ({"precision": "fp8"}, "'fp8' is not a valid value"),
    ({"view": "tune", "p99_target_ms": 0}, "p99_target_ms=0 is outside the allowed range"),
    ({"graphs": True}, "needs a CUDA device"),
])
def test_bad_values_are_refused_in_the_status_line(values, says):
    panel = ServingExplorer(requests=100, budget_s=0.02, cpu_threads=1)
    assert not panel.run(wait=True, **values)
    assert panel.status_text.startswith("Cannot run: ") and says in panel.status_text
    assert panel.results.empty


def test_your_model_is_checked_when_the_panel_is_built():
    panel = ServingExplorer(make_model=small_model, make_batch=small_batch, requests=100,
                            budget_s=0.02, cpu_threads=1)
    assert panel.run(wait=True, batch_size=[2])
    assert panel.results["outcome"].tolist() == ["ok"]
    assert not panel.run(view="decode")
    assert "decode runs the transformer preset" in panel.status_text
    broken = ServingExplorer(make_model=lambda: nn.Flatten(0), make_batch=small_batch)
    assert "first dimension to be the batch" in broken.status_text
    assert not broken.run(wait=True) and broken.results.empty
