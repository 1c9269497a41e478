"""DiffPanel: compare two machines from their results files or doctor reports (core.envdiff
compares): the fields that differ and what each means, and for two results files the same
configs' throughputs side by side with B / A.

    panel = DiffPanel("a800/runs.jsonl", "h200/runs.jsonl")   # compares at once when given both
    panel.compare("a/doctor.json", "b/doctor.json")           # the Compare button; an EnvDiff
    panel.diff, panel.figure                                  # the last comparison and its plot
"""

import html
from pathlib import Path

import ipywidgets as widgets

from ..core.envdiff import FIELDS, EnvDiff, diff_files, format_params, show_value
from ..figures.diff import lineup_figure
from .explorer import DATA_DIR
from .panel import Panel, StatusLine, png

RUNS_DIR = Path("runs")  # where panels Save, relative to the notebook


def _cell(text) -> str:
    return f"<td>{html.escape(str(text))}</td>"


def diff_html(diff: EnvDiff) -> str:
    """The comparison as HTML tables."""
    out = [f"<p><b>A</b>: {html.escape(diff.a.describe())}<br><b>B</b>: "
           f"{html.escape(diff.b.describe())}</p>"]
    if diff.differences:
        rows = "".join(f"<tr>{_cell(d.label)}{_cell(show_value(d.field, d.a))}"
                       f"{_cell(show_value(d.field, d.b))}{_cell(d.meaning)}</tr>"
                       for d in diff.differences)
        out.append(f"<h4>Differences ({len(diff.differences)})</h4><table class="
                   f'"a800lab-diff"><tr><th>field</th><th>A</th><th>B</th><th>what it means'
                   f"</th></tr>{rows}</table>")
    else:
        out.append("<p>No differences in the fields both files record.</p>")
    one_sided = [("A", d, d.a) for d in diff.only_a] + [("B", d, d.b) for d in diff.only_b]
    if one_sided:
        rows = "".join(f"<tr>{_cell(d.label)}{_cell(side)}{_cell(show_value(d.field, v))}</tr>"
                       for side, d, v in one_sided)
        out.append("<h4>Recorded in one file only</h4><p><small>Results files record the "
                   "software and the device; clocks, power limit, ECC, MIG, TF32 and NUMA "
                   "binding are in doctor reports (<code>python -m a800lab doctor --json &gt; "
                   "doctor.json</code>).</small></p><table><tr><th>field</th><th>in</th>"
                   f"<th>value</th></tr>{rows}</table>")
    if diff.same:
        out.append("<p><small><b>Same</b>: " + html.escape(", ".join(FIELDS[k][0]
                                                                       for k in diff.same))
                   + "</small></p>")
    if diff.notes:
        out.append("<ul>" + "".join(f"<li>{html.escape(n)}</li>" for n in diff.notes) + "</ul>")
    if diff.lineup:
        def ratio(r) -> str:  # ~: no difference the timings can tell
            return f"{r.ratio:.2f}x" + ("~" if diff.same_environment or r.within_spread else "")

        rows = "".join(
            f"<tr>{_cell(r.workload)}{_cell(format_params(r.params))}"
            f"{_cell(f'{r.a_throughput:.4g}' + '!' * r.a_noisy)}"
            f"{_cell(f'{r.b_throughput:.4g}' + '!' * r.b_noisy)}{_cell(r.unit)}"
            f"{_cell(ratio(r))}</tr>" for r in diff.lineup)
        same = (" A and B are the same environment: every B/A is run-to-run variation."
                if diff.same_environment else "")
        out.append(f"<h4>Throughput, same configs</h4><p><small>Newest ok record of each side; "
                   f"! marks a noisy one, ~ a difference the timings cannot tell from none."
                   f"{same} Geometric mean B/A {diff.geomean_ratio:.2f}x; "
                   f"{diff.unmatched[0]} configs only in A, {diff.unmatched[1]} only in B."
                   "</small></p><table><tr><th>workload</th><th>params</th><th>A</th><th>B"
                   f"</th><th>unit</th><th>B/A</th></tr>{rows}</table>")
    elif diff.a.kind == diff.b.kind == "results":
        out.append("<p>No config was measured ok on both sides: run the same sweep on both "
                   "machines.</p>")
    return "".join(out)


class DiffPanel(Panel):
    """Two file boxes (offering the .json and .jsonl files under `folders`), Compare, the diff."""

    def __init__(self, a: str | Path | None = None, b: str | Path | None = None, *,
                 folders=(DATA_DIR, RUNS_DIR)):
        options = [f for folder in map(Path, folders) if folder.is_dir() for f in
                   sorted(str(p) for p in folder.rglob("*") if p.suffix in (".json", ".jsonl"))]
        self.a = widgets.Combobox(value=str(a or ""), options=options, description="A",
                                  placeholder="results .jsonl or doctor .json",
                                  layout=widgets.Layout(width="48%"))
        self.b = widgets.Combobox(value=str(b or ""), options=options, description="B",
                                  placeholder="the same from the other machine",
                                  layout=widgets.Layout(width="48%"))
        self.compare_button = widgets.Button(description="Compare", icon="exchange",
                                             button_style="primary")
        self.compare_button.on_click(lambda _: self.compare())
        self.status = StatusLine("Choose two files and press Compare.")
        self.output = widgets.HTML("")
        self.plot = widgets.Image(format="png", layout=widgets.Layout(display="none"))
        self.diff: EnvDiff | None = None
        self.figure = None
        self.widget = widgets.VBox([
            widgets.HTML("<h3>Compare two machines</h3>"),
            widgets.HBox([self.a, self.b]), widgets.HBox([self.compare_button, self.status]),
            self.output, self.plot])
        if a and b:
            self.compare()

    def compare(self, a: str | Path | None = None, b: str | Path | None = None) -> EnvDiff | None:
        """Compare files a and b (default: the boxes); None, the reason said, if it cannot."""
        if a is not None:
            self.a.value = str(a)
        if b is not None:
            self.b.value = str(b)
        try:
            diff = diff_files(self.a.value, self.b.value)
        except (OSError, ValueError) as exc:
            self.status.say(f"Cannot compare: {exc}", "error")
            return None
        self.diff = diff
        self.output.value = diff_html(diff)
        if diff.lineup:
            self.figure = lineup_figure(diff)
            self.plot.value, self.plot.layout.display = png(self.figure), None
        else:
            self.figure, self.plot.layout.display = None, "none"
        lineup = f", {len(diff.lineup)} configs side by side" if diff.lineup else ""
        self.status.say(f"{len(diff.differences)} differences, "
                        f"{len(diff.only_a) + len(diff.only_b)} fields in one file only"
                        f"{lineup}.", "warn" if diff.differences else "ok")
        return diff
