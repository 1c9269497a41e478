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
    assert panel.run(wait=True, view="tune", p99_target_ms=50.0, offline=True,
                     max_batch=[1, 4])  # offline, the values typed are batch sizes
    assert panel.tune_outcome.winner is not None
    assert "the code to paste" in panel.tune_text.value
    assert {line.get_gid() for line in panel.figure.axes[0].lines} >= {"frontier", "winner"}
    assert panel.progress.value == panel.progress.max > 1  # full when the tuner ends


def test_the_load_view_draws_latency_against_offered_rate_with_its_target():
    panel = ServingExplorer(model="mlp", requests=100, budget_s=0.02, cpu_threads=1)
    assert panel.run(wait=True, view="load", load=[0.2, 3.0], max_batch=4, duration_s=0.3,
                     p99_target_ms=20.0)
    frame = panel.results
    assert list(frame["workload"]) == ["load", "load"] and list(frame["load"]) == [0.2, 3.0]
    assert frame["saturated"].tolist()[1] and "p99_target_ms" not in frame
    gids = {line.get_gid() for line in panel.figure.axes[0].lines}
    assert {"p99", "p50", "target", "saturated", "knee", "goodput"} <= gids
    panel.sweep_axis.value = "rate_rps"  # "sweep over": the rate instead of the load
    assert panel.run(wait=True, rate_rps=[300.0], max_batch=1, duration_s=0.5)
    assert panel.results["rate_rps"].tolist()[-1] == 300.0  # the rate swept, load left out
    assert "md1" in {line.get_gid() for line in panel.figure.axes[0].lines}
    assert "<th>offered_rate</th>" in panel.table.value


def test_the_generation_view_compares_the_schedulers():
    panel = ServingExplorer(requests=100, budget_s=0.02, cpu_threads=1)
    assert panel.run(wait=True, view="generate", size="small", rate_rps=[40.0],
                     duration_s=0.5)
    assert sorted(panel.results["scheduler"]) == ["continuous", "static"]
    assert panel.results[["ttft_p99_ms", "tpot_p99_ms"]].notna().all().all()
    assert not panel.run(wait=True, view="generate", size="tiny", rate_rps=[40.0])
    assert "longer than the tiny preset's context of 32" in panel.status_text


def test_the_online_tune_view_says_its_goodput_and_the_closed_loop_choice():
    panel = ServingExplorer(model="mlp", requests=100, budget_s=0.02, cpu_threads=1)
    assert panel.run(wait=True, view="tune", p99_target_ms=50.0, max_batch=[1, 4],
                     duration_s=0.1)  # each rate still lasts for 120 requests at least
    outcome = panel.tune_outcome
    assert outcome.winner is not None, outcome.summary()
    text = panel.tune_text.value
    assert "goodput" in text and "closed-loop choice" in text and "the code to paste" in text
    assert {"goodput", "target", "p99"} <= {line.get_gid() for line in panel.figure.axes[0].lines}
    assert panel.progress.value == panel.progress.max > 1


def test_a_target_typed_as_0_is_refused_not_clamped():
    panel = ServingExplorer(requests=100, budget_s=0.02, cpu_threads=1)
    panel.view.value = "tune"
    panel.controls["p99_target_ms"].value = 0  # typed into its box
    assert not panel.run(wait=True)
    assert "p99_target_ms=0.0 must be a finite number > 0" in panel.status_text
    assert panel.results.empty


def test_a_tune_with_nothing_re_measured_says_so():
    panel = ServingExplorer(requests=100, budget_s=0.02, cpu_threads=1)
    assert panel.run(wait=True, view="tune", p99_target_ms=0.01, max_batch=[1],
                     offline=True)
    text = panel.tune_text.value
    assert "nothing was measured again" in text and "over the target" in text
    assert "batch 1, fp32" in text  # the configs dropped are named
    assert "No config met the target" in panel.status_text and "crimson" not in \
        panel.status.value and "darkorange" in panel.status.value  # a warning, never green


@pytest.mark.parametrize("values, says", [
    ({"batch_size": [0]}, "batch_size=0 must be a positive int"),
    ({"precision": "fp8"}, "precision='fp8' is not a serving precision"),
    ({"view": "tune", "p99_target_ms": 0}, "p99_target_ms=0 must be a finite number > 0"),
    ({"graphs": True}, "needs a CUDA device"),
    ({"view": "load", "load": [0]}, "load=0 must be a finite number > 0"),
    ({"view": "load", "max_delay_ms": -1}, "max_delay_ms=-1 must be a finite number >= 0"),
    ({"view": "load", "max_batch": 0}, "max_batch=0 must be a positive int"),
    ({"view": "load", "duration_s": 0}, "duration_s=0 must be a finite number > 0"),
    ({"view": "load", "arrival": "gamma", "burstiness": 0}, "burstiness=0 must be"),
    ({"view": "load", "arrival": "bursty"}, "'bursty' is not a choice"),
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


def test_the_histograms_percentiles_are_named_in_a_legend_never_overlapping_labels():
    """p50, p90 and p99 close together once wrote their labels on top of each other."""
    panel = ServingExplorer(requests=100, budget_s=0.02, cpu_threads=1)
    assert panel.run(wait=True, batch_size=[1])
    histogram = panel.figure.axes[1]
    labels = [t.get_text() for t in histogram.get_legend().get_texts()]
    assert [label.split()[0] for label in labels] == ["p50", "p90", "p99"]
    assert not [t for t in histogram.texts if t.get_text().startswith("p")]  # no loose labels
