"""The generic Explorer panel driven headless: controls, Run/Stop/Clear clicks, status, plots."""

import itertools
import math
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

from a800lab.core.environment import environment
from a800lab.core.noise import default_cpu_threads
from a800lab.core.results import read_records
from a800lab.widgets import Explorer, Range
from a800lab.widgets import explorer as explorer_module
from a800lab.widgets.params import Choice, Fixed, as_param
from a800lab.widgets.redraw import Redrawer

REPO = Path(__file__).resolve().parents[1]
CPU_NAME = environment("cpu")["device_name"]


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


def data_lines(ax):
    return [ln for ln in ax.get_lines() if ln.get_gid() == "data"]


def legend_labels(fig):
    return [" ".join(t.get_text().split()) for leg in fig.legends for t in leg.get_texts()]


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
    (line,) = data_lines(p.figure.axes[0])
    assert list(line.get_ydata()) == [40.0, 80.0, 160.0]
    assert "<td>bf16</td>" in p.table.value
    assert not p.run_button.disabled and p.stop_button.disabled


def test_changing_a_control_and_running_again_adds_a_series():
    p = panel()
    p.run(wait=True, batch_size=[1, 2])
    p.controls["precision"].value = "bf16"
    p.run(wait=True, batch_size=[1, 2])
    p.color_by.value = "precision"  # only re-plots
    lines = data_lines(p.figure.axes[0])
    assert sorted(tuple(ln.get_ydata()) for ln in lines) == [(10.0, 20.0), (20.0, 40.0)]
    assert len(p.results) == 4


def test_default_series_separate_runs_that_differ_in_a_control():
    p = panel()
    assert p.plot.layout.display == "none"  # no broken picture before the first plot
    p.run(wait=True, batch_size=[1, 2])
    p.controls["precision"].value = "bf16"
    p.run(wait=True, batch_size=[1, 2])
    assert p.plot.layout.display is None
    labels = legend_labels(p.figure)
    assert "precision=bf16" in labels and "precision=fp32" in labels
    # CPU points carry the workload's own peak resident set (bytes above the point's start)
    memory = data_lines(p.figure.axes[1])
    assert len(memory) == 2 and all(min(ln.get_ydata()) >= 0 for ln in memory)


def counting_step():
    """A workload whose throughput differs on every call: runs must never be averaged."""
    calls = itertools.count(1)

    def measured(n):
        return {"throughput": float(next(calls) * 100 + n), "throughput_unit": "items/s"}

    return measured


def test_each_run_has_its_own_id_line_and_table_number():
    p = Explorer(counting_step(), params={"n": Range(1, 4)}, sweep="n")
    p.run(wait=True, n=[1, 2])
    assert "run #1" in p.status_text
    p.run(wait=True, n=[1, 2])
    assert "run #2" in p.status_text
    runs = p.results["run_id"]
    assert runs.nunique() == 2 and runs.iloc[0] < runs.iloc[2]  # ids sort by start time
    lines = sorted(data_lines(p.figure.axes[0]), key=lambda ln: ln.get_alpha())
    assert [list(ln.get_ydata()) for ln in lines] == [[101.0, 202.0], [301.0, 402.0]]
    assert [ln.get_alpha() for ln in lines] == [0.3, 1.0]  # the newest run drawn strongest
    first = p.table.value.split("<details>")[0]  # the table on show; all columns below it
    assert first.count("<td>#1</td>") == 2 and first.count("<td>#2</td>") == 2
    p.earlier_runs.value = "hidden"  # a view change: re-plotted at once, nothing measured
    (line,) = data_lines(p.figure.axes[0])
    assert list(line.get_ydata()) == [301.0, 402.0] and len(p.results) == 4


def test_clear_empties_the_panel_but_not_the_file(tmp_path):
    out = tmp_path / "runs.jsonl"
    p = Explorer(counting_step(), params={"n": Range(1, 4)}, sweep="n", out=str(out))
    p.run(wait=True, n=[1, 2])
    p.save()
    p.run(wait=True, n=[3])
    p.clear_button.click()
    assert p.results.empty and p.figure is None and p.table.value == ""
    assert p.plot.layout.display == "none" and p.caption.layout.display == "none"
    assert p.status_text == ("Cleared 3 points from the panel (saved files keep theirs; 1 had "
                             "not been saved).")
    assert len(read_records(out)) == 2
    p.run(wait=True, n=[4])
    assert list(p.results["n"]) == [4] and "run #" in p.status_text


def test_clear_is_refused_during_a_run():
    gate = threading.Event()
    p = Explorer(lambda n: gate.wait(5) and {"throughput": 1.0}, params={"n": Range(1, 4)},
                 sweep="n")
    p.run(n=[1, 2])
    assert p.clear_button.disabled
    assert p.clear() == 0 and "before Clear" in p.status_text
    gate.set()
    p.wait()
    assert not p.clear_button.disabled and len(p.results) == 2


def test_legend_names_eight_series_and_summarises_the_rest():
    p = Explorer(lambda n, k: {"throughput": float(n + k)},
                 params={"n": Range(1, 4), "k": list(range(11))}, sweep="n")
    for k in range(11):
        p.run(wait=True, n=[1, 2], k=k)
    labels = legend_labels(p.figure)
    assert sum(label.startswith("k=") for label in labels) == 8
    assert "+3 more series (grey): k=0, k=1, ..." in labels


def test_figure_and_caption_name_the_device_mode_and_threads():
    p = panel()
    p.run(wait=True, batch_size=[1, 2])
    threads = default_cpu_threads()
    expected = f"{CPU_NAME} (CPU fallback, {threads} torch thread{'s' * (threads != 1)})"
    assert p.figure.get_suptitle() == expected
    assert expected in p.caption.value.replace("&amp;", "&")
    assert p.caption.value.startswith("<small><b>throughput and peak memory vs batch_size</b>")
    assert f"on CPU fallback, {threads} torch thread" in p.status_text
    assert set(p.results["torch_threads"]) == {threads}


def test_cpu_threads_can_be_chosen_and_are_recorded():
    p = panel(cpu_threads=2)
    p.run(wait=True, batch_size=[1])
    assert list(p.results["torch_threads"]) == [2] and "2 torch threads" in p.status_text
    with pytest.raises(ValueError, match="cpu_threads=0 must be a positive int"):
        panel(cpu_threads=0)


def noisy_step(n):
    """Samples 1..5 ms: the IQR is 100% of the median, so every point is noisy."""
    return {"throughput": float(n), "time_ms": [1.0, 2.0, 3.0, 4.0, 5.0]}


def test_noisy_points_are_counted_marked_and_explained():
    p = Explorer(noisy_step, params={"n": Range(1, 4)}, sweep="n")
    p.run(wait=True, n=[1, 2])
    assert "2 noisy (hollow markers; hover 'noisy' in the table for why: timing spread: IQR" \
        in p.status_text
    assert p.results["noisy"].all()
    (hollow,) = [ln for ln in p.figure.axes[0].get_lines() if ln.get_gid() == "noisy"]
    assert list(hollow.get_xdata()) == [1.0, 2.0] and hollow.get_markerfacecolor() == "white"
    first = p.table.value.split("<details>")[0]
    assert first.count('class="a800lab-noisy" title="timing spread: IQR') == 2


def test_title_follows_a_change_of_sweep_axis_at_once():
    p = panel()
    p.run(wait=True, batch_size=[1, 2])
    p.sweep_axis.value = "precision"
    assert p.figure.axes[0].get_title() == "throughput vs precision"
    assert "vs precision</b>" in p.caption.value


def test_drawing_happens_off_the_measuring_thread_and_coalesces(monkeypatch):
    drawn_on, real = [], explorer_module.throughput_and_memory_figure

    def recording_figure(*args, **kwargs):
        drawn_on.append(threading.current_thread().name)
        return real(*args, **kwargs)

    monkeypatch.setattr(explorer_module, "throughput_and_memory_figure", recording_figure)
    p = Explorer(lambda n: time.sleep(0.01) or {"throughput": float(n)},
                 params={"n": Range(1, 100)}, sweep="n", name="coalesce", device="cpu")
    started = time.monotonic()
    p.run(wait=True, n=list(range(1, 61)))
    wall_s = time.monotonic() - started
    assert len(p.results) == 60
    assert drawn_on and "a800lab-coalesce" not in drawn_on  # never the measuring thread
    assert set(drawn_on) == {"a800lab-draw-coalesce"}
    # 60 points in ~0.6 s: a few draws, not 60; on a CPU a live picture a second at most (the
    # browser paints each one on the cores being measured), plus the final one
    assert len(drawn_on) <= wall_s / 1.0 + 2, (len(drawn_on), wall_s)
    (line,) = data_lines(p.figure.axes[0])
    assert len(line.get_xdata()) == 60  # the last draw shows every point


def test_redrawer_coalesces_rate_limits_and_survives_a_failing_draw():
    calls, errors = [], []

    def draw():
        calls.append(time.monotonic())
        if len(calls) == 1:
            raise RuntimeError("first draw fails")

    drawer = Redrawer(draw, min_interval_s=1.0, on_error=errors.append)
    for _ in range(50):  # a burst from the measuring thread: a draw or two, not 50
        drawer.request()
    assert drawer.flush(5)
    assert 1 <= len(calls) <= 2 and [str(e) for e in errors] == ["first draw fails"]
    drawer.request()
    drawer.request()
    time.sleep(0.05)
    assert len(calls) <= 2  # the next plain request waits out the interval
    assert drawer.flush(5) and len(calls) <= 3  # flush draws at once, both requests in one
    assert drawer.draws == len(calls)


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


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan])
def test_non_finite_values_are_refused_naming_the_parameter(value):
    for spec in (Range(1, 64), Range(0.0, 1.0, 0.01)):
        p = Explorer(lambda x: {"throughput": 1.0}, params={"x": spec}, sweep="x")
        assert not p.run(x=value)  # no OverflowError out of run()
        assert p.status_text == f"Cannot run: x={value!r} is not a finite number; pick values " \
            f"inside {'1..64' if spec.is_int else '0..1'}"
        p.sweep_values.value = "1, inf" if spec.is_int else "0.5, nan"
        assert not p.run() and "Cannot run: x" in p.status_text


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


def test_a_workload_raising_system_exit_ends_the_run_honestly():
    def argparse_inside(n):
        raise SystemExit(2)  # what argparse does on a bad command line

    p = Explorer(argparse_inside, params={"n": Range(1, 4)}, sweep="n")
    p.run(wait=True, n=[1, 2, 3])
    assert p.status_text.startswith("Done: 3 points (3 error)")
    assert "First failure: n=1: error: SystemExit: 2" in p.status_text
    assert not p.run_button.disabled and p.stop_button.disabled and not p.running


def test_keyboard_interrupt_in_a_workload_ends_the_run_and_keeps_the_panel_usable():
    def interrupted(n):
        if n == 2:
            raise KeyboardInterrupt
        return {"throughput": float(n)}

    p = Explorer(interrupted, params={"n": Range(1, 4)}, sweep="n")
    p.run(wait=True, n=[1, 2, 3])
    assert p.status_text == ("Run failed: KeyboardInterrupt (after 1 of 3 points; measured "
                             "points kept)")
    assert p.progress_text.value == "1/3 points, failed"
    assert not p.run_button.disabled and p.stop_button.disabled and not p.clear_button.disabled
    assert p.run(wait=True, n=[1]) and len(p.results) == 2


def test_the_panel_device_reaches_the_workload():
    seen = []

    def records_device(n, device):
        seen.append(device)
        return {"throughput": 1.0, "given_device": device}

    p = Explorer(records_device, params={"n": Range(1, 4)}, sweep="n")
    p.run(wait=True, n=[1, 2])
    assert seen == ["cpu", "cpu"] and p.device == "cpu"
    assert list(p.results["given_device"]) == ["cpu", "cpu"]
    with pytest.raises(ValueError, match="use device='cpu' or 'auto'"):
        Explorer(records_device, params={"n": Range(1, 4)}, device="cuda:1")


def test_a_second_press_of_run_says_it_measures_the_same_values_again():
    """Run pressed twice (the second press landing after the first run ended) is no silent
    second run: the status line says it repeats run #1, while it runs and when done."""
    p = Explorer(lambda n: {"throughput": float(n)}, params={"n": Range(1, 100)}, sweep="n",
                 device="cpu", cpu_threads=1)
    p.sweep_values.value = "1, 2"
    p.run_button.click()
    p.wait()
    assert "same values" not in p.status_text
    p.run_button.click()
    p.wait()
    assert p.status_text.startswith("Done: 2 points (2 ok)") and "run #2" in p.status_text
    assert p.status_text.endswith("The same values as run #1: Run was pressed again, and each "
                                  "press measures a run of its own (Stop ends it; Clear drops "
                                  "earlier runs).")
    assert p.run(wait=True, n=[3]) and "same values" not in p.status_text


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
    assert p.status_text.endswith("Stop came with 0 done; the point in flight was finished.")
    assert not p.run_button.disabled


def test_exception_in_the_sweep_lands_in_status(monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(explorer_module, "run_sweep", broken)
    p = panel()
    p.run(wait=True)
    assert p.status_text == ("Run failed: RuntimeError: disk on fire (after 0 of 7 points; "
                             "measured points kept)")
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
    assert "1 recorded run file(s)" in q.overlay_hint.value
    q.recorded.value = q.recorded.options
    assert CPU_NAME in q.figure.get_suptitle()
    q.path.value = str(tmp_path)
    q.load_button.click()
    assert "is a directory" in q.status_text
    q.path.value = str(tmp_path / "mine.jsonl")
    q.load_button.click()
    assert len(q.results) == 3 and q.status_text.startswith("Loaded 3 points")
    assert q.save() == 0  # loaded from that very file


def test_load_after_save_adds_nothing_twice(tmp_path):
    out = tmp_path / "runs.jsonl"
    p = panel(out=str(out))
    p.run(wait=True, batch_size=[1, 2])
    p.save()
    assert p.load() == 0 and len(p.results) == 2
    assert p.status_text == f"Loaded 0 points from {out} (2 already in the panel, skipped)."
    q = panel()
    assert q.load(str(out)) == 2 and q.load(str(out)) == 0 and len(q.results) == 2


def test_saves_go_under_runs_which_git_ignores():
    p = panel()
    assert p.path.value == "runs/step.jsonl"
    assert "No recorded runs" in panel(recorded_dir="/nonexistent").overlay_hint.value
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    ignored = ["notebooks/runs/step.jsonl", "notebooks/runs.jsonl", "runs/x.jsonl"]
    kept = ["data/a800-sxm4.jsonl"]
    proc = subprocess.run(["git", "check-ignore", "--no-index", *ignored, *kept], cwd=REPO,
                          capture_output=True, text=True)
    assert proc.stdout.split() == ignored


def test_float_ranges_keep_exact_values():
    p = Explorer(lambda lr: {"throughput": 1.0 / lr}, params={"lr": Range(0.0, 1.0, 0.001)},
                 sweep="lr")
    p.run(wait=True, lr=[0.123456789])
    assert p.results["lr"].tolist() == [0.123456789]


def test_constructor_errors():
    with pytest.raises(ValueError, match="at least one parameter"):
        Explorer(step, params={})
    with pytest.raises(ValueError, match="sweep='precision' is not a variable parameter"):
        Explorer(step, params={"precision": "fp32", "batch_size": [1]}, sweep="precision")
    with pytest.raises(ValueError, match=r"\['throughput'\] are reserved by the results table "
                                         "for what a point measured"):
        Explorer(lambda throughput: {}, params={"throughput": ["a"]})
    with pytest.raises(ValueError, match="parameter 'batch_size' has an empty list of choices"):
        Explorer(step, params={"batch_size": [], "precision": ["fp32"]})
    with pytest.raises(ValueError, match="Range hi=inf must be a finite number"):
        Explorer(step, params={"batch_size": Range(1, math.inf), "precision": ["fp32"]})


def test_workload_signature_is_checked_against_params():
    with pytest.raises(ValueError, match=(
            r"the workload step\(batch_size, precision, accum_steps=1\) does not match params "
            r"\['batch', 'precision'\]: it takes no argument\(s\) \['batch'\]: rename them in "
            r"params.*it needs argument\(s\) \['batch_size'\] that params does not give")):
        Explorer(step, params={"batch": [1], "precision": ["fp32"]})
    # a device argument is the sweep's to fill; **kwargs takes anything
    Explorer(lambda n, device: {}, params={"n": [1]})
    Explorer(lambda **kw: {}, params={"n": [1]})
    Explorer(max, params={"n": [1]})  # a builtin without a readable signature: not checked


def test_ordinary_parameter_names_are_the_users(tmp_path):
    """mode, label, message, workload and fingerprint name the record's own columns too: as
    parameters they run, save, load and plot, and sit in the frame as param.<name>."""
    def f(mode, label, n, message, workload, fingerprint):
        return {"throughput": n * (2 if mode == "fast" else 1), "throughput_unit": "items/s"}

    p = Explorer(f, params={"mode": ["fast", "slow"], "label": ["mine"], "n": Range(1, 64),
                            "message": ["hi"], "workload": ["w"], "fingerprint": ["fp"]},
                 sweep="n", device="cpu")
    assert p.run(wait=True, n=[2, 4], mode="slow")
    assert p.run(wait=True, n=[2, 4], mode="fast")
    df = p.results
    assert (df["outcome"] == "ok").all() and len(df) == 4
    assert list(df["param.mode"]) == ["slow", "slow", "fast", "fast"]
    assert set(df["param.label"]) == {"mine"} and set(df["param.message"]) == {"hi"}
    assert set(df["mode"]) == {"CPU fallback"} and set(df["workload"]) == {"f"}
    assert p.figure is not None and "fast" in p.table.value
    assert "<th>mode</th>" in p.table.value and "<th>label</th>" in p.table.value
    path = tmp_path / "mine.jsonl"
    assert p.save(str(path)) == 4
    q = Explorer(f, params={"mode": ["fast", "slow"], "label": ["mine"], "n": Range(1, 64),
                            "message": ["hi"], "workload": ["w"], "fingerprint": ["fp"]},
                 sweep="n", device="cpu")
    assert q.load(str(path)) == 4
    assert q.figure is not None
    legend = [t.get_text() for leg in q.figure.legends for t in leg.get_texts()]
    assert any("mode=fast" in text for text in legend) and any("mode=slow" in text
                                                               for text in legend)
    p.color_by.value = "param.mode"  # colour by the user's mode, not the record's
    p.refresh()
    assert p.figure is not None


def test_controls_show_what_a_programmatic_run_used():
    """run(batch_size=[...], precision=...) moves the controls and the values box to what ran;
    a control changed afterwards is named in the caption beside the points that differ."""
    p = Explorer(step, params={"batch_size": Range(1, 512, default=32, scale="pow2"),
                               "precision": ["fp32", "bf16"]}, sweep="batch_size",
                 device="cpu")
    assert p.run(wait=True, batch_size=[4, 48], precision="bf16")
    assert p.sweep_values.value == "4, 48" and p.controls["precision"].value == "bf16"
    p.sweep_axis.value = "precision"  # the batch slider now matters: it must read what ran
    assert p.run(wait=True, batch_size=48, precision=["fp32"])
    assert p.controls["batch_size"].value == 48  # 48 is no power of two: the slider gained it
    assert "these points ran at" not in p.caption.value
    p.controls["batch_size"].value = 32  # the user moves the slider without running
    p.refresh()
    assert "these points ran at batch_size=48 (the control reads 32)" in p.caption.value


def test_the_caption_names_no_parameter_the_newest_run_did_not_have():
    """Chapter 08's caption read "these points ran at op=nan (the control reads all_reduce);
    size_bytes=nan ..." for a DDP run that has no op or size."""
    from types import SimpleNamespace

    import pandas as pd

    from a800lab.widgets.explorer_text import fixed_differences

    measured = pd.DataFrame({"run_id": ["r1", "r2", "r2"], "op": ["all_reduce", None, None],
                             "size_bytes": [1024, float("nan"), float("nan")],
                             "hook": [None, "fp16", "powersgd"], "accum_steps": [None, 2, 2]})
    controls = {name: SimpleNamespace(value=value) for name, value in (
        ("op", "all_reduce"), ("size_bytes", 4096), ("hook", "none"), ("accum_steps", 1))}
    assert fixed_differences(measured, {}, controls, "hook") == \
        "; these points ran at accum_steps=2 (the control reads 1)"
