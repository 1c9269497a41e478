"""ReportPanel driven headless on a tiny battery: the verdicts and the report inline, Stop with
the measured points kept, resume, a refused second Run, bad input in the status line, and
showing a saved report."""

import html
import json
import re
import threading
import time

import pytest

from a800lab.report.claims import METHOD_ON_CPU, NOT_MEASURED, UNTESTABLE
from a800lab.report.plan import CONFIRM, Plan, Step, plan_battery
from a800lab.report.register import REGISTER
from a800lab.widgets import ReportPanel
from tests.report_fixture import make_report

pytestmark = pytest.mark.usefixtures("one_torch_thread")

TILE_BLOCKS = (16, 32, 64)


def tiny_plan() -> Plan:
    """One peak point at 128^3, three CPU tile configs of a 64^3 matmul, the best one timed
    again, and a metered 64^3 matmul: about a second."""
    steps = (
        Step("peak", "peak", ({"device": "cpu", "precision": "fp32", "size": 128},),
             {"budget_s": 0.05}, 0.2, "fp32 matmul rate"),
        Step("tiles", "tiles", tuple(
            {"m": 64, "n": 64, "k": 64, "precision": "fp32", "backend": "cpu_blocked",
             "block_m": b, "block_n": b, "block_k": 32, "group_m": 1} for b in TILE_BLOCKS),
            {"budget_s": 0.05, "warmup_s": 0.01}, 0.2, "tile configs"),
        Step("tiles_confirm", "tiles", ({CONFIRM: "tiles"},),
             {"budget_s": 0.05, "warmup_s": 0.01}, 0.2, "the best tile again",
             confirms="tiles"),
        Step("energy", "matmul_usage", ({"size": 64, "precision": "fp32"},),
             {"duration_s": 0.05}, 0.2, "a metered matmul"),
    )
    return Plan("quick", "cpu", 0, steps, plan_battery("quick", "cpu").untestable)


def panel_in(tmp_path, **kwargs) -> ReportPanel:
    return ReportPanel(out=tmp_path / "report", device="cpu", plan=tiny_plan(), cpu_threads=1,
                       **kwargs)


def srcdoc(view_html: str) -> str:
    """The document inside the panel's iframe, unescaped."""
    match = re.search(r'<iframe srcdoc="([^"]*)"', view_html)
    assert match, view_html[:200]
    return html.unescape(match.group(1))


def lines(path) -> int:
    return len(path.read_text().splitlines())


def on_progress_value(panel, value, action):
    """Call action() once, on the measuring thread, when the progress bar reaches value."""
    def watch(change):
        if change["new"] == value:
            panel.progress.unobserve(watch, names="value")
            action()
    panel.progress.observe(watch, names="value")


def test_the_preview_says_what_this_machine_can_test(tmp_path):
    panel = panel_in(tmp_path)
    table = panel.verdicts.value
    assert "Verdicts so far" in table
    assert table.count(NOT_MEASURED) >= 1 and UNTESTABLE in table
    assert html.escape(plan_battery("quick", "cpu").untestable["tf32_speed"]) in table
    assert panel.report is None and panel.view.value == ""
    assert "CPU fallback, 1 torch thread" in panel.status_text


def test_a_run_shows_the_verdicts_and_the_report_inline(tmp_path):
    panel = panel_in(tmp_path)
    report = panel.run(wait=True)
    assert report is panel.report and report["complete"] and report["stopped"] == ""
    assert report["points"] == {"planned": 6, "measured": 6, "ok": 6, "failed": 0,
                                "not_measured": 0}
    assert panel.status_text.startswith("Done: 6 of 6 points measured (6 now, 0 failed)")
    assert (panel.progress.value, panel.progress.max) == (6, 6)
    assert not panel.run_button.disabled and panel.stop_button.disabled
    assert panel.tabs.selected_index == 1        # the report's tab, now that it is ready

    spread = next(c for c in report["claims"] if c["id"] == "tc_peak")
    assert spread["status"] == METHOD_ON_CPU     # a CPU never passes a tensor-core claim
    table = panel.verdicts.value
    assert table.startswith("<b>Verdicts</b>")
    assert html.escape(spread["stated"]) in table and html.escape(spread["measured"]) in table
    literal = next(r for r in spread["readings"] if r["decides"])
    assert html.escape(literal["text"]) in table

    # the report's own page, inline and sandboxed: its CSS stays inside the frame
    view = panel.view.value
    assert view.startswith("<iframe ") and 'sandbox=""' in view and "<style" not in view
    document = srcdoc(view)
    assert document == panel.html and document.lstrip().startswith("<!DOCTYPE html>")
    for claim in REGISTER:
        assert html.escape(claim.stated) in document
    assert html.escape(spread["measured"]) in document

    folder = tmp_path / "report"
    assert (folder / "report.html").read_text(encoding="utf-8") == panel.html
    assert json.loads((folder / "report.json").read_text())["kind"] == "a800lab-report"
    assert lines(folder / "points.jsonl") == 6
    for name in ("report.html", "report.json", "points.jsonl"):
        assert html.escape(str(folder / name)) in panel.paths.value


def test_stop_keeps_the_measured_points_and_run_resumes(tmp_path):
    panel = panel_in(tmp_path)
    points = tmp_path / "report" / "points.jsonl"
    on_progress_value(panel, 2, panel.stop)      # after the peak and the first tile
    report = panel.run(wait=True)
    assert report["stopped"] == "cancelled" and not report["complete"]
    assert report["points"]["measured"] == 2 and report["points"]["not_measured"] == 4
    assert lines(points) == 2
    assert panel.status_text.startswith("Not complete (stopped): 2 of 6 points measured")
    assert "press Run to resume" in panel.status_text
    spread = next(c for c in report["claims"] if c["id"] == "tc_peak")
    assert spread["status"] == NOT_MEASURED
    assert "not measured yet" in srcdoc(panel.view.value)

    resumed = panel.run(wait=True)               # only the four missing points
    assert panel.measured_now == 4 and resumed["complete"] and resumed["stopped"] == ""
    assert lines(points) == 6
    assert "(4 now" in panel.status_text

    again = panel.run(wait=True)                 # nothing left: judged again, nothing measured
    assert panel.measured_now == 0 and again["complete"]
    assert lines(points) == 6
    assert panel.status_text.startswith("Done: 6 of 6 points measured (0 now")
    assert len(again["sessions"]) == 3


def test_a_second_run_is_refused_while_one_runs_and_the_table_fills_live(tmp_path):
    panel = panel_in(tmp_path)
    reached, release = threading.Event(), threading.Event()

    def hold():                                  # the run waits here, after 5 of 6 points
        reached.set()
        release.wait(60)

    on_progress_value(panel, 5, hold)
    assert panel.run() is True
    try:
        assert reached.wait(60)
        assert panel.running and panel.run_button.disabled and not panel.stop_button.disabled
        assert panel.run() is False
        assert panel.run(wait=True) is None
        assert panel.status_text == "A report is already running: press Stop or wait for it."
        assert panel.show(tmp_path / "report") is None
        assert "A report is running" in panel.status_text
        # the tiles measured and the best re-timed: the live table has their verdict
        deadline = time.monotonic() + 30
        while METHOD_ON_CPU not in panel.verdicts.value:
            assert time.monotonic() < deadline, panel.verdicts.value
            time.sleep(0.05)
        assert "Verdicts so far" in panel.verdicts.value
        assert panel.report is None and panel.tabs.selected_index == 0
    finally:
        release.set()
    panel.wait()
    assert panel.report["complete"] and panel.measured_now == 6
    assert lines(tmp_path / "report" / "points.jsonl") == 6


@pytest.mark.parametrize("price", [0.0, -1.0])
def test_a_bad_price_lands_in_the_status_line_and_the_panel_stays_usable(tmp_path, price):
    panel = panel_in(tmp_path)
    panel.price.value = price
    assert panel.run(wait=True) is None
    assert panel.status_text.startswith("Cannot run: the price per GPU-hour (US dollars) must "
                                        "be a positive number")
    assert "crimson" in panel.status.value
    assert not (tmp_path / "report").exists() and not panel.run_button.disabled
    report = panel.run(wait=True, price_per_gpu_hour_usd=3.5)
    assert report["complete"] and report["price_per_gpu_hour_usd"] == 3.5
    assert panel.price.value == 3.5


def test_bad_arguments_and_a_folder_that_is_a_file(tmp_path):
    with pytest.raises(ValueError, match="price_per_gpu_hour_usd must be a positive number"):
        ReportPanel(price_per_gpu_hour_usd=0)
    with pytest.raises(ValueError, match="mode='huge'"):
        ReportPanel("huge")
    with pytest.raises(ValueError, match="cpu_threads"):
        ReportPanel(cpu_threads=0)
    (tmp_path / "taken").write_text("not a folder")
    panel = panel_in(tmp_path)
    assert panel.run(wait=True, out=tmp_path / "taken") is None
    assert "is a file; give a directory" in panel.status_text
    assert panel.run(wait=True, mode="huge") is None
    assert "mode='huge'" in panel.status_text


def test_show_a_saved_report(tmp_path):
    gpu = make_report(gpu=True, series={})   # no figures: the report's own tests draw them
    folder = tmp_path / "h200-box"
    folder.mkdir()
    (folder / "report.json").write_text(json.dumps(gpu))
    panel = ReportPanel(out=tmp_path / "mine", device="cpu")
    shown = panel.show(folder)
    assert shown == gpu and panel.report == gpu
    assert panel.status_text.startswith(f"Showing {folder}: {gpu['device_name']}")
    document = srcdoc(panel.view.value)
    assert document == panel.html and html.escape(gpu["device_name"]) in document
    for claim in gpu["claims"]:
        assert html.escape(claim["stated"]) in panel.verdicts.value
    assert html.escape(str(folder / "report.json")) in panel.paths.value
    assert panel.show(folder / "report.json") == gpu     # the file itself works too

    assert panel.show(tmp_path / "nowhere") is None
    assert "Cannot show" in panel.status_text and "no such report" in panel.status_text
    assert panel.report == gpu                           # the last good report stays
    (folder / "report.json").write_text('{"kind": "something else"}')
    assert panel.show(folder) is None and "is not 'a800lab-report'" in panel.status_text
