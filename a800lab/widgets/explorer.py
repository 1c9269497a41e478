"""The generic panel: vary a workload's parameters, press Run, watch throughput and memory grow.

    from a800lab.widgets import Explorer
    def step(batch_size, precision):                     # your own code; returns metrics
        ...
        return {"throughput": samples_per_s, "throughput_unit": "samples/s"}
    panel = Explorer(step, params={"batch_size": Range(1, 256, default=32),
                                   "precision": ["fp32", "bf16"]}, sweep="batch_size")
    panel                                                 # shows it in JupyterLab
    panel.run(wait=True, batch_size=[8, 16, 32])          # no clicks: notebooks and tests
    panel.results                                         # pandas DataFrame, one row per point

Work runs on a background thread so Stop works mid-sweep; Stop ends the run after the point in
flight. A second Run during a run is refused with a message. Errors (bad values, a workload that
raises) land in the status line and the panel stays usable; measured points are never dropped.
Changing "colour by" only re-plots what is already measured.
"""

from __future__ import annotations

import html
import io
import threading
import time
from pathlib import Path

import ipywidgets as widgets
import pandas as pd

from ..core.cancel import CancelToken
from ..core.results import (
    Record,
    append_record,
    check_param_names,
    read_records,
    records_to_frame,
)
from ..core.sweep import SweepResult, run_sweep
from ..plots import throughput_and_memory_figure
from .params import Fixed, as_param, format_value
from .status import StatusLine

NO_SWEEP = "(single point)"
AUTO_SERIES = "(what differs)"  # one line per device label and per value of any other control
DATA_DIR = Path(__file__).resolve().parents[2] / "data"  # recorded runs in a source checkout
_TABLE_ROWS = 12


class Explorer:
    """A panel over `workload(**params) -> dict of metrics` (see the module docstring)."""

    def __init__(self, workload, params: dict, *, sweep: str | None = None,
                 throughput_key: str | None = None, name: str | None = None,
                 device: str = "auto", title: str = "", recorded_dir: Path | str = DATA_DIR,
                 out: str = "runs.jsonl"):
        if not params:
            raise ValueError("Explorer needs at least one parameter, e.g. params={'n': [1, 2]}")
        check_param_names(params)
        self.workload = workload
        self.name = name or getattr(workload, "__name__", "custom")
        self.params = {key: as_param(spec) for key, spec in params.items()}
        self.throughput_key, self.device = throughput_key, device
        self._records: list[Record] = []
        self._saved: dict[str, set[int]] = {}  # path -> ids of records already in that file
        self._overlay: list[Record] = []
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._cancel = CancelToken()
        self.last_result: SweepResult | None = None
        self.figure = None
        self._build(sweep, title, Path(recorded_dir), out)

    # ---- layout -------------------------------------------------------------------------
    def _build(self, sweep, title, recorded_dir, out) -> None:
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
        self.run_button = widgets.Button(description="Run", button_style="success", icon="play")
        self.stop_button = widgets.Button(description="Stop", button_style="danger", icon="stop",
                                          disabled=True)
        self.run_button.on_click(lambda _: self.run())
        self.stop_button.on_click(lambda _: self.stop())
        self.progress = widgets.IntProgress(value=0, min=0, max=1, description="progress")
        self.progress_text = widgets.Label("")
        self.status = StatusLine("Ready: choose values and press Run.")
        self.color_by = widgets.Dropdown(options=[AUTO_SERIES, "label", *sweepable],
                                         value=AUTO_SERIES, description="colour by")
        self.color_by.observe(lambda _: self.refresh(), names="value")
        # hidden until the first plot: an empty Image shows as a broken picture
        self.plot = widgets.Image(format="png", layout=widgets.Layout(display="none"))
        self.table = widgets.HTML("")
        self.path = widgets.Text(value=out, description="file")
        self.save_button = widgets.Button(description="Save", icon="save")
        self.load_button = widgets.Button(description="Load", icon="folder-open")
        self.save_button.on_click(lambda _: self._guard(self.save))
        self.load_button.on_click(lambda _: self._guard(self.load))
        self.recorded = widgets.SelectMultiple(
            options=sorted(str(p) for p in recorded_dir.glob("*.jsonl")) if recorded_dir.is_dir()
            else [], description="overlay", rows=3)
        self.recorded.observe(lambda _: self._guard(self._load_overlay), names="value")
        header = [widgets.HTML(f"<h3>{html.escape(title)}</h3>")] if title else []
        self.widget = widgets.VBox([
            *header,
            widgets.VBox(list(self.controls.values())),
            widgets.HBox([self.sweep_axis, self.sweep_values]),
            widgets.HBox([self.run_button, self.stop_button, self.progress, self.progress_text]),
            self.status,
            widgets.HBox([self.color_by, self.recorded]),
            self.plot,
            widgets.HBox([self.path, self.save_button, self.load_button]),
            self.table,
        ])

    def _ipython_display_(self):
        from IPython.display import display

        display(self.widget)

    def _on_axis(self, _change=None) -> None:
        axis = self.sweep_axis.value
        for key, control in self.controls.items():
            control.disabled = key == axis or isinstance(self.params[key], Fixed)
        self.sweep_values.disabled = axis == NO_SWEEP
        values = [] if axis == NO_SWEEP else self.params[axis].sweep_values()
        self.sweep_values.value = ", ".join(format_value(v) for v in values)

    # ---- running --------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def run(self, wait: bool = False, **values) -> bool:
        """Start a run with the panel's values; keyword values override controls (a list for
        the sweep axis). Returns False, with the reason in the status line, if it cannot start."""
        with self._lock:
            if self.running:
                self.status.say("A run is already in progress: press Stop or wait for it.", "warn")
                return False
            try:
                axes, fixed = self._plan(values)
            except ValueError as exc:
                self.status.say(f"Cannot run: {exc}", "error")
                return False
            self._cancel = CancelToken()
            self._thread = threading.Thread(target=self._work, args=(axes, fixed), daemon=True,
                                            name=f"a800lab-{self.name}")
            self.run_button.disabled, self.stop_button.disabled = True, False
            total = len(next(iter(axes.values())))
            self.progress.max, self.progress.value = total, 0
            self.progress_text.value = f"0/{total} points"
            self.status.say(f"Running {total} point{'s' * (total != 1)} of {self.name} ...")
            self._thread.start()
        if wait:
            self.wait()
        return True

    def wait(self, timeout_s: float | None = None) -> None:
        """Block until the current run (if any) ends."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout_s)

    def stop(self) -> None:
        """End the run after the point in flight."""
        if self.running:
            self._cancel.cancel()
            self.status.say("Stopping after the current point ...", "warn")

    def _plan(self, overrides: dict) -> tuple[dict, dict]:
        unknown = set(overrides) - set(self.params)
        if unknown:
            raise ValueError(f"unknown parameter(s) {sorted(unknown)}; this panel has "
                             f"{list(self.params)}")
        axis = self.sweep_axis.value
        fixed = {}
        for key, spec in self.params.items():
            if key == axis:
                continue
            value = overrides.get(key, spec.value if isinstance(spec, Fixed)
                                  else self.controls[key].value)
            fixed[key] = self._check_one(key, value)
        if axis == NO_SWEEP:
            first = next(iter(fixed))
            return {first: [fixed.pop(first)]}, fixed
        values = overrides.get(axis)
        if values is None:
            values = self.params[axis].parse(axis, self.sweep_values.value)
        else:
            values = list(values) if isinstance(values, (list, tuple)) else [values]
            if not values:
                raise ValueError(f"the sweep over {axis} has no values; give at least one")
            values = [self._check_one(axis, v) for v in values]
        return {axis: values}, fixed

    def _check_one(self, key: str, value):
        spec = self.params[key]
        return value if isinstance(spec, Fixed) else spec.check(key, value)

    def _work(self, axes: dict, fixed: dict) -> None:
        started = time.perf_counter()
        try:
            result = run_sweep(self.workload, axes, fixed=fixed, workload=self.name,
                               device=self.device, throughput_key=self.throughput_key,
                               on_progress=self._on_progress, on_result=self._on_result,
                               cancel=self._cancel)
            self.last_result = result
            if result.cancelled:
                self.progress_text.value = f"{self.progress.value}/{result.total} points, stopped"
            failed = any(r.outcome != "ok" for r in result.records)
            self.status.say(_summary(result, time.perf_counter() - started),
                            "warn" if (result.cancelled or failed) else "ok")
        except Exception as exc:  # the panel must stay usable whatever the sweep does
            self.status.say(f"Run failed: {type(exc).__name__}: {exc}", "error")
        finally:
            self.run_button.disabled, self.stop_button.disabled = False, True

    def _on_progress(self, done: int, total: int, eta_s: float | None) -> None:
        self.progress.max, self.progress.value = total, done
        left = "" if eta_s is None or done == total else f", about {eta_s:.0f} s left"
        self.progress_text.value = f"{done}/{total} points{left}"

    def _on_result(self, record: Record) -> None:
        self._records.append(record)
        if record.outcome != "ok":
            self.status.say(_describe(record), "error")
        self.refresh()

    # ---- views ----------------------------------------------------------------------------
    @property
    def records(self) -> list[Record]:
        return list(self._records)

    @property
    def results(self) -> pd.DataFrame:
        """Every point measured or loaded in this panel, one row each."""
        return records_to_frame(self.records)

    def refresh(self) -> None:
        """Re-plot and re-tabulate what is already measured (no new measurements)."""
        records = self.records + [r for r in self._overlay if self._plot_axis() in r.params]
        df = records_to_frame(records)
        x = self._plot_axis()
        series = self.color_by.value
        if series == AUTO_SERIES and not df.empty:
            df["series"], series = _auto_series(df, x, list(self.params)), "series"
        elif series not in df:
            series = "label"
        self.figure = throughput_and_memory_figure(df, x, series=series)
        buf = io.BytesIO()
        self.figure.savefig(buf, format="png", dpi=72)
        self.plot.value = buf.getvalue()
        self.plot.layout.display = None
        self.table.value = _table_html(self.results, list(self.params))

    def _plot_axis(self) -> str:
        axis = self.sweep_axis.value
        return next(iter(self.params)) if axis == NO_SWEEP else axis

    def save(self, path: str | None = None) -> int:
        """Append the points not yet in that JSON Lines file; returns how many were written."""
        path = path or self.path.value
        saved = self._saved.setdefault(str(Path(path).resolve()), set())
        new = [r for r in self.records if id(r) not in saved]
        for record in new:
            append_record(path, record)
            saved.add(id(record))
        self.status.say(f"Saved {len(new)} new points to {path} ({len(saved)} from this panel "
                        "there).", "ok")
        return len(new)

    def load(self, path: str | None = None) -> int:
        """Add the points of a JSON Lines file to this panel; returns how many were added."""
        path = path or self.path.value
        loaded = read_records(path)
        self._records.extend(loaded)
        self._saved.setdefault(str(Path(path).resolve()), set()).update(map(id, loaded))
        self.refresh()
        self.status.say(f"Loaded {len(loaded)} points from {path}.", "ok")
        return len(loaded)

    def _load_overlay(self) -> None:
        self._overlay = [r for p in self.recorded.value for r in read_records(p)]
        self.refresh()

    def _guard(self, action) -> None:
        try:
            action()
        except (OSError, ValueError) as exc:
            self.status.say(f"{type(exc).__name__}: {exc}", "error")

    @property
    def status_text(self) -> str:
        """The status line as plain text."""
        return self.status.text


def _describe(record: Record) -> str:
    point = ", ".join(f"{k}={format_value(v)}" for k, v in record.params.items())
    return f"{point}: {record.outcome}: {record.message}"


def _summary(result: SweepResult, elapsed_s: float) -> str:
    counts = pd.Series([r.outcome for r in result.records]).value_counts()
    detail = ", ".join(f"{n} {outcome}" for outcome, n in counts.items()) or "nothing measured"
    if result.cancelled:
        text = f"Stopped after {len(result.records)} of {result.total} points ({detail})."
    else:
        text = f"Done: {len(result.records)} points ({detail}) in {elapsed_s:.1f} s."
    failed = [r for r in result.records if r.outcome != "ok"]
    if failed:
        text += f" First failure: {_describe(failed[0])}"
    return text


def _auto_series(df: pd.DataFrame, x: str, params: list[str]) -> pd.Series:
    """Series names that separate every run: the device label, plus each non-swept parameter
    that takes more than one value among the points (e.g. "mode=fast")."""
    varying = [p for p in params if p != x and p in df and df[p].astype(str).nunique() > 1]
    parts = [] if df["label"].nunique() <= 1 and varying else [df["label"].astype(str)]
    parts += [p + "=" + df[p].map(format_value) for p in varying]
    names = parts[0]
    for part in parts[1:]:
        names = names + ", " + part
    return names


def _table_html(df: pd.DataFrame, params: list[str]) -> str:
    if df.empty:
        return ""
    columns = [c for c in [*params, "outcome", "throughput", "throughput_unit", "median_ms",
                           "message"] if c in df]
    table = df[columns].tail(_TABLE_ROWS).dropna(axis=1, how="all")  # e.g. no timing samples
    return table.to_html(index=False, float_format=lambda v: f"{v:.4g}")
