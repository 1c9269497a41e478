"""The panels in a real JupyterLab, in headless Chromium: open a notebook, run every cell, click.

    python -m pytest tests/browser -m browser     # ~30-60 s; artifacts/browser/ gets screenshots

Each test opens a notebook (a copy, in the `lab` fixture's temp root) in a fresh page, waits for
its kernel, runs all cells through the Run menu ("Run > Run All Cells", as a user would; JupyterLab
4 binds no key to it and does not expose `window.jupyterapp` by default), waits until every code
cell has an execution count, and fails fast with the traceback if a cell raised. Then it drives
the panel through its buttons and reads what the browser shows.
"""

from __future__ import annotations

import base64
import json
import re
import shutil
import time
from pathlib import Path

import pytest

from a800lab.report.run import POINTS_FILE, REPORT_FILE

try:
    from playwright.sync_api import Locator, Page, expect
except ImportError:  # also when it is installed but broken
    pytest.skip("browser tests need the playwright package (pip install playwright)",
                allow_module_level=True)

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "artifacts" / "browser"  # made by the `lab` fixture
CHAPTER_01 = REPO / "notebooks" / "01-device-and-topology.ipynb"
KERNEL_START_TIMEOUT_MS = 90_000  # a cold kernel importing torch on a 2-core box: 10-30 s
RUN_ALL_TIMEOUT_MS = 180_000  # chapter notebooks do real (small) work on CPU

# Polls the open notebook: done when every code cell shows an execution count; returns early
# with the error text when an output holds a traceback (run-all stops at a failing cell).
_CELLS_STATE_JS = """
(expected) => {
  // An empty code cell is never sent to the kernel, so it never gets a count: skip those.
  const cells = [...document.querySelectorAll('.jp-NotebookPanel .jp-Notebook .jp-CodeCell')]
    .filter(c => (c.querySelector('.cm-content')?.textContent || '').trim() !== '');
  const prompts = cells.map(c => (c.querySelector('.jp-InputArea-prompt')?.textContent || '')
                                  .trim());
  const errors = [];
  for (const out of document.querySelectorAll('.jp-NotebookPanel .jp-OutputArea-output')) {
    const text = out.textContent || '';
    if (/Traceback \\(most recent call last\\)|^\\s*Cell In\\[\\d+\\], line \\d+/m.test(text)) {
      errors.push(text.slice(-3000));
    }
  }
  if (errors.length) return {prompts, errors};
  const counts = prompts.map(p => (p.match(/^\\[(\\d+)\\]:$/) || [])[1]).map(Number);
  const done = cells.length === expected && counts.every((n, i) => n > 0 && (i === 0
               || n > counts[i - 1]));
  return done ? {prompts, errors} : null;
}
"""


def code_cell_count(notebook: Path) -> int:
    """How many code cells of `notebook` will run (the empty ones are skipped)."""
    cells = json.loads(notebook.read_text())["cells"]
    return sum(cell["cell_type"] == "code" and "".join(cell["source"]).strip() != ""
               for cell in cells)


def open_notebook(page: Page, lab, path: str) -> None:
    """Open `path` (relative to the lab root) and wait until its kernel is idle."""
    page.goto(lab.url(f"/lab/tree/{path}"))
    expect(page.locator(".jp-NotebookPanel .jp-Notebook .jp-Cell").first).to_be_visible(
        timeout=KERNEL_START_TIMEOUT_MS)
    # The status bar reads "No Kernel | Initializing", then "Python 3 (ipykernel) | Idle" once
    # the kernel has started and this page's connection to it is up.
    expect(page.locator("#jp-main-statusbar")).to_contain_text(
        re.compile(r"Python 3.*\|\s*Idle"), timeout=KERNEL_START_TIMEOUT_MS)


def run_all_cells(page: Page, code_cells: int) -> None:
    """Run > Run All Cells, then wait for every code cell to finish (or fail with its error)."""
    page.get_by_role("menuitem", name="Run", exact=True).click()
    page.get_by_role("menuitem", name="Run All Cells", exact=True).click()
    state = page.wait_for_function(_CELLS_STATE_JS, arg=code_cells, polling=250,
                                   timeout=RUN_ALL_TIMEOUT_MS).json_value()
    if state["errors"]:
        pytest.fail("a cell raised:\n" + "\n---\n".join(state["errors"]), pytrace=False)
    expect(page.locator("#jp-main-statusbar")).to_contain_text(re.compile(r"\|\s*Idle"))


def button(panel: Locator, label: str) -> Locator:
    """A widgets.Button by its label (its accessible name also holds the icon's glyph, so
    get_by_role(name=...) does not match it exactly)."""
    return panel.locator("button.widget-button",
                         has_text=re.compile(rf"^\s*{re.escape(label)}\s*$"))


def widget_panel(page: Page, title: str) -> Locator:
    """The output holding the panel whose <h3> title is `title`."""
    panel = page.locator(".jp-OutputArea-output").filter(
        has=page.locator("h3", has_text=re.compile(f"^{re.escape(title)}$")))
    expect(panel).to_have_count(1)
    return panel


def image_bytes(img: Locator) -> bytes:
    """The bytes behind a widgets.Image (its src is a blob: URL made from the PNG)."""
    page = img.page
    page.wait_for_function("img => img.complete && img.naturalWidth > 0",
                           arg=img.element_handle(), polling=100)
    encoded = img.evaluate("""async img => {
        const bytes = new Uint8Array(await (await fetch(img.src)).arrayBuffer());
        let text = '';
        for (let i = 0; i < bytes.length; i += 8192) {
          text += String.fromCharCode(...bytes.subarray(i, i + 8192));
        }
        return btoa(text);
    }""")
    return base64.b64decode(encoded)


def select_tab(page: Page, tab: Locator, tries: int = 5) -> None:
    """Click a widget tab until it is selected: a click while a large output (the report's
    page) is still laying out can land where the tab bar was a moment before."""
    for _ in range(tries):
        tab.click()
        if tab.get_attribute("aria-selected") == "true":
            return
        page.wait_for_timeout(500)
    expect(tab).to_have_attribute("aria-selected", "true")


def shown_table(panel: Locator) -> Locator:
    """The results table on show (the one behind its "all columns" toggle repeats the rows)."""
    return panel.locator("table.a800lab-results").first


def status_of(panel: Locator) -> Locator:
    """Explorer's status line (the widget carries the class a800lab-status)."""
    return panel.locator(".a800lab-status")


def cpu_device_name() -> str:
    """What the kernel (on this machine, without a GPU) calls its device in records."""
    from a800lab.core.environment import environment

    return environment("cpu")["device_name"]


@pytest.mark.slow  # ~22 s; nbval runs the chapter, tests/test_device_panel.py the panel
@pytest.mark.skipif(not CHAPTER_01.exists(), reason=f"{CHAPTER_01.name} is not written yet")
def test_chapter_01_device_panel_renders(page: Page, lab):
    open_notebook(page, lab, f"notebooks/{CHAPTER_01.name}")
    run_all_cells(page, code_cell_count(CHAPTER_01))

    # The DevicePanel is a widget in some output: a GPU table with a row per GPU or, on a
    # machine without one (this CI box), "No NVIDIA GPU found: <reason>".
    no_gpu = page.get_by_text(re.compile("No NVIDIA GPU", re.IGNORECASE))
    gpu_rows = page.locator("table.a800lab-gpus tbody tr")
    panel = page.locator(".jp-OutputArea-output > .jupyter-widgets").filter(
        has=no_gpu.or_(gpu_rows)).first
    expect(panel).to_be_visible()
    expect(panel.get_by_text(re.compile("No NVIDIA GPU", re.IGNORECASE)).or_(
        panel.locator("table.a800lab-gpus tbody tr")).first).to_be_visible()
    panel.screenshot(path=str(ARTIFACTS / "chapter01-device-panel.png"))


def test_explorer_runs_rerun_clear_and_stop(page: Page, lab):
    notebook = Path(__file__).with_name("explorer_demo.ipynb")
    open_notebook(page, lab, f"browser/{notebook.name}")
    run_all_cells(page, code_cell_count(notebook))

    # --- Run the 4-point sweep: progress completes, the plot appears -----------------------
    quick = widget_panel(page, "Quick sweep")
    status, img = status_of(quick), quick.locator("img.widget-image")
    expect(status).to_have_text(re.compile(r"^Ready: choose values and press Run \(CPU fallback"))
    run = button(quick, "Run")
    run.click()
    expect(status).to_have_text(re.compile(r"^Done: 4 points \(4 ok\)"))
    expect(quick.locator(".widget-label").filter(has_text="points")).to_have_text("4/4 points")
    expect(quick.locator(".widget-hprogress .progress-bar")).to_have_attribute(
        "style", re.compile(r"width: 100%"))
    expect(shown_table(quick).locator("tbody tr")).to_have_count(4)
    first_png = image_bytes(img)
    assert first_png.startswith(b"\x89PNG"), first_png[:16]
    quick.screenshot(path=str(ARTIFACTS / "explorer-run1.png"))

    # --- Change a control, run again: a second series, a different plot --------------------
    fast = quick.locator("button.widget-toggle-button", has_text=re.compile("^fast$"))
    fast.click()
    expect(fast).to_have_class(re.compile(r"\bmod-active\b"))
    first_src = img.get_attribute("src")
    run.click()
    # Status reads "Done: 4 points" after both runs; the table growing to 8 rows (run #2)
    # and the new image tell the second run apart from the first.
    expect(shown_table(quick).locator("tbody tr")).to_have_count(8)
    expect(shown_table(quick).locator("tbody td", has_text=re.compile("^fast$"))).to_have_count(4)
    expect(status).to_have_text(re.compile(r"^Done: 4 points \(4 ok\)"))
    expect(run).to_be_enabled()
    expect(img).not_to_have_attribute("src", first_src)
    second_png = image_bytes(img)
    assert second_png.startswith(b"\x89PNG") and second_png != first_png
    quick.screenshot(path=str(ARTIFACTS / "explorer-run2.png"))

    # "colour by" only re-plots what is measured: a new image, no new points.
    second_src = img.get_attribute("src")
    colour_by = quick.locator(".widget-dropdown", has_text="colour by").locator("select")
    colour_by.select_option("variant")
    expect(img).not_to_have_attribute("src", second_src)
    assert image_bytes(img) not in (first_png, second_png)
    expect(shown_table(quick).locator("tbody tr")).to_have_count(8)
    quick.screenshot(path=str(ARTIFACTS / "explorer-colour-by-variant.png"))

    # --- The same Run again: a run of its own (#3), the device named above the figure --------
    third_src = img.get_attribute("src")
    run.click()
    expect(shown_table(quick).locator("tbody tr")).to_have_count(12)
    expect(shown_table(quick).locator("tbody td", has_text=re.compile(r"^#3$"))).to_have_count(4)
    expect(status).to_have_text(re.compile(r"^Done: 4 points \(4 ok\) in .* run #3 on CPU"))
    expect(img).not_to_have_attribute("src", third_src)
    caption = quick.locator(".a800lab-caption")
    expect(caption).to_contain_text("throughput and peak memory vs n")
    expect(caption).to_contain_text(f"{cpu_device_name()} (CPU fallback")
    quick.screenshot(path=str(ARTIFACTS / "explorer-three-runs.png"))

    # --- Clear: the panel empties, the plot and its caption go --------------------------------
    button(quick, "Clear").click()
    expect(status).to_have_text(re.compile(r"^Cleared 12 points from the panel"))
    expect(shown_table(quick).locator("tbody tr")).to_have_count(0)
    expect(img).to_be_hidden()
    expect(caption).to_be_hidden()
    expect(run).to_be_enabled()
    quick.screenshot(path=str(ARTIFACTS / "explorer-cleared.png"))

    # --- A long sweep, stopped mid-run ------------------------------------------------------
    slow = widget_panel(page, "Long sweep")
    slow_status, stop = status_of(slow), button(slow, "Stop")
    progress = slow.locator(".widget-label").filter(has_text="points")
    button(slow, "Run").click()
    expect(button(slow, "Run")).to_be_disabled()  # a second Run cannot start a second sweep
    expect(stop).to_be_enabled()
    stop.scroll_into_view_if_needed()  # so that the click below is immediate
    # Wait until at least 2 of the 40 (0.5 s) points are done, then press Stop.
    expect(progress).to_have_text(re.compile(r"^([2-9]|[1-3]\d)/40 points"))
    done_at_stop = int(progress.inner_text().split("/")[0])
    clicked_at = time.monotonic()
    stop.click()
    click_s = time.monotonic() - clicked_at
    expect(slow_status).to_have_text(re.compile(r"^Stopped after \d+ of 40 points"))
    text = slow_status.inner_text()
    stopped_after = int(re.match(r"Stopped after (\d+)", text).group(1))
    kernel_at_stop = int(re.search(r"Stop came with (\d+) done", text).group(1))
    # Stop ends the run after the point in flight: one more than the kernel had done when Stop
    # arrived, or none if it landed between two points. The browser may show the count a
    # moment late on a loaded machine (never early), within a point or so.
    assert kernel_at_stop <= stopped_after <= kernel_at_stop + 1, text
    assert done_at_stop <= kernel_at_stop <= done_at_stop + 2, (
        f"{done_at_stop} points were shown done when Stop was pressed (the click took "
        f"{click_s:.2f} s) but the kernel had done {kernel_at_stop}: {text}")
    expect(progress).to_have_text(re.compile(rf"^{stopped_after}/40 points"))
    expect(button(slow, "Run")).to_be_enabled()
    expect(button(slow, "Stop")).to_be_disabled()
    slow.screenshot(path=str(ARTIFACTS / "explorer-stopped.png"))


CHAPTER_02 = REPO / "notebooks" / "02-tensor-core-tiles.ipynb"


@pytest.mark.skipif(not CHAPTER_02.exists(), reason=f"{CHAPTER_02.name} is not written yet")
def test_chapter_02_tile_heatmap_and_shape_sweep(page: Page, lab):
    open_notebook(page, lab, f"notebooks/{CHAPTER_02.name}")
    run_all_cells(page, code_cell_count(CHAPTER_02))

    panel = widget_panel(page, "Matmul: tiles, shapes and precision")
    caption = panel.locator(".a800lab-caption")
    # The chapter ends on the heatmap its "Reading the heatmap" reads (the shape sweep is shown
    # inline under its own cell), with the best tile exported under it.
    expect(caption).to_contain_text("tile heatmap: TFLOP/s over block_m x block_n")
    expect(caption).to_contain_text(f"{cpu_device_name()} (CPU fallback")
    expect(panel.get_by_text(re.compile("^best tile"))).to_be_visible()
    expect(panel.get_by_text("not a Triton config", exact=False)).to_be_visible()
    panel.locator("img").first.scroll_into_view_if_needed()
    panel.screenshot(path=str(ARTIFACTS / "chapter02-tile-heatmap.png"))

    # The shape sweep view re-plots what was measured, the model named beside it.
    panel.locator("button.widget-toggle-button", has_text=re.compile("^shape sweep$")).click()
    expect(caption).to_contain_text("shape sweep: TFLOP/s vs n over the tile and wave")
    panel.screenshot(path=str(ARTIFACTS / "chapter02-shape-sweep.png"))


CHAPTER_11 = REPO / "notebooks" / "11-report.ipynb"


@pytest.mark.slow  # ~14 s; tests/test_report_panel.py and test_report_html.py check the rest
@pytest.mark.skipif(not CHAPTER_11.exists(), reason=f"{CHAPTER_11.name} is not written yet")
def test_chapter_11_report_shown_inline(page: Page, lab, quick_cpu_report):
    # The session's quick CPU battery (tests/conftest.py) was measured in this environment:
    # seeded into the chapter's folder, the panel resumes it rather than measuring it a third
    # time (nbval's run of the chapter measures it afresh).
    _, measured = quick_cpu_report
    folder = lab.root / "notebooks" / "runs" / "report"
    folder.mkdir(parents=True, exist_ok=True)
    for name in (POINTS_FILE, REPORT_FILE):   # the points, and the sitting that measured them
        shutil.copy2(measured / name, folder / name)
    open_notebook(page, lab, f"notebooks/{CHAPTER_11.name}")
    run_all_cells(page, code_cell_count(CHAPTER_11))

    panel = widget_panel(page, "The report: this machine against the guide's claims")
    expect(panel.get_by_text(re.compile(r"points measured \(0 now")).first).to_be_visible()
    # The run is over: the report's own page sits in a sandboxed frame, its figures inline.
    report = panel.frame_locator("iframe").first
    expect(report.locator("h1")).to_contain_text(f"a800lab report: {cpu_device_name()}")
    expect(report.locator("h1")).to_contain_text("CPU fallback")
    expect(report.get_by_text("holds here").first).to_be_visible()
    expect(report.get_by_text("cannot be tested on this machine").first).to_be_visible()
    expect(report.locator('img[src^="data:image/png;base64,"]').first).to_be_visible()
    assert report.locator('[src^="http"], [href^="http"]').count() == 0
    frame = panel.locator("iframe").first
    frame.scroll_into_view_if_needed()
    page.wait_for_timeout(500)   # let the frame paint before the picture
    page.screenshot(path=str(ARTIFACTS / "chapter11-report-panel.png"))
    # Laid out for reading at the notebook's width: a card per claim, no word broken inside
    # (a break after a hyphen or inside an address is a line break, not a broken word).
    report_frame = next(f for f in page.frames if f.url == "about:srcdoc")
    assert report_frame.evaluate(BROKEN_WORDS_JS) == []
    assert report_frame.evaluate("document.querySelectorAll('article.claim').length") > 40
    report_frame.locator("#claim-compression summary").click()
    report_frame.locator("#claim-compression").screenshot(
        path=str(ARTIFACTS / "chapter11-report-card.png"))
    # The verdicts tab: one line per claim, folding out its numbers; a GPU-only one says why.
    select_tab(page, panel.get_by_role("tab", name="Verdicts"))
    line = panel.locator('details[data-claim="tf32_speed"]')
    expect(line.locator("summary")).to_contain_text("cannot be tested on this machine")
    line.locator("summary").click()
    expect(line.get_by_text("no NVIDIA GPU here", exact=False)).to_be_visible()
    panel.screenshot(path=str(ARTIFACTS / "chapter11-verdicts.png"))
    assert panel.evaluate(BROKEN_WORDS_JS) == []
    # the chapter itself: its long outputs folded, the comparison a table, no word broken
    notebook = page.locator(".jp-NotebookPanel .jp-WindowedPanel-outer").first
    assert notebook.evaluate(BROKEN_WORDS_JS) == []
    expect(page.locator(".jp-OutputArea-output details").first).to_be_attached()
    height = notebook.evaluate("el => el.scrollHeight")
    assert height < 12_000, f"chapter 11 is {height} px tall"   # 21,400 px before the folds


# every word (outside code, addresses and hyphenated words) whose letters sit on two lines
BROKEN_WORDS_JS = """
(root) => {
  root = root instanceof Element ? root : document.body;
  const out = [], range = document.createRange();
  const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
  let node;
  while ((node = walker.nextNode())) {
    const el = node.parentElement;
    if (!el || el.closest('code, pre, .sources, script, style') || !el.offsetParent) continue;
    for (const m of node.textContent.matchAll(/\\S+/g)) {
      if (/[-/]/.test(m[0])) continue;
      range.setStart(node, m.index);
      range.setEnd(node, m.index + m[0].length);
      const tops = new Set([...range.getClientRects()].filter(r => r.width > 0)
                           .map(r => Math.round(r.top)));
      if (tops.size > 1) out.push(m[0]);
    }
  }
  return out.slice(0, 20);
}
"""


# Chapters whose figures and controls must show what ran (figures as pictures, no stray
# stderr box, bars in the throughput plot's order, loss curves told apart, the controls at the
# values a programmatic run used): every panel and every drawn figure is screenshot, for a
# person to look at (artifacts/browser/chapterNN-panel-K.png, chapterNN-figure-K.png).
# The README command runs chapter 04 (the training panel); 00 (its panel is an Explorer, as
# in test_explorer_runs_rerun_clear_and_stop), 05 and 06 (chapter 04's TrainingExplorer
# again), 09, 10 and 13 (their figures are also checked as figures by nbval's chapter check)
# are marked slow and run by hand (`--run-slow`, ~2.5 min), which keeps the README command
# within its 10 minutes.
SHOWS_WHAT_RAN = ("04-mixed-precision-training.ipynb",
                  *(pytest.param(chapter, marks=pytest.mark.slow) for chapter in (
                      "00-start-here.ipynb", "05-loss-scaling.ipynb",
                      "06-batch-size-and-accumulation.ipynb",
                      "09-deployment.ipynb", "10-utilisation-and-cost.ipynb",
                      "13-serving.ipynb")))


@pytest.mark.parametrize("chapter", SHOWS_WHAT_RAN)
def test_chapters_show_what_ran(page: Page, lab, chapter):
    notebook = REPO / "notebooks" / chapter
    open_notebook(page, lab, f"notebooks/{chapter}")
    run_all_cells(page, code_cell_count(notebook))
    outputs = page.locator(".jp-NotebookPanel .jp-OutputArea-output")
    printed = [t for t in outputs.all_inner_texts()
               if re.search(r"<\w*Figure size [\d.]+x[\d.]+ with \d+ Axes>", t)]
    assert not printed, f"figures printed as text, not drawn: {printed}"
    stderr = page.locator('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]')
    assert stderr.count() == 0, f"stderr boxes: {stderr.all_inner_texts()}"
    stem = chapter.split("-")[0]
    panels = outputs.filter(has=page.locator(".jupyter-widgets h3"))
    figures = page.locator('.jp-NotebookPanel .jp-OutputArea-output[data-mime-type="image/png"]')
    assert panels.count() + figures.count() >= 1  # each of these chapters shows a figure
    for kind, shown in (("panel", panels), ("figure", figures)):
        for k in range(shown.count()):
            shown.nth(k).scroll_into_view_if_needed()
            shown.nth(k).screenshot(path=str(ARTIFACTS / f"chapter{stem}-{kind}-{k + 1}.png"))
    if chapter.startswith("04"):
        fits_a_notebook(widget_panel(page, "Training step: samples/s, memory and loss"))
    if chapter.startswith("10"):  # a CPU run is priced per machine-hour, never as a GPU's
        cost = widget_panel(page, "Utilisation, energy and cost per sample")
        expect(cost.locator(".a800lab-caption")).to_contain_text("per machine-hour")


MEASURED_HEADERS = ("throughput (samples/s)", "step peak (MiB)", "eval loss", "accuracy (%)")
# every description label and button whose text is cut ("accum_st...", "Find max bat...")
_CUT_TEXT_JS = """
el => [...el.querySelectorAll('.widget-label, button.widget-button')]
  .filter(e => e.offsetParent !== null && e.scrollWidth > e.clientWidth + 1)
  .map(e => e.textContent.trim())
"""


def fits_a_notebook(panel: Locator) -> None:
    """TrainingExplorer in a notebook output: sections as tabs, labels whole, the measured
    columns of its table on screen without scrolling sideways."""
    for name in ("Run", "Max batch", "Tune", "Profile"):
        expect(panel.get_by_role("tab", name=name)).to_be_visible()
    table = panel.locator("table.a800lab-results").first
    table.scroll_into_view_if_needed()
    right = panel.bounding_box()["x"] + panel.bounding_box()["width"]
    for head in MEASURED_HEADERS:
        cell = table.locator("th", has_text=re.compile(f"^{re.escape(head)}$"))
        expect(cell).to_be_visible()
        box = cell.bounding_box()
        assert box["x"] + box["width"] <= right, f"{head!r} is past the output's right edge"
    for name in ("Run", "Max batch", "Tune", "Profile"):  # each section: nothing cut
        panel.get_by_role("tab", name=name).click()
        page = panel.page
        page.wait_for_timeout(200)
        assert panel.evaluate(_CUT_TEXT_JS) == [], f"cut labels in the {name} tab"
        if name == "Max batch":
            panel.screenshot(path=str(ARTIFACTS / "chapter04-training-max-batch-tab.png"))
    panel.get_by_role("tab", name="Run").click()
    table.scroll_into_view_if_needed()
    panel.screenshot(path=str(ARTIFACTS / "chapter04-training-panel.png"))
