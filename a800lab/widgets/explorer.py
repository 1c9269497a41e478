"""The generic panel: vary a workload's parameters, press Run, watch throughput and memory grow.

    panel = Explorer(step, params={"batch_size": Range(1, 256, scale="pow2")}, sweep="batch_size")
    panel.run(wait=True, batch_size=[8, 16, 32])          # the Run button in code
    panel.results                                         # pandas DataFrame, one row per point
"""

import html
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path

import ipywidgets as widgets
import pandas as pd

from ..core.backends import resolve_device
from ..core.results import (
    check_param_names,
    new_run_id,
    param_column,
    read_records,
    records_to_frame,
)
from ..core.sweep import SweepResult, first_line, run_sweep
from ..figures.look import EARLIER_RUNS, describe_devices
from ..figures.sweep import throughput_and_memory_figure
from . import explorer_text as text
from .layout import explorer_layout, show_section
from .panel import Panel, png
from .panel_records import PanelRecords
from .params import Fixed, as_param, axis_values, check_signature, format_param, plan_run
from .redraw import CPU_MIN_INTERVAL_S, CPU_REST_FACTOR, Redrawer

NO_SWEEP = "(single point)"
AUTO_SERIES = "(what differs)"  # one line per device label and per value of any other control
DATA_DIR = Path(__file__).resolve().parents[2] / "data"  # recorded runs in a source checkout
CPU_COALESCING = {"min_interval_s": CPU_MIN_INTERVAL_S, "rest_factor": CPU_REST_FACTOR}


@dataclass(frozen=True)
class View:
    """One view of a panel with several. `title` may name {x}; `params`: the controls it uses
    (() for all); `workload`: its points' (None: all); `series`: the parameters that tell its
    series apart (() for `params`); `columns`: its table's measured columns."""

    label: str
    title: str
    axis: str | None = None
    params: tuple[str, ...] = ()
    values: tuple = ()
    workload: str | None = None
    series: tuple[str, ...] = ()
    columns: tuple[str, ...] = ()


class Explorer(Panel):
    """A panel over your own workload: controls, Run / Stop / Clear, a live plot of throughput
    and peak memory, a results table, Save / Load and overlays of recorded runs.

    `workload(**params)` returns a dict with `throughput` (or `throughput_key`),
    `throughput_unit` and `timing` (core.timing.measure) or `time_ms`; other keys are stored as
    metrics. `params` maps each name to a list (a choice), a Range or a plain value (fixed);
    `sweep` names the one a Run sweeps. `device`: "auto", "cpu", "cuda" or "cuda:N";
    `cpu_threads`: torch's threads during a run (on a CPU: all usable cores but one).

    A panel built on this one passes its parts: `figure(df, x, series=, earlier_runs=)`,
    `figure_title` ("... vs {x}"), `table_columns` (measured, more), `views` {key: View} and
    `extras` {slot: [widgets]} (see layout.SLOTS).
    """

    def __init__(self, workload, params: dict, *, sweep: str | None = None,
                 throughput_key: str | None = None, name: str | None = None,
                 device: str = "auto", cpu_threads: int | None = None, title: str = "",
                 recorded_dir: Path | str = DATA_DIR, out: str | None = None,
                 figure=None, figure_title: str = "throughput and peak memory vs {x}",
                 table_columns: tuple = (text.MEASURED, ()), views: dict | None = None,
                 extras: dict | None = None):
        if not params:
            raise ValueError("Explorer needs at least one parameter, e.g. params={'n': [1, 2]}")
        check_param_names(params)
        check_signature(workload, list(params))
        self.workload, self.throughput_key = workload, throughput_key
        self.name = name or getattr(workload, "__name__", "custom")
        self.params = {key: as_param(spec, key) for key, spec in params.items()}
        self.device = resolve_device(device)
        self.torch_threads = text.panel_threads(self.device, cpu_threads)
        self.views = views or {}
        self._figure_of, self._title, self._columns = figure, figure_title, table_columns
        self._held, self._overlay = PanelRecords(), pd.DataFrame()
        self.figure = self._stopped_at = None
        self._last_run: tuple[str, str] = ("", "")  # (what the last Run measured, its run id)
        self._drawer = Redrawer(self._draw, name=f"a800lab-draw-{self.name}",
                                **(CPU_COALESCING if self.device == "cpu" else {}),
                                on_error=lambda exc: self.status.say(
                                    f"Plot failed: {type(exc).__name__}: {exc}", "error"))
        self._build(sweep, title, Path(recorded_dir), out or f"runs/{self.name}.jsonl",
                    extras or {})

    def _build(self, sweep, title, recorded_dir, out, extras) -> None:
        self.controls = {key: spec.control(key) for key, spec in self.params.items()}
        sweepable = [k for k, s in self.params.items() if not isinstance(s, Fixed)]
        if sweep is not None and sweep not in sweepable:
            raise ValueError(f"sweep={sweep!r} is not a variable parameter; choose one of "
                             f"{sweepable}")
        self.sweep_axis = widgets.Dropdown(options=[NO_SWEEP, *sweepable],
                                           value=sweep or (sweepable[0] if sweepable else NO_SWEEP),
                                           description="sweep over")
        self.sweep_values = widgets.Text(description="values", placeholder="e.g. 8, 16, 32")
        self.sweep_axis.observe(self._on_axis, names="value")
        self._on_axis()
        self.clear_button = widgets.Button(description="Clear", icon="trash",
                                           tooltip="Remove every point from the panel (saved "
                                                   "files keep theirs)")
        self.clear_button.on_click(lambda _: self.clear())
        self._run_controls(f"Ready: choose values and press Run ({self._conditions()}).",
                           buttons=[self.clear_button])
        # (text, frame column): a parameter named like a record column is "param.<name>"
        self.color_by = widgets.Dropdown(
            options=[(AUTO_SERIES, AUTO_SERIES), ("device label", "label"),
                     *((p, param_column(p)) for p in sweepable)],
            value=AUTO_SERIES, description="colour by")
        self.earlier_runs = widgets.ToggleButtons(options=list(EARLIER_RUNS), value="faded",
                                                  description="earlier runs",
                                                  style={"button_width": "auto"})
        for control in (self.color_by, self.earlier_runs):
            control.observe(lambda _: self._view_changed(), names="value")
        # hidden until the first plot: an empty Image shows as a broken picture; the caption
        # repeats the figure's title as text (for readers, search and tests)
        self.caption = widgets.HTML("", layout=widgets.Layout(display="none"))
        self.caption.add_class("a800lab-caption")
        self.plot = widgets.Image(format="png", layout=widgets.Layout(display="none"))
        # a wide table scrolls inside the panel instead of being cut at its right edge
        self.table = widgets.HTML("", layout=widgets.Layout(overflow="auto"))
        self.path = widgets.Text(value=out, description="file")
        self.save_button = widgets.Button(description="Save", icon="save")
        self.load_button = widgets.Button(description="Load", icon="folder-open")
        self.save_button.on_click(lambda _: self._guard(self.save))
        self.load_button.on_click(lambda _: self._guard(self.load))
        files = sorted(map(str, recorded_dir.glob("*.jsonl")))  # none if it is no folder
        self.recorded = widgets.SelectMultiple(options=files, description="overlay", rows=3)
        self.recorded.observe(lambda _: self._guard(self._load_overlay), names="value")
        self.overlay_hint = widgets.HTML(text.overlay_hint(recorded_dir, len(files)))
        self.view = None
        if self.views:  # one switch for a panel's views; _on_view sets the controls for each
            self.view = widgets.ToggleButtons(
                options=[(view.label, key) for key, view in self.views.items()],
                value=next(iter(self.views)), description="view",
                style={"button_width": "auto"})
            self.view.observe(lambda _: (self._on_view(), self._view_changed()), names="value")
        self.widget, self.tabs = explorer_layout(self, title, extras)
        if self.view is not None:
            self._on_view()

    def _on_axis(self, _change=None) -> None:
        axis = self.sweep_axis.value
        for key, control in self.controls.items():
            control.disabled = key == axis or isinstance(self.params[key], Fixed)
        self.sweep_values.disabled = axis == NO_SWEEP
        values = [] if axis == NO_SWEEP else self.params[axis].sweep_values()
        self.sweep_values.value = ", ".join(format_param(v) for v in values)
        if _change is not None:  # the plot's x axis and title follow at once
            self._view_changed()

    def _on_view(self) -> None:
        view = self.views[self.view.value]
        if view.axis is not None:
            self.sweep_axis.value = view.axis
        if view.values:
            self.sweep_values.value = ", ".join(map(format_param, view.values))
        if view.params:
            for key, control in self.controls.items():
                control.disabled = key == view.axis or key not in view.params or \
                    isinstance(self.params[key], Fixed)

    def run(self, wait: bool = False, view: str | None = None, **values) -> bool:
        """Start a run; keyword values override the controls (a list for the sweep axis), `view`
        is chosen first. False, with the reason in the status line, if it cannot start."""
        if view is not None:
            if view not in self.views:
                self.status.say(f"Cannot run: view={view!r}; use one of {list(self.views)}",
                                "error")
                return False
            self.view.value = view
        run_id = new_run_id()

        def plan():
            axes, fixed = self._plan(values)
            self._show_plan(axes, fixed)
            show_section(self.tabs, "Run")
            self._stopped_at = None
            total = math.prod(len(values) for values in axes.values())
            self.progress.max, self.progress.value = total, 0
            self.progress_text.value = f"0/{total} points"
            again = self._again(axes, fixed, run_id)
            self.status.say(f"Running {total} point{'s' * (total != 1)} of {self.name} on "
                            f"{self._conditions()} ...{again}")
            return lambda: self._work(axes, fixed, run_id, again)

        def failed(exc: BaseException) -> str:
            done = sum(r.run_id == run_id for r in self.records)
            self.progress_text.value = f"{done}/{self.progress.max} points, failed"
            kind, said = type(exc).__name__, first_line(exc)
            return (f"Run failed: {kind}{'' if said == kind else ': ' + said} (after {done} of "
                    f"{self.progress.max} points; measured points kept)")

        started = self.job.start(plan, failed=failed, name=f"a800lab-{self.name}",
                                 stopping=self._stopping)
        if started and wait:
            self.wait()
        return started

    def _again(self, axes: dict, fixed: dict, run_id: str) -> str:
        """A sentence when this Run measures what the last one did (Run pressed twice)."""
        what = json.dumps([self.view.value if self.view else "", axes, fixed], sort_keys=True,
                          default=repr)
        (last, last_id), self._last_run = self._last_run, (what, run_id)
        if what != last:
            return ""
        number = self._run_numbers().get(last_id)
        earlier = f"run #{number}" if number else "the last run"
        return (f" The same values as {earlier}: Run was pressed again, and each press "
                "measures a run of its own (Stop ends it; Clear drops earlier runs).")

    def _stopping(self) -> str:
        self._stopped_at = self.progress.value
        return (f"Stopping after the point in flight ({self._stopped_at} of "
                f"{self.progress.max} done) ...")

    def clear(self) -> int:
        """Remove every point from the panel (files keep theirs); returns how many."""
        if self.running:
            self.status.say("A run is in progress: press Stop or wait for it before Clear.", "warn")
            return 0
        removed, unsaved = self._held.clear()
        note = f"; {unsaved} had not been saved" if unsaved else ""
        self.status.say(f"Cleared {removed} points from the panel (saved files keep "
                        f"theirs{note}).", "ok")
        self.refresh()
        return removed

    def _plan(self, overrides: dict) -> tuple[dict, dict]:
        current = {key: control.value for key, control in self.controls.items()}
        return plan_run(self.params, current, self.sweep_axis.value, self.sweep_values.value,
                        overrides, no_sweep=NO_SWEEP)

    def _show_plan(self, axes: dict, fixed: dict) -> None:
        """Set each control to the value a Run measures."""
        single = {name: values[0] for name, values in axes.items() if len(values) == 1}
        for name, value in {**fixed, **single}.items():
            if name in self.controls:
                self.params[name].show(self.controls[name], value)
        if self.sweep_axis.value in axes:
            self.sweep_values.value = ", ".join(map(format_param, axes[self.sweep_axis.value]))

    def _values_of(self, overrides: dict, key: str, box) -> list:
        """A second axis's values: its override (popped from `overrides`), else `box`'s."""
        return axis_values(self.params[key], key, overrides.pop(key, None), box.value)

    def _sweep(self, axes: dict, fixed: dict, run_id: str, point=None,
               workload: str | None = None) -> SweepResult:
        """Measure the points on the run's thread: `point` (default: the panel's workload)
        recorded as `workload` (default: the panel's name)."""
        return run_sweep(point or self.workload, axes, fixed=fixed, workload=workload or self.name,
                         device=self.device, throughput_key=self.throughput_key,
                         torch_threads=self.torch_threads, run_id=run_id,
                         on_progress=self._on_progress, on_result=self._on_result,
                         cancel=self.job.cancel)

    def _work(self, axes: dict, fixed: dict, run_id: str, again: str = "") -> None:
        started = time.perf_counter()
        try:
            result = self._sweep(axes, fixed, run_id)
            if result.cancelled:
                self.progress_text.value = f"{self.progress.value}/{result.total} points, stopped"
            failed = any(r.outcome != "ok" for r in result.records)
            number = self._run_numbers().get(run_id, 1)
            self.status.say(text.summary(result, time.perf_counter() - started,
                                         run_number=number, conditions=self._conditions(),
                                         stopped_at=self._stopped_at) + again,
                            "warn" if (result.cancelled or failed) else "ok")
        finally:
            self._drawer.request(urgent=True)  # the final plot, whatever happened

    def _on_result(self, record) -> None:
        """On the measuring thread: keep the point and ask for a re-plot; no drawing here."""
        self._held.add(record)
        if record.outcome != "ok":
            self.status.say(text.describe_record(record), "error")
        self._drawer.request()

    @property
    def records(self) -> list:
        return self._held.records

    @property
    def results(self) -> pd.DataFrame:
        return records_to_frame(self.records)

    def listing(self, columns: list[str], last: int | None = None) -> pd.DataFrame:
        """panel.results[columns] (the `last` rows), measured columns headed with their units."""
        results, columns = self.results, list(columns)
        if "throughput" in columns and "throughput_unit" in results:  # names the unit
            columns += [] if "throughput_unit" in columns else ["throughput_unit"]
        shown = results[columns] if last is None else results[columns].tail(last)
        return text.with_units(shown, self._param_columns())

    def refresh(self) -> None:
        """Re-plot what is already measured; returns when drawn."""
        self._drawer.request(urgent=True)
        self._drawer.flush()

    def _view_changed(self) -> None:
        if len(self._held) or not self._overlay.empty:
            self.refresh()

    def _measured_frame(self) -> pd.DataFrame:
        return self._held.frame()

    def _draw(self) -> None:  # on the drawing thread
        measured = self._measured_frame()
        axis = self.sweep_axis.value
        x = param_column(next(iter(self.params)) if axis == NO_SWEEP else axis)
        overlay = self._overlay
        if not overlay.empty and x in overlay:
            overlay = overlay[overlay[x].notna()]
            df = pd.concat([measured, overlay], ignore_index=True) if not measured.empty \
                else overlay
        else:
            df = measured
        if df.empty:
            self.figure = None
            self.plot.layout.display = self.caption.layout.display = "none"
            self.table.value = ""
            return
        df, measured = self._of_view(df), self._of_view(measured)
        series = self.color_by.value
        if series == AUTO_SERIES:
            df, series = df.assign(series=self._auto_series(df, x)), "series"
        elif series not in df:
            series = "label"
        figure = self._figure(df, x, series)
        image = png(figure)
        self.figure = figure
        self.caption.value = (f"<small><b>{html.escape(self._figure_title(x))}</b>, "
                              f"measured on {html.escape(describe_devices(df))}"
                              f"{html.escape(self._caption_note(measured, x))}</small>")
        self.plot.value = image
        self.plot.layout.display = self.caption.layout.display = None
        self.table.value = self._table_html(measured)

    def _of_view(self, df: pd.DataFrame) -> pd.DataFrame:
        workload = self.views[self.view.value].workload if self.views else None
        if workload is None or df.empty or "workload" not in df:
            return df
        return df[df["workload"] == workload]

    def _auto_series(self, df: pd.DataFrame, x: str) -> pd.Series:
        view = self.views[self.view.value] if self.views else None
        if view is not None and view.params:
            return text.auto_series(df, view.axis, list(view.series or view.params))
        return text.auto_series(df, x, self._param_columns())

    def _figure(self, df: pd.DataFrame, x: str, series: str):
        draw = self._figure_of or throughput_and_memory_figure
        return draw(df, x, series=series, earlier_runs=self.earlier_runs.value)

    def _figure_title(self, x: str) -> str:
        title = self.views[self.view.value].title if self.views else self._title
        return title.format(x=x)

    def _caption_note(self, measured: pd.DataFrame, x: str) -> str:
        """Where the newest run's values differ from the controls."""
        return text.fixed_differences(measured, self.params, self.controls, x)

    def _table_html(self, measured: pd.DataFrame) -> str:
        measured_columns, more = self._columns
        return text.table_html(measured, self._param_columns(), self._run_numbers(),
                               measured=measured_columns, more=more)

    def _run_numbers(self) -> dict[str, int]:
        """Run id -> the number the status line gives it ("run #2")."""
        return text.run_numbers(r.run_id for r in self.records)

    def _param_columns(self) -> list[str]:
        return [param_column(p) for p in self.params]

    def save(self, path: str | None = None) -> int:
        """Append the points not yet in that JSON Lines file; returns how many were written."""
        path = path or self.path.value
        written, there = self._held.save(path)
        self.status.say(f"Saved {written} new points to {path} ({there} from this panel "
                        "there).", "ok")
        return written

    def load(self, path: str | None = None) -> int:
        """Add the file's points the panel does not hold yet; returns how many."""
        path = path or self.path.value
        added, skipped = self._held.load(path)
        self.refresh()
        note = f" ({skipped} already in the panel, skipped)" if skipped else ""
        self.status.say(f"Loaded {added} points from {path}{note}.", "ok")
        return added

    def _load_overlay(self) -> None:
        self._overlay = records_to_frame([r for path in self.recorded.value
                                            for r in read_records(path)])
        self.refresh()

    def _guard(self, action) -> None:
        try:
            action()
        except (OSError, ValueError) as exc:
            self.status.say(f"{type(exc).__name__}: {exc}", "error")
