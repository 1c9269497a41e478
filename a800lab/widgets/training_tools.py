"""The Max batch, Profile and Tune tabs of TrainingExplorer: their controls and how their
results are shown (the panel runs the work; these only lay out and render).

    box = ProfileBox(on_profile=lambda: panel.profile()); box.show(reports)
    tune = TuneBox(on_tune=lambda: panel.tune()); tune.show(outcome)
"""

import html

import ipywidgets as widgets

from ..core.units import format_bytes
from ..core.window import harness_work
from ..figures.training_profile import label_of, profile_figure
from ..figures.training_tune import frontier_figure
from ..workloads.training.trace import category_label
from ..workloads.training.tune import describe_candidate, noise_clause, refusal_lines
from . import panel
from .layout import whole

MAX_PROFILES = 6  # bars side by side; older profiles drop off


def png(figure) -> bytes:
    """A figure as PNG bytes (drawing counted as harness work, not the workload's)."""
    with harness_work():
        return panel.png(figure)


class ProfileBox:
    """"Profile step" button, the steps to profile, the headlines and the figure."""

    def __init__(self, on_profile):
        self.button = widgets.Button(description="Profile step", icon="tachometer",
                                     tooltip="torch.profiler over a few steps at the controls' "
                                             "values: where the time goes, top ops, a trace")
        self.button.on_click(lambda _: on_profile())
        self.steps = widgets.BoundedIntText(value=3, min=1, max=50, description="steps")
        self.text = widgets.HTML("")
        self.plot = widgets.Image(format="png", layout=widgets.Layout(display="none"))
        self.figure = None
        note = ("Each profile adds a bar: compare a small and a large batch, or compile off and "
                "on. Twin: python -m a800lab profile ... --out prof/")
        whole(self.steps, self.button)
        self.widget = widgets.VBox([
            widgets.HTML(f"<small>{html.escape(note)}</small>"),
            widgets.HBox([self.steps, self.button]), self.text, self.plot])

    def show(self, reports: list) -> None:
        """The newest profile's headlines and top ops, and the figure of all of them."""
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
        self.text.value = rows_table(rows)
        self.figure = profile_figure(reports[-MAX_PROFILES:])
        self.plot.value = png(self.figure)
        self.plot.layout.display = None


class TuneBox:
    """"Tune" button, its budget, the verdict, the frontier figure and the code to paste."""

    def __init__(self, on_tune):
        self.button = widgets.Button(description="Tune", icon="magic",
                                     tooltip="the fastest training config for the target batch "
                                             "(uses the max-batch box's target, limit, margin)")
        self.button.on_click(lambda _: on_tune())
        self.budget_s = widgets.BoundedFloatText(value=0.5, min=0.01, max=60, step=0.1,
                                                 description="budget (s)")
        self.text = widgets.HTML("")
        self.plot = widgets.Image(format="png", layout=widgets.Layout(display="none"))
        self.snippet = widgets.HTML("")
        self.figure = None
        note = ("precision x micro-batch x accumulation x checkpointing x compile x optimizer "
                "for the Max batch tab's target batch (and its limit and margin); every "
                "candidate verified. Twin: python -m a800lab tune train --target-batch N")
        whole(self.budget_s, self.button)
        self.widget = widgets.VBox([
            widgets.HTML(f"<small>{html.escape(note)}</small>"),
            widgets.HBox([self.budget_s, self.button]), self.text, self.plot, self.snippet])

    def show(self, outcome) -> None:
        """The verdict (its noise, every refusal with its reason), the frontier, the code."""
        e = outcome.entry
        if outcome.reused:
            result = "reused from the store (force=True tunes again)"
        elif e.get("stored", True):
            result = f"tuned in {e['wall_s']:.1f} s, stored"
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
        self.text.value = rows_table(rows)
        self.figure = frontier_figure(e)
        self.plot.value = png(self.figure)
        self.plot.layout.display = None
        self.snippet.value = ("<details open><summary>the code to paste</summary><pre>"
                              f"{html.escape(e['snippet'])}</pre></details>")


def max_batch_rows(result) -> list[tuple[str, object]]:
    """A max-batch search's answer as (name, value) rows: the batch, limit, peaks, trials."""
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
    """"trial 3: fp32, 64 x 1, ...: ok, 1.01e+05 samples/s" for the progress label."""
    rate = (f", {record.throughput:.3g} {record.throughput_unit or 'samples/s'}"
            if record.outcome == "ok" and record.throughput else "")
    noisy = " (noisy)" if record.noise.get("noisy") else ""
    return f"trial {count}: {describe_candidate(record.params)}: {record.outcome}{rate}{noisy}"


def rows_table(rows) -> str:
    """(name, value) rows as a two-column HTML table."""
    return "<table>" + "".join(f"<tr><td>{html.escape(str(k))}</td><td>{html.escape(str(v))}"
                               "</td></tr>" for k, v in rows) + "</table>"
