"""TrainingExplorer driven headless: presets and user models, runs, the max-batch search."""

import re
import time

import pytest
import torch
from torch import nn

from a800lab.widgets import TrainingExplorer
from a800lab.workloads.training import max_batch as max_batch_module


def _my_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))


def _my_batch(batch_size):
    return torch.randn(batch_size, 8), torch.randint(0, 3, (batch_size,))


@pytest.fixture(scope="module")
def preset_panel():
    return TrainingExplorer(model="mlp", device="cpu", cpu_threads=1, train_steps=3,
                            budget_s=0.01)


def test_controls_are_the_training_spec(preset_panel):
    p = preset_panel
    assert list(p.params) == ["model", "size", "batch_size", "accum_steps", "precision",
                              "optimizer", "checkpointing", "compile", "optimizer_impl",
                              "attention", "channels_last", "cudnn_benchmark"]
    assert p.controls["compile"].value == "off"  # a CPU's first compile takes ~30 s
    assert p.controls["size"].value == "tiny" and p.controls["precision"].value == "fp32"
    assert "tf32" not in p.controls["precision"].options  # a CUDA mode: not offered on a CPU
    assert p.sweep_axis.value == "batch_size"


def test_a_run_plots_throughput_memory_and_loss(preset_panel):
    p = preset_panel
    assert p.run(wait=True, batch_size=[4, 8], accum_steps=2)
    assert p.status_text.startswith("Done: 2 points (2 ok)")
    df = p.results
    assert list(df["effective_batch"]) == [8, 16]
    assert (df["step_peak_bytes"] > 0).all() and (df["predicted_peak_bytes"] > 0).all()
    titles = [ax.get_title() for ax in p.figure.axes]
    assert any("CPU fallback" in t for t in titles)
    assert "memory breakdown vs batch_size" in titles
    assert "training loss per optimizer step" in titles
    # the measured columns first, with units; the rest behind the toggle
    shown, rest = p.table.value.split("<details>")
    heads = re.findall(r"<th>(.*?)</th>", shown)
    assert heads == ["run", "batch_size", "throughput (samples/s)", "step peak (MiB)",
                     "predicted peak (MiB)", "eval loss", "accuracy (%)", "noisy"]
    assert "<summary><small>all columns" in rest and "<th>median (ms)</th>" in rest
    assert "<th>effective batch (samples)</th>" in rest and "<th>precision</th>" in rest


def test_bad_values_are_refused_before_anything_runs(preset_panel):
    p = preset_panel
    before = len(p.records)
    assert not p.run(batch_size=[0])
    assert "Cannot run: batch_size=0 must be a positive int" in p.status_text
    assert not p.find_max_batch(limit_mib=-1)
    assert "Cannot search: limit_mib=-1 must be >= 0" in p.status_text
    assert len(p.records) == before


def test_find_max_batch_answers_and_draws(preset_panel):
    p = preset_panel
    assert p.find_max_batch(wait=True, target_batch=1000, limit_mib=4, model="transformer")
    result = p.max_batch_result
    assert result.batch_size > 1 and result.verified.fits
    assert result.plan.effective_batch == 1000
    assert p.status_text.startswith("Largest micro-batch: ")
    assert "largest micro-batch" in p.max_batch_text.value
    assert p.max_batch_plot.layout.display is None and p.max_batch_plot.value
    assert not p.run_button.disabled and not p.find_button.disabled


def test_stop_ends_a_search_between_trials(monkeypatch):
    p = TrainingExplorer(model="mlp", device="cpu", cpu_threads=1)
    original = max_batch_module.find_max_batch

    def slow(trial, **kw):
        def slow_trial(*args):
            time.sleep(0.2)
            return trial(*args)
        return original(slow_trial, **kw)

    monkeypatch.setattr(max_batch_module, "find_max_batch", slow)
    assert p.find_max_batch(limit_mib=4)
    assert not p.run(batch_size=[4])  # one thing at a time
    p.stop()
    p.job.wait(10)
    assert "Max-batch search stopped after" in p.status_text
    assert p.max_batch_result is None and not p.run_button.disabled


def test_a_user_model_runs_with_its_own_loss():
    p = TrainingExplorer(make_model=_my_model, make_batch=_my_batch,
                         loss_fn=nn.functional.cross_entropy, device="cpu", cpu_threads=1,
                         train_steps=2, budget_s=0.01)
    assert p.controls["model"].value == "custom" and p.controls["model"].disabled
    assert p.run(wait=True, batch_size=[4])
    row = p.results.iloc[0]
    assert row["outcome"] == "ok" and row["model"] == "custom" and row["param_count"] == 195


def test_user_model_mistakes_are_said_when_the_panel_is_built():
    """The dry run's fault is the status line (the file and the fault); Run refuses with it.
    tests/test_user_model_faults.py drives every fault through every panel and command."""
    p = TrainingExplorer(make_model=lambda: nn.Linear(5, 3), make_batch=_my_batch,
                         device="cpu")
    assert p.status_text.startswith("your model (tests/test_training_explorer.py): the model "
                                    "raised on a batch of 2 from make_batch: RuntimeError: ")
    assert not p.run(wait=True) and p.results.empty
    p = TrainingExplorer(make_model=_my_model, device="cpu",
                         make_batch=lambda b: (torch.randn(b, 8), torch.zeros(b + 1)))
    assert "make_batch(2) returned targets of shape (3,)" in p.status_text
    with pytest.raises(ValueError, match="needs both make_model= and make_batch="):
        TrainingExplorer(make_model=_my_model, device="cpu")
    with pytest.raises(ValueError, match="not both"):
        TrainingExplorer(make_model=_my_model, make_batch=_my_batch, user_model="m.py")


def test_the_caption_names_the_three_plots():
    from a800lab.widgets import TrainingExplorer

    panel = TrainingExplorer()
    assert panel._figure_title("batch_size").startswith("samples/s, memory breakdown")


def test_profile_view_adds_a_bar_per_profile_and_shows_a_timeline(preset_panel):
    p = preset_panel
    assert p.profile(wait=True, batch_size=4, accum_steps=1, steps=2)
    assert p.profile(wait=True, batch_size=64, accum_steps=1, steps=2)
    assert [r.spec["batch_size"] for r in p.profiles[-2:]] == [4, 64]
    assert p.status_text.startswith("Profiled: CPU mode (no device)")
    assert "CPU inside ops" in p.profile_box.text.value and "top op 1" in p.profile_box.text.value
    bars, timeline = p.profile_box.figure.axes[:2]
    assert [t.get_text() for t in bars.get_xticklabels()][-2:] == ["b=4 fp32", "b=64 fp32"]
    assert "one step's timeline (b=64 fp32" in timeline.get_title()
    assert p.profile_box.plot.layout.display is None and not p.run_button.disabled
    assert p.controls["batch_size"].value == 64  # the controls show what was profiled


def test_profile_draws_the_memory_timeline_of_your_model(monkeypatch):
    p = TrainingExplorer(make_model=_my_model, make_batch=_my_batch, device="cpu",
                         cpu_threads=1)
    assert p.profile(wait=True, batch_size=4, steps=1, memory=True)
    memory = p.profiles[-1].memory
    params = sum(q.numel() * 4 for q in _my_model().parameters())
    assert memory.largest("parameter") == memory.largest("gradient") == params
    assert "memory peak" in p.profile_box.text.value
    ax = p.profile_box.memory_figure.axes[0]
    assert "torch's memory profiler" in ax.get_title()
    assert "CPU fallback" in p.profile_box.memory_figure.get_suptitle()
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert any(t.startswith("parameter: ") and t.endswith(" at the peak") for t in labels)
    assert p.profile_box.memory_plot.layout.display is None
    import torch.profiler._memory_profiler as private
    monkeypatch.delattr(private, "MemoryProfileTimeline")
    p.profile(wait=True, batch_size=4, steps=1, memory=True)
    assert "changed its private memory profiler" in p.status_text


@pytest.mark.usefixtures("quiet_cpu")  # contention must not decide whether it is stored
def test_tune_button_shows_the_winner_frontier_and_snippet(preset_panel, tmp_path):
    p = preset_panel
    assert p.tune(wait=True, target_batch=16, budget_s=0.05, store=tmp_path / "t.json",
                  axes={"checkpointing": [False], "optimizer_impl": ["foreach", "fused"]})
    outcome = p.tune_outcome
    assert outcome.winner["batch_size"] * outcome.winner["accum_steps"] == 16
    assert p.status_text.startswith("Tuned: fp32, ")
    assert p.tabs.titles[p.tabs.selected_index] == "Tune"  # where its result is drawn
    assert "trial " in p.progress_text.value and " samples/s" in p.progress_text.value
    assert "optimizer.zero_grad(set_to_none=True)" in p.tune_box.snippet.value
    assert p.tune_box.plot.value and not p.tune_box.button.disabled
    assert not p.tune(target_batch=0)
    assert "Cannot tune: target_batch=0 must be a positive int" in p.status_text
    assert not p.profile(batch_size=0)
    assert "Cannot profile: batch_size=0 must be a positive int" in p.status_text


def test_mfu_columns_and_a_hint_when_no_peak_is_known(preset_panel, tmp_path, monkeypatch):
    monkeypatch.setenv("A800LAB_PEAKS", str(tmp_path / "peaks.json"))
    p = preset_panel
    assert p.run(wait=True, batch_size=[4])
    assert "<th>achieved (TFLOP/s)</th>" in p.table.value
    assert "MFU: no peak known for this device" in p.table.value


def test_the_panel_fits_a_notebook_output(preset_panel):
    """Sections as tabs, not one long column; every label whole (not "accum_st...")."""
    p = preset_panel
    assert p.tabs.titles == ("Run", "Max batch", "Tune", "Profile")
    run_tab = p.tabs.children[0]
    assert p.controls["accum_steps"] in run_tab.children[0].children
    widths = {c.style.description_width for c in p.controls.values()}
    (width,) = widths  # aligned, and wide enough for "optimizer_impl"
    assert float(width.removesuffix("em")) >= 0.6 * len("optimizer_impl")
    # toggle buttons render as a block: the inline row keeps the label beside them
    assert "widget-inline-hbox" in p.controls["channels_last"]._dom_classes
    for box in (p.target_batch, p.limit_mib, p.find_button, p.tune_box.button):
        assert box.layout.width == "auto"
