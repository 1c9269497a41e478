"""The generic Explorer panel driven headless: controls, Run/Stop clicks, status, plots."""

import threading
import time

import pytest

from a800lab.core.results import read_records
from a800lab.widgets import Explorer, Range
from a800lab.widgets.params import Choice, Fixed, as_param


def step(batch_size, precision, accum_steps=1):
    if accum_steps < 1:
        raise ValueError(f"accum_steps={accum_steps} must be >= 1")
    if precision not in ("fp32", "bf16"):
        raise ValueError(f"unknown precision {precision!r}")
    return {"throughput": 10.0 * batch_size * (2 if precision == "bf16" else 1),
            "throughput_unit": "samples/s", "loss": 0.5}


def panel(**kw):
    return Explorer(step, params={"batch_size": Range(1, 64, default=8),
                                  "precision": ["fp32", "bf16"],
                                  "accum_steps": Range(0, 4, default=1)},
                    sweep="batch_size", **kw)


def wait_until(predicate, timeout_s=20):
    deadline = time.time() + timeout_s
    while not predicate():
        assert time.time() < deadline, "timed out"
        time.sleep(0.01)


def test_controls_follow_param_specs():
    p = panel()
    assert type(p.controls["precision"]).__name__ == "ToggleButtons"
    assert type(p.controls["batch_size"]).__name__ == "IntSlider"
    assert p.controls["batch_size"].disabled  # it is the sweep axis
    assert p.sweep_values.value == "1, 2, 4, 8, 16, 32, 64"
    p.sweep_axis.value = "precision"
    assert p.sweep_values.value == "fp32, bf16" and not p.controls["batch_size"].disabled
    assert isinstance(as_param(["a"] * 1), Choice) and isinstance(as_param(3), Fixed)
    many = Choice(tuple(f"option-{i}" for i in range(10)))
    assert type(many.control("x")).__name__ == "Dropdown"


def test_click_run_measures_plots_and_tabulates():
    p = panel()
    p.sweep_values.value = "2, 4, 8"
    p.controls["precision"].value = "bf16"
    p.run_button.click()
    p.wait()
    df = p.results
    assert list(df["batch_size"]) == [2, 4, 8] and set(df["precision"]) == {"bf16"}
    assert list(df["throughput"]) == [40.0, 80.0, 160.0]
    assert (p.progress.value, p.progress.max) == (3, 3)
    assert p.status_text.startswith("Done: 3 points (3 ok)")
    assert bytes(p.plot.value).startswith(b"\x89PNG")
    left = p.figure.axes[0]
    (line,) = [ln for ln in left.get_lines() if len(ln.get_xdata()) == 3]
    assert list(line.get_ydata()) == [40.0, 80.0, 160.0]
    assert "<td>bf16</td>" in p.table.value
    assert not p.run_button.disabled and p.stop_button.disabled


def test_changing_a_control_and_running_again_adds_a_series():
    p = panel()
    p.run(wait=True, batch_size=[1, 2])
    p.controls["precision"].value = "bf16"
    p.run(wait=True, batch_size=[1, 2])
    p.color_by.value = "precision"  # only re-plots
    lines = [ln for ln in p.figure.axes[0].get_lines() if len(ln.get_xdata()) == 2]
    assert sorted(tuple(ln.get_ydata()) for ln in lines) == [(10.0, 20.0), (20.0, 40.0)]
    assert len(p.results) == 4


def test_default_series_separate_runs_that_differ_in_a_control():
    p = panel()
    assert p.plot.layout.display == "none"  # no broken picture before the first plot
    p.run(wait=True, batch_size=[1, 2])
    p.controls["precision"].value = "bf16"
    p.run(wait=True, batch_size=[1, 2])
    assert p.plot.layout.display is None
    left, right = p.figure.axes[:2]
    legend = sorted(t.get_text() for t in left.get_legend().get_texts())
    assert legend == ["precision=bf16", "precision=fp32"]
    # CPU points carry the process's resident set as their memory reading
    rss_lines = [ln for ln in right.get_lines() if "process RSS" in ln.get_label()]
    assert len(rss_lines) == 2 and all(min(ln.get_ydata()) > 0 for ln in rss_lines)


def test_bad_input_is_a_status_message_and_keeps_points():
    p = panel()
    p.run(wait=True, batch_size=[4])
    p.sweep_values.value = " , "
    assert not p.run()
    assert "has no values" in p.status_text
    p.sweep_values.value = "4, 100"
    assert not p.run()
    assert "batch_size=100 is outside the allowed range 1..64" in p.status_text
    p.sweep_axis.value = "precision"
    p.sweep_values.value = "fp32, fp99"
    assert not p.run()
    assert "'fp99' is not a valid value; choose from fp32, bf16" in p.status_text
    assert not p.run(precision="fp99")
    assert "'fp99' is not a valid value" in p.status_text
    assert not p.run(batch_size=2.5)
    assert "2.5 is not an integer" in p.status_text
    assert not p.run(batch_sizes=[1])
    assert "unknown parameter(s) ['batch_sizes']" in p.status_text
    assert len(p.results) == 1  # nothing lost


def test_workload_errors_and_missing_throughput_are_reported():
    p = panel()
    p.run(wait=True, batch_size=[4])
    p.controls["accum_steps"].value = 0  # the workload itself rejects it
    p.run(wait=True, batch_size=[2])
    assert "accum_steps=0" in p.status_text and "must be >= 1" in p.status_text
    silent = Explorer(lambda n: {"loss": 1.0}, params={"n": [1, 2]})
    silent.run(wait=True)
    assert "no usable throughput" in silent.status_text
    assert list(silent.results["outcome"]) == ["error", "error"]
    assert list(p.results["outcome"]) == ["ok", "error"]


def test_run_during_run_is_refused_and_stop_ends_after_current_point():
    gate, started = threading.Event(), []

    def slow(n):
        started.append(n)
        gate.wait(5)
        return {"throughput": float(n)}

    p = Explorer(slow, params={"n": Range(1, 100)}, sweep="n")
    p.sweep_values.value = ", ".join(str(i) for i in range(1, 21))
    p.run_button.click()
    wait_until(lambda: len(started) == 1)
    assert not p.run()
    assert "already in progress" in p.status_text
    p.stop_button.click()
    gate.set()
    p.wait()
    assert len(started) == 1 and len(p.results) == 1
    assert p.status_text.startswith("Stopped after 1 of 20 points")
    assert p.progress_text.value == "1/20 points, stopped"
    assert not p.run_button.disabled


def test_exception_in_the_sweep_lands_in_status(monkeypatch):
    from a800lab.widgets import explorer

    def broken(*args, **kwargs):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(explorer, "run_sweep", broken)
    p = panel()
    p.run(wait=True)
    assert p.status_text == "Run failed: RuntimeError: disk on fire"
    assert not p.run_button.disabled


def test_save_load_and_overlay(tmp_path):
    p = panel(out=str(tmp_path / "mine.jsonl"))
    p.run(wait=True, batch_size=[1, 2])
    p.save_button.click()
    assert len(read_records(tmp_path / "mine.jsonl")) == 2
    p.run(wait=True, batch_size=[4])
    assert p.save() == 1  # only the new point: saving twice writes nothing twice
    assert p.status_text.startswith("Saved 1 new points")
    assert [r.params["batch_size"] for r in read_records(tmp_path / "mine.jsonl")] == [1, 2, 4]
    q = panel(recorded_dir=tmp_path)
    assert q.recorded.options == (str(tmp_path / "mine.jsonl"),)
    q.recorded.value = q.recorded.options
    labels = [t.get_text() for t in q.figure.axes[0].get_legend().get_texts()]
    assert any("CPU" in label for label in labels)
    q.path.value = str(tmp_path)
    q.load_button.click()
    assert "is a directory" in q.status_text
    q.path.value = str(tmp_path / "mine.jsonl")
    q.load_button.click()
    assert len(q.results) == 3 and q.status_text.startswith("Loaded 3 points")
    assert q.save() == 0  # loaded from that very file


def test_float_ranges_keep_exact_values():
    p = Explorer(lambda lr: {"throughput": 1.0 / lr}, params={"lr": Range(0.0, 1.0, 0.001)},
                 sweep="lr")
    p.run(wait=True, lr=[0.123456789])
    assert p.results["lr"].tolist() == [0.123456789]


def test_constructor_errors():
    with pytest.raises(ValueError, match="at least one parameter"):
        Explorer(step, params={})
    with pytest.raises(ValueError, match="sweep='seq' is not a variable parameter"):
        Explorer(step, params={"seq": 4, "n": [1]}, sweep="seq")
    with pytest.raises(ValueError, match=r"\['label'\] are reserved"):
        Explorer(step, params={"label": ["a"]})
