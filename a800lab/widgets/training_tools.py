"""The Profile and Tune tabs of TrainingExplorer and its Max batch answer: controls and
rendering only (the panel runs the work).

    box = ProfileBox(on_profile=lambda: panel.profile()); box.show(reports)
"""

import html

import ipywidgets as widgets

from ..core.units import format_bytes
from ..core.window import harness_work
from ..figures.training_profile import label_of, memory_timeline_figure, profile_figure
from ..figures.tune import frontier_figure
from ..workloads.training.trace import category_label
from ..workloads.training.tune import (
    describe_candidate,
    noise_clause,
    refusal_lines,
    storing_clause,
)
from . import panel
from .layout import whole

MAX_PROFILES = 6  # bars side by side; older profiles drop off


def png(figure) -> bytes:
    """panel.png, counted as harness work (never inside a measured window)."""
    with harness_work():
        return panel.png(figure)


class _Tab:
    """A tab: a note, a number box beside its button, a rows table and a figure."""

    def __init__(self, button, on_click, box, note: str, *more):
        self.button = button
        self.button.on_click(lambda _: on_click())
        self.text = widgets.HTML("")
        self.plot = widgets.Image(format="png", layout=widgets.Layout(display="none"))
        self.figure = None
        whole(box, button)
        self.widget = widgets.VBox([widgets.HTML(f"<small>{html.escape(note)}</small>"),
                                    widgets.HBox([box, button]), self.text, self.plot, *more])

    def _show(self, rows, figure) -> None:
        self.text.value = rows_table(rows)
        self.figure = figure
        self.plot.value, self.plot.layout.display = png(figure), None


class ProfileBox(_Tab):
    def __init__(self, on_profile):
        self.steps = widgets.BoundedIntText(value=3, min=1, max=50, description="steps")
        self.memory = widgets.Checkbox(value=False, description="memory timeline", indent=False,
                                       tooltip="one more step under torch's memory profiler: "
                                               "bytes by category over time, the peak")
        self.memory_plot = widgets.Image(format="png", layout=widgets.Layout(display="none"))
        self.memory_figure = None
        whole(self.steps, self.memory)
        super().__init__(
            widgets.Button(description="Profile step", icon="tachometer",
                           tooltip="torch.profiler over a few steps at the controls' values: "
                                   "where the time goes, top ops, a trace"),
            on_profile, widgets.HBox([self.steps, self.memory]),
            "Each profile adds a bar: compare a small and a large batch, or compile off and on. "
            "Twin: python -m a800lab profile ... --memory --out prof/", self.memory_plot)

    def show(self, reports: list) -> None:
        report = reports[-1]
        b = report.breakdown
        rows = [("config", label_of(report).replace("\n", ", ")),
                ("step (unprofiled)", f"{report.step_ms:.4g} ms, IQR {report.step_iqr_ms:.2g} ms"
                 + (" (noisy)" if report.noise.get("noisy") else "")),
                ("device busy" if report.on_cuda else "CPU inside ops", f"{report.busy_pct:.0f}%"),
                ("verdict", report.verdict)]
        if report.overhead_note:
            rows.append(("note", report.overhead_note))
        rows += [(category_label(k, report.on_cuda), f"{v:.3g} ms")
                 for k, v in b.categories_ms.items() if v > 0]
        rows += [(f"top op {i}", f"{op['name']}: {op['self_ms']:.3g} ms ({op['share_pct']:.0f}%)")
                 for i, op in enumerate(b.top_ops[:5], start=1)]
        rows.append(("trace", report.trace_path))
        if report.memory is not None:
            rows.append(("memory peak", report.memory.summary().removeprefix("memory peak ")))
        self._show(rows, profile_figure(reports[-MAX_PROFILES:]))
        self.memory_figure = memory_timeline_figure(report) if report.memory else None
        self.memory_plot.layout.display = None if self.memory_figure else "none"
        if self.memory_figure:
            self.memory_plot.value = png(self.memory_figure)


class TuneBox(_Tab):
    def __init__(self, on_tune):
        self.budget_s = widgets.BoundedFloatText(value=0.5, min=0.01, max=60, step=0.1,
                                                 description="budget (s)")
        self.snippet = widgets.HTML("")
        super().__init__(
            widgets.Button(description="Tune", icon="magic",
                           tooltip="the fastest training config for the target batch (uses the "
                                   "max-batch box's target, limit, margin)"),
            on_tune, self.budget_s,
            "precision x micro-batch x accumulation x checkpointing x compile x optimizer for the "
            "Max batch tab's target batch (and its limit and margin); every candidate verified. "
            "Twin: python -m a800lab tune train --target-batch N", self.snippet)

    def show(self, outcome) -> None:
        e = outcome.entry
        if outcome.reused:
            result = "reused from the store (force=True tunes again)"
        elif e.get("stored", True):
            result = f"tuned in {e['wall_s']:.1f} s; {storing_clause(e)}"
        else:
            result = (f"tuned in {e['wall_s']:.1f} s; shown as measured, not stored: the last "
                      "round ran on a contended CPU")
        rows = [("winner", describe_candidate(e["best"])),
                ("samples/s", f"{e['samples_per_s']:.4g}"),
                ("peak memory", format_bytes(e["peak_bytes"])),
                ("noise", noise_clause(e)),
                ("measured / refused / failed", f"{e['measured']} / {e['refused']} / "
                                                f"{e['failed']}"),
                *(("refused", line.removeprefix("refused ")) for line in
                  refusal_lines(e.get("refusals", []))),
                *((("frontier", e["frontier_note"]),) if e.get("frontier_note") else ()),
                ("result", result)]
        self._show(rows, frontier_figure(outcome))
        self.snippet.value = code_html(e["snippet"])


def max_batch_rows(result) -> list[tuple[str, object]]:
    rows = [("largest micro-batch", result.batch_size),
            ("limit / budget", f"{format_bytes(result.limit_bytes)} / "
                               f"{format_bytes(result.budget_bytes)}"),
            ("predicted at the answer", "-" if result.predicted_bytes is None
             else format_bytes(result.predicted_bytes)),
            ("measured at the answer", "-" if result.measured_bytes is None
             else format_bytes(result.measured_bytes)),
            ("trials run / skipped", f"{result.runs} / {len(result.trials) - result.runs}")]
    plan = result.plan
    if plan is not None:
        rows.append((f"target {plan.target_batch}",
                     f"{plan.batch_size} x {plan.accum_steps} accumulation steps"
                     + (f" ({plan.note})" if plan.note else "")))
        if plan.warning:
            rows.append(("! warning", plan.warning))
    return rows


def trial_text(record, count: int) -> str:
    """"trial 3: fp32, 64 x 1, ...: ok, 1.01e+05 samples/s"."""
    rate = (f", {record.throughput:.3g} {record.throughput_unit or 'samples/s'}"
            if record.outcome == "ok" and record.throughput else "")
    noisy = " (noisy)" if record.noise.get("noisy") else ""
    return f"trial {count}: {describe_candidate(record.params)}: {record.outcome}{rate}{noisy}"


def code_html(snippet: str) -> str:
    return ("<details open><summary>the code to paste</summary><pre>"
            f"{html.escape(snippet)}</pre></details>")


def rows_table(rows) -> str:
    return "<table>" + "".join(f"<tr><td>{html.escape(str(k))}</td><td>{html.escape(str(v))}"
                               "</td></tr>" for k, v in rows) + "</table>"
