"""ReportPanel: `python -m a800lab report` in a notebook: run the battery, watch the verdicts
fill in, read the report inline.

    panel = ReportPanel()                  # quick battery into runs/report/
    report = panel.run(wait=True)          # the Run button in code; returns the report dict
    panel.show("a800-box/report/")         # an existing report folder (or its report.json)
"""

import html
import threading
import time
from pathlib import Path

import ipywidgets as widgets

from ..core.environment import environment, fingerprint
from ..core.results import Record, read_records
from ..report.claims import INCONCLUSIVE, LOOKS, METHOD_ON_CPU, STATUSES
from ..report.compare import load_report
from ..report.html import render_report_html
from ..report.plan import MODES, Plan, plan_battery
from ..report.run import (
    DEFAULT_PRICE_PER_GPU_HOUR_USD,
    POINTS_FILE,
    REPORT_FILE,
    report_device,
    run_report,
)
from ..report.verdicts import judge_claims
from .explorer_text import panel_threads
from .panel import Panel
from .redraw import Redrawer

HTML_FILE = "report.html"
IFRAME_HEIGHT_PX = 900
_LINE = "cursor:pointer;padding:2px 0;border-bottom:1px solid #eee;overflow-wrap:break-word"
_DETAIL = "padding:4px 0 8px 1.2em;font-size:90%;overflow-wrap:break-word"
_STOPPED = {"budget": "the time budget ran out", "cancelled": "stopped",
            "interrupted": "interrupted"}


def _positive(what: str, value, example: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ValueError(f"{what} must be a positive number, e.g. {example} (got {value!r})")
    return float(value)


def verdicts_html(claims: list[dict], *, live: bool = False) -> str:
    """The claims as one line each (verdict, id, cites, the guide's words), each folding out
    the reading that decides, what was measured, the other readings, why, and the chapter."""
    counts = {s: sum(c.get("status") == s for c in claims) for s in STATUSES}
    head = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
    title = "Verdicts so far" if live else "Verdicts"
    rows = []
    for c in claims:
        status = str(c.get("status", ""))
        look = LOOKS.get(status)
        style = (f"color:{look.colour};font-weight:bold" if look else "font-weight:bold")
        if status in (METHOD_ON_CPU, INCONCLUSIVE):   # neither a pass nor a fail: dashed
            style += f";border-left:3px dashed {look.colour};padding-left:3px"
        noisy = " (noisy)" if c.get("noisy") else ""
        beside = "; ".join(f"{r['name']}: {r['status']} ({r['text']})"
                           for r in c.get("other_readings") or [])
        literal = next((r for r in c.get("readings") or [] if r.get("decides")), None)
        detail = "<br>".join(f"<b>{name}</b>: {html.escape(str(text))}" for name, text in (
            ("reading that decides", literal and literal["text"]),
            ("measured", c.get("measured")), ("other readings", beside),
            ("why", c.get("reason")), ("chapter", c.get("chapter_path"))) if text)
        where = ", ".join(c.get("cites") or []) or c.get("where", "")
        rows.append(
            f'<details class="a800lab-verdict" data-claim="{html.escape(str(c.get("id", "")))}">'
            f'<summary style="{_LINE}"><span style="{style};white-space:nowrap">'
            f"{html.escape(status + noisy)}</span> <code>{html.escape(str(c.get('id', '')))}"
            f"</code> <small>{html.escape(str(where))}</small> "
            f"{html.escape(str(c.get('stated') or c.get('text', '')))}</summary>"
            f'<div style="{_DETAIL}">{detail}</div></details>')
    return (f"<b>{title}</b> <small>({html.escape(head or 'no claims')})</small> "
            "<small>(open a line for its numbers)</small>"
            f'<div class="a800lab-verdicts" style="line-height:1.35">{"".join(rows)}</div>')


class ReportPanel(Panel):
    """Run measures the battery (report.run) into `<out>/points.jsonl`: Stop keeps every point
    before the one in flight; Run again resumes. The "Verdicts" tab is judged again as points
    arrive; at the end report.json and report.html are written beside the points, the HTML
    shown in the "Report" tab.

    `mode`: "quick" (about 8 minutes on one GPU by its estimate) or "full". `budget_s`: stop
    starting points after this long (default: the mode's). `plan`: a battery of your own
    (report.plan.Plan).
    """

    def __init__(self, mode: str = "quick", out: str | Path = "runs/report", *,
                 device: str = "auto",
                 price_per_gpu_hour_usd: float = DEFAULT_PRICE_PER_GPU_HOUR_USD,
                 cpu_threads: int | None = None, budget_s: float | None = None,
                 plan: Plan | None = None):
        if mode not in MODES:
            raise ValueError(f"mode={mode!r}: use one of {MODES}")
        if budget_s is not None:
            _positive("budget_s", budget_s, "600")
        _positive("price_per_gpu_hour_usd", price_per_gpu_hour_usd, "2.0")
        self.device = report_device(device)
        self.torch_threads = panel_threads(self.device, cpu_threads)
        self.budget_s, self.plan = budget_s, plan
        self.report = self.html = None  # the last report dict and its page
        self.measured_now = 0          # points the last run measured (0: all resumed)
        self._records: list[Record] = []
        self._records_lock = threading.Lock()
        self._live_plan: Plan | None = None
        self._device_name = str(environment(self.device).get("device_name") or self.device)
        self._drawer = Redrawer(self._draw_verdicts, name="a800lab-draw-report",
                                on_error=lambda exc: self.status.say(
                                    f"Verdict table failed: {type(exc).__name__}: {exc}",
                                    "error"))
        self._build(mode, str(out), price_per_gpu_hour_usd)

    def _build(self, mode: str, out: str, price: float) -> None:
        self.mode = widgets.ToggleButtons(
            options=list(MODES), value=mode, description="battery", style={"button_width": "auto"},
            tooltips=["a few points per claim (about 5 min on a GPU)",
                      "every size and config (about 15 min on a GPU)"])
        self.price = widgets.FloatText(value=price, description="$ / GPU-hour",
                                       tooltip="for the cost per million samples",
                                       style={"description_width": "initial"},
                                       layout=widgets.Layout(width="200px"))
        self.folder = widgets.Text(value=out, description="folder",
                                   tooltip="where points.jsonl, report.json and report.html go; "
                                           "Run again resumes what is there",
                                   layout=widgets.Layout(width="40%"))
        self.show_button = widgets.Button(description="Show saved", icon="folder-open",
                                          tooltip="show the report already in the folder")
        self.show_button.on_click(lambda _: self.show())
        self.step_text = widgets.Label("")
        self._run_controls(f"Ready: press Run to measure the {mode} battery on "
                           f"{self._conditions()}.", buttons=[self.show_button],
                           busy="A report is already running: press Stop or wait for it.")
        self.verdicts = widgets.HTML("", layout=widgets.Layout(overflow="auto"))
        self.paths, self.view = widgets.HTML(""), widgets.HTML("")
        # two tabs, so the report's own claims table does not sit under a copy of itself: the
        # verdicts (live during a run), then the report page (shown when it is ready)
        self.tabs = widgets.Tab(children=[self.verdicts, self.view], titles=["Verdicts", "Report"])
        self.widget = widgets.VBox([
            widgets.HTML("<h3>The report: this machine against the guide's claims</h3>"),
            widgets.HBox([self.mode, self.price]),
            widgets.HBox([self.folder, self.run_button, self.stop_button, self.show_button]),
            widgets.HBox([self.progress, self.progress_text, self.step_text]),
            self.status, self.paths, self.tabs])
        self.mode.observe(lambda _: self._preview(), names="value")
        self._preview()

    def _preview(self) -> None:
        """The verdict table before any run: what this machine can test."""
        if self.running or self.report is not None:
            return
        try:
            plan = self.plan or plan_battery(self.mode.value, self.device)
            facts = judge_claims([], plan, device_name=self._device_name,
                          price_per_gpu_hour_usd=self.price.value)
        except Exception:  # noqa: BLE001 -- a preview only; Run says what is wrong
            return
        self.verdicts.value = verdicts_html(facts["claims"], live=True)

    def run(self, wait: bool = False, *, mode: str | None = None, out: str | Path | None = None,
            price_per_gpu_hour_usd: float | None = None):
        """Measure (resuming) and judge the battery; keyword values set the controls first.
        Returns the report dict with wait=True (None if it failed), else whether it started."""
        folder = Path(".")

        def plan():
            nonlocal folder
            if mode is not None:
                if mode not in MODES:
                    raise ValueError(f"mode={mode!r}: use one of {MODES}")
                self.mode.value = mode
            if out is not None:
                self.folder.value = str(out)
            if price_per_gpu_hour_usd is not None:
                self.price.value = price_per_gpu_hour_usd
            price = _positive("the price per GPU-hour (US dollars)", self.price.value, "2.0")
            folder = Path(self.folder.value.strip() or ".")
            if folder.exists() and not folder.is_dir():
                raise ValueError(f"folder {str(folder)!r} is a file; give a directory")
            self._live_plan = battery = self.plan or plan_battery(self.mode.value, self.device)
            self.report = self.html = None
            self.view.value = self.paths.value = ""
            self.tabs.selected_index = 0
            self.progress.max, self.progress.value = battery.points, 0
            self.progress_text.value, self.step_text.value = f"0/{battery.points} points", ""
            self.status.say(f"Running the {battery.mode} battery ({battery.points} points) on "
                            f"{self._conditions()} into {folder} ...")
            return lambda: self._work(battery, folder, price)

        started = self.job.start(
            plan, name="a800lab-report",
            stopping=lambda: f"Stopping ({self.progress.value} of {self.progress.max} points "
                             "done) ...",
            failed=lambda exc: f"Report failed: {type(exc).__name__}: {exc} (the points "
                               f"measured are kept in {folder / POINTS_FILE}; press Run to "
                               "resume)")
        if not wait:
            return started
        if not started:
            return None
        self.wait()
        return self.report

    def _work(self, plan: Plan, folder: Path, price: float) -> None:
        started = time.perf_counter()
        self.measured_now = 0
        try:
            env = environment(self.device)
            self._device_name = str(env.get("device_name") or self.device)
            points = folder / POINTS_FILE
            mine = fingerprint(env)
            earlier = [r for r in read_records(points) if r.env.get("fingerprint") == mine] \
                if points.is_file() else []
            with self._records_lock:
                self._records = earlier
            self._drawer.request(urgent=True)
            report = run_report(plan.mode, folder, device=self.device, budget_s=self.budget_s,
                                price_per_gpu_hour_usd=price, torch_threads=self.torch_threads,
                                plan=plan, on_progress=self._on_progress,
                                on_record=self._on_record, cancel=self.job.cancel)
            self.step_text.value = "writing report.html ..."
            document = render_report_html(report)
            (folder / HTML_FILE).write_text(document, encoding="utf-8")
            self._drawer.flush()  # the live table's last draw must not overwrite the final one
            self._display(report, document, folder)
            self.status.say(self._summary(report, time.perf_counter() - started),
                            "ok" if report["complete"] else "warn")
        finally:
            self.step_text.value = ""

    def _on_progress(self, done: int, total: int, eta_s: float | None, what: str) -> None:
        super()._on_progress(done, total, eta_s)
        self.step_text.value = what

    def _on_record(self, record: Record) -> None:
        """On the measuring thread: keep the point and ask for a re-judge."""
        with self._records_lock:
            self._records.append(record)
        self.measured_now += 1
        self._drawer.request()

    def _draw_verdicts(self) -> None:
        with self._records_lock:
            records = list(self._records)
        if self._live_plan is None or self.report is not None:
            return
        facts = judge_claims(records, self._live_plan, device_name=self._device_name,
                      price_per_gpu_hour_usd=self.price.value if self.price.value > 0 else 1.0)
        if self.report is None:
            self.verdicts.value = verdicts_html(facts["claims"], live=True)

    def _summary(self, report: dict, wall_s: float) -> str:
        p = report["points"]
        counts = {s: sum(c["status"] == s for c in report["claims"]) for s in STATUSES}
        verdicts = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
        # the report's own measuring time, as its page says; the panel's wall time beside it
        head = (f"{p['measured']} of {p['planned']} points measured ({self.measured_now} now, "
                f"{p['failed']} failed) in {report.get('wall_s', wall_s):.0f} s of measuring, as "
                f"the report says (this sitting: {wall_s:.0f} s with planning and start-up) on "
                f"{self._conditions()}")
        if report["complete"]:
            return f"Done: {head}. {verdicts}."
        why = _STOPPED.get(report["stopped"], report["stopped"] or "not complete")
        return (f"Not complete ({why}): {head}; {p['not_measured']} not measured yet: press "
                f"Run to resume. {verdicts}.")

    def _display(self, report: dict, document: str, folder: Path) -> None:
        self.report, self.html = report, document
        self.verdicts.value = verdicts_html(report["claims"])
        files = [folder / name for name in (HTML_FILE, REPORT_FILE, POINTS_FILE)
                 if (folder / name).is_file()]
        self.paths.value = ("<small>Saved: " + ", ".join(
            f"<code>{html.escape(str(f))}</code>" for f in files)
            + " (report.html opens in any browser, no network needed)</small>")
        # sandboxed: no scripts, no navigation; the report's CSS stays inside
        self.view.value = (f'<iframe srcdoc="{html.escape(document, quote=True)}" sandbox="" '
                           f'title="a800lab report" style="width:100%;height:{IFRAME_HEIGHT_PX}px;'
                           'border:1px solid #ccc"></iframe>')
        self.tabs.selected_index = 1

    def show(self, path: str | Path | None = None) -> dict | None:
        """Show a report folder or its report.json (default: the folder box); the report or None."""
        if self.running:
            self.status.say("A report is running: wait for it or press Stop before showing "
                            "another.", "warn")
            return None
        path = Path(self.folder.value if path is None else path)
        try:
            report = load_report(path)
            document = render_report_html(report)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            self.status.say(f"Cannot show {path}: {exc}", "error")
            return None
        self._display(report, document, path if path.is_dir() else path.parent)
        p = report.get("points") or {}
        self.status.say(f"Showing {path}: {report.get('device_name')} ({report.get('scope')}), "
                        f"{report.get('mode')} battery, {p.get('measured')} of "
                        f"{p.get('planned')} points measured.",
                        "ok" if report.get("complete") else "warn")
        return report
