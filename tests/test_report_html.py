"""The report's HTML pages: well formed, self-contained (inline PNGs, no URL outside the file),
a card per claim (its verdict never broken, its readings folded), escaped text, figures only for
measured series, each naming its device and mode."""

import base64
import html
import re
from html.parser import HTMLParser

import pytest

from a800lab.report.claims import (
    AGREES,
    CONTRADICTED,
    FAILED,
    FAILS,
    HOLDS,
    INCONCLUSIVE,
    LOOKS,
    NOT_MEASURABLE,
    NOT_MEASURED,
    PARTLY,
)
from a800lab.report.compare import compare_reports
from a800lab.report.html import (
    render_compare_html,
    render_report_html,
    report_figures,
    write_compare_html,
    write_report_html,
)
from a800lab.report.register import REGISTER
from tests.report_fixture import make_gpu_report, make_report

VOID = {"img", "meta", "br", "hr", "link", "input"}
EXTERNAL = re.compile(r"""(src|href)\s*=\s*["']?(https?:)?//|url\(\s*["']?https?:""", re.I)
PNG_SRC = re.compile(r'<img src="data:image/png;base64,([A-Za-z0-9+/=]+)"')


CARD_PARTS = ("status", "where", "stated", "scope", "measured", "why", "sources", "small")


class Page(HTMLParser):
    """Checks that tags nest and close; collects each table's rows (cell texts and the classes
    of the row and of every element in it) and each claim card ({"id", "classes", "noisy",
    "readings": [item texts], part: text for CARD_PARTS})."""

    def __init__(self, text: str):
        super().__init__()
        self.stack, self.errors, self.tables, self.cards = [], [], [], []
        self.headings, self._cell, self._parts = [], None, []
        self.feed(text)
        self.close()

    def handle_starttag(self, tag, attrs):
        classes = (dict(attrs).get("class") or "").split()
        if tag in VOID:
            return
        self.stack.append(tag)
        if tag == "article":
            self.cards.append({"id": dict(attrs)["id"].removeprefix("claim-"),
                               "classes": set(classes), "readings": [], "noisy": False})
        elif self.cards and "article" in self.stack:
            self.cards[-1]["noisy"] |= "noisy" in classes
            part = next((c for c in classes if c in CARD_PARTS), None)
            part = part or ("readings" if tag == "li" else None)
            self._parts.append((tag, part, []))
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append({"cells": [], "classes": set(classes)})
        elif tag in ("td", "th"):
            self._cell = []
        if self.tables and self.tables[-1] and "tr" in self.stack:
            self.tables[-1][-1]["classes"].update(classes)

    def handle_endtag(self, tag):
        if tag in VOID:
            return
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1:]}")
            return
        self.stack.pop()
        if self._parts and self._parts[-1][0] == tag and "article" in self.stack:
            _, part, text = self._parts.pop()
            text = " ".join("".join(text).split())
            if part == "readings":
                self.cards[-1]["readings"].append(text)
            elif part and part not in self.cards[-1]:   # the card's own, not a reading's
                self.cards[-1][part] = text
        if tag in ("td", "th"):
            self.tables[-1][-1]["cells"].append(" ".join("".join(self._cell).split()))
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)
        for _, _, text in self._parts:
            text.append(data)
        if self.stack and self.stack[-1] in ("h1", "h2", "h3"):
            self.headings.append(data)


@pytest.fixture(scope="module")
def gpu_report():
    return make_gpu_report(complete=False, stopped="budget",
                           points={"planned": 40, "measured": 38, "ok": 37, "failed": 1,
                                   "not_measured": 2})


@pytest.fixture(scope="module")
def gpu_html(gpu_report):
    return render_report_html(gpu_report)


@pytest.fixture(scope="module")
def cpu_html():
    return render_report_html(make_report())


def images(text: str) -> list[bytes]:
    return [base64.b64decode(b) for b in PNG_SRC.findall(text)]


@pytest.mark.parametrize("which", ["h200_box", "cpu_box"])   # not "gpu": that id is a marker
def test_page_is_well_formed_and_self_contained(which, gpu_html, cpu_html):
    text = gpu_html if which == "h200_box" else cpu_html
    page = Page(text)
    assert page.errors == [] and page.stack == []
    assert text.startswith("<!DOCTYPE html>") and '<meta charset="utf-8">' in text
    assert EXTERNAL.search(text) is None
    assert "http://" not in text and "https://" not in text
    pngs = images(text)
    assert len(pngs) == (5 if which == "h200_box" else 4)   # the CPU run has no bus bandwidth
    assert all(p.startswith(b"\x89PNG\r\n\x1a\n") for p in pngs)
    assert text.count("<img") == len(pngs)


def test_external_url_check_catches_urls():
    for bad in ('<img src="https://cdn.example/x.png">', "<a href=//cdn.example>",
                "<style>a{background:url(http://x)}</style>"):
        assert EXTERNAL.search(bad)


def test_header_names_device_scope_and_completeness(gpu_html, cpu_html):
    page = Page(gpu_html)
    assert page.headings[0] == "a800lab report: NVIDIA H200 (GPU)"
    assert "quick mode" in gpu_html and "2026-12-01T02:03:04+00:00" in gpu_html
    assert "wall time 95 s" in gpu_html
    assert ("38 of 40 points measured; run the same command again to resume (stopped: the time "
            "budget ran out)") in gpu_html
    assert "CPU fallback:" not in gpu_html
    assert Page(cpu_html).headings[0] == "a800lab report: AMD EPYC 7B13 (2 cores) (CPU fallback)"
    assert "Complete: 14 of 14 points measured" in cpu_html
    assert "they are never GPU results" in cpu_html


def test_a_card_drawn_per_status_for_every_claim(gpu_report, gpu_html):
    cards = Page(gpu_html).cards
    by_id = {c["id"]: c for c in gpu_report["claims"]}
    assert [c["id"] for c in cards] == [c["id"] for c in gpu_report["claims"]
                                        if c["kind"] == "measured" and c["status"] !=
                                        NOT_MEASURABLE] + [
        c["id"] for c in gpu_report["claims"] if c["kind"] == "documentation"] + [
        c["id"] for c in gpu_report["claims"] if c["status"] == NOT_MEASURABLE]
    assert len(cards) == len(REGISTER) == len(gpu_report["claims"])
    for card in cards:
        claim = by_id[card["id"]]
        assert card["status"] == claim["status"] and f"v-{LOOKS[claim['status']].css}" in \
            card["classes"]
        assert card["stated"] == claim["stated"] and card["where"].startswith(claim["where"])
        assert claim["chapter_path"] in card["small"]
        assert card["noisy"] == claim["noisy"]
        assert card.get("measured", "—") == "Measured: " + claim["measured"] if \
            claim["measured"] else "measured" not in card
        literal = [r for r in claim["readings"] if r["decides"]]
        if claim["kind"] == "measured":   # the literal reading first, marked as deciding
            assert card["readings"][0].startswith(f"{literal[0]['name']} (decides): ")
            assert card["readings"][-1] == f"decided: {claim['decides']}"
        if claim["reason"].endswith(f" ({claim['documents']})"):   # its documents apart
            assert card["why"] + f" ({claim['documents']})" == "Why: " + claim["reason"]
            assert card["sources"] == "Documents: " + claim["documents"]
    assert {c["status"] for c in cards} >= {HOLDS, FAILS, INCONCLUSIVE, FAILED, NOT_MEASURED,
                                            NOT_MEASURABLE, AGREES, PARTLY, CONTRADICTED}
    idle = next(c for c in cards if c["id"] == "idle_cut")
    assert "percentage points: the idle fraction falls by 25 points" in idle["readings"][1]
    assert f"→ {FAILS} 9 points ± 2" in idle["readings"][1]      # the other reading's outcome
    docs = next(c for c in cards if c["id"] == "mps_isolation")
    assert "v-doc-partly" in docs["classes"] and "MPS client" in docs["why"]
    assert ".inconclusive{" in gpu_html and ".doc-partly" in gpu_html
    assert "white-space:nowrap" in gpu_html.split(".status{")[1].split("}")[0]
    assert "overflow-wrap:anywhere" not in gpu_html.split(".claim .sources")[0]  # words whole
    assert gpu_html.count("<details><summary>readings and the rule</summary>") == sum(
        bool(c["readings"]) or c["kind"] == "measured" for c in gpu_report["claims"])


def test_a_report_from_before_the_kinds_shows_every_claim_once():
    old = make_report(series={})   # the claim cards only: no figures to draw
    for claim in old["claims"]:   # report_version 2 had no kind, cites or readings
        for key in ("kind", "cites", "readings", "other_readings"):
            claim.pop(key, None)
    cards = Page(render_report_html(old)).cards
    assert sorted(c["id"] for c in cards) == sorted(c["id"] for c in old["claims"])


def test_a_cpu_run_never_draws_a_gpu_claim_green_or_red(cpu_html):
    for card in Page(cpu_html).cards:
        if card["id"] in ("tile_shape", "mp_memory"):
            assert not {"v-holds", "v-fails"} & card["classes"]
            assert card["status"] != HOLDS and card["status"] != FAILS
    assert ".method-cpu{" in cpu_html and "dashed" in cpu_html


def test_text_is_escaped():
    report = make_report(device_name="<b>box</b>")
    next(c for c in report["claims"] if c["kind"] == "measured")["measured"] = \
        "<script>alert('x')</script> & more"
    text = render_report_html(report)
    assert "<script>" not in text and "<b>box</b>" not in text
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt; &amp; more" in text
    assert Page(text).errors == []


def test_figures_only_for_series_present():
    assert report_figures(make_report(series={})) == {}
    text = render_report_html(make_report(series={}))
    assert images(text) == [] and "no series measured yet" in text
    only_tiles = make_report(series={"tiles": make_report()["series"]["tiles"], "peaks": [],
                                     "train": None})
    assert list(report_figures(only_tiles)) == ["tiles"]
    assert len(images(render_report_html(only_tiles))) == 1


@pytest.mark.parametrize("gpu, names", [(True, ("NVIDIA H200", "GPU", "quick")),
                                        (False, ("AMD EPYC 7B13 (2 cores)", "CPU fallback"))])
def test_every_figure_title_names_device_and_mode(gpu, names):
    figures = report_figures(make_report(gpu=gpu))
    assert set(figures) == ({"peaks", "tiles", "roofline", "train", "busbw"} if gpu
                            else {"peaks", "tiles", "roofline", "train"})
    for key, fig in figures.items():
        axes = fig.get_axes()
        assert axes, key
        for ax in axes:
            for name in names:
                assert name in ax.get_title(), (key, ax.get_title())


def roof_lines(fig) -> dict:
    return {line.get_gid(): line for line in fig.axes[0].get_lines()
            if (line.get_gid() or "").startswith("roof:")}


def test_the_roofline_puts_the_tiles_under_the_datasheet_and_measured_roofs(gpu_report,
                                                                           gpu_html):
    fig = report_figures(gpu_report)["roofline"]
    roofs = roof_lines(fig)
    assert set(roofs) == {"roof:datasheet", "roof:measured"}
    assert max(roofs["roof:datasheet"].get_ydata()) == 989.4
    assert max(roofs["roof:measured"].get_ydata()) == 700.1
    points = [line for line in fig.axes[0].get_lines() if line.get_gid() is None
              and line.get_marker() == "o" and len(line.get_xdata()) == 1
              and line.get_xdata()[0] == 1365.3]
    assert len(points) == len(gpu_report["series"]["roofline"])
    hollow = [p for p in points if p.get_markerfacecolor() == "white"]
    assert [p.get_ydata()[0] for p in hollow] == [655.0]         # the one noisy tile
    assert "(solid) and the matmul rate and copy bandwidth this report measured" in gpu_html


def test_a_cpu_roofline_has_only_the_measured_roof_and_says_why(cpu_html):
    fig = report_figures(make_report())["roofline"]
    assert set(roof_lines(fig)) == {"roof:measured"}
    assert "only the matmul rate and copy bandwidth this report measured (dashed; the lab&#x27;s " \
        "table has no datasheet row for this device)" in cpu_html


def test_noisy_tiles_are_hatched_and_failed_ones_named(gpu_report, gpu_html):
    fig = report_figures(gpu_report)["tiles"]
    ax = fig.get_axes()[0]
    bars = [p for p in ax.patches if p.get_height() > 0]
    tiles = gpu_report["series"]["tiles"]
    ok = [t for t in tiles if t["outcome"] == "ok"]
    assert len(bars) == len(ok)
    assert sum(bool(b.get_hatch()) for b in bars) == sum(t["noisy"] for t in ok) == 1
    assert [t.get_text() for t in ax.get_yticklabels()][0] == "128x256x64 w8 s3 g8"  # best
    assert "256x256x64 w8 s4 g8 (error)" in ax.get_xlabel()
    assert "256x256x64 w8 s4 g8</code>: error — out of shared memory" in gpu_html


def test_health_section(gpu_html, cpu_html):
    tables = Page(gpu_html).tables
    cards = next(t for t in tables if t[0]["cells"][:2] == ["device", "name"])
    assert [r["cells"][0] for r in cards[1:]] == ["cuda:0", "cuda:1"]
    assert "flagged" in cards[2]["classes"] and "flagged" not in cards[1]["classes"]
    assert cards[1]["cells"][5] == "71%"
    assert "cuda:1 matmul TFLOP/s 497 is 29% below its siblings&#x27; median 700" in gpu_html
    busbw = next(t for t in tables if t[0]["cells"][0] == "message size (bytes)")
    assert len(busbw) == 4
    assert "TF32 is off for float32 matmuls" in gpu_html
    assert "no GPU here: bus bandwidth needs 2 or more GPUs" in cpu_html
    assert "one card: no siblings to compare it with" in cpu_html
    memory = next(t for t in tables if t[0]["cells"] == ["GPU", "name", "verdict", "why"])
    assert [r["cells"][2] for r in memory[1:]] == ["ok", "drain"]
    assert "flagged" in memory[2]["classes"] and "flagged" not in memory[1]["classes"]
    assert "no NVIDIA driver: nothing to check" in cpu_html
    # doctor's own tables (GPUs, topology, affinity) travel with the report
    assert "doctor's full report" in gpu_html and "<pre>" in gpu_html
    assert "more than 40% below its datasheet figure" in gpu_html


def test_thresholds_and_environment(gpu_report, gpu_html):
    tables = Page(gpu_html).tables
    rules = next(t for t in tables if t[0]["cells"] == ["threshold", "value"])
    assert {r["cells"][0] for r in rules[1:]} >= {"accumulation_gap", "loss_tolerance"}
    decided = ("decided: the confirmed better guide tile over the other tiles' median tile "
               "against 2.5x in every run")
    assert html.escape(decided) in gpu_html
    env = {r["cells"][0]: r["cells"][1] for r in
           next(t for t in tables if t[0]["cells"] == ["fact", "value"])[1:]}
    assert env["fingerprint"] == "bbbbbbbbbbbb" and env["NVIDIA driver"] == "550.54.15"
    assert env["Python"] == "3.11.9" and env["host"] == "gpu-box"


def test_missing_values_render_as_dashes():
    report = make_report()
    report["health"]["cards"][0].update(matmul_tflops=None, copy_gbs=None)
    for key in ("environment", "thresholds", "plan", "wall_s"):
        report.pop(key)
    report["series"]["peaks"][0]["tflops"] = None
    text = render_report_html(report)
    cards = next(t for t in Page(text).tables if t[0]["cells"][:2] == ["device", "name"])
    assert cards[1]["cells"][3] == "—" and cards[1]["cells"][6] == "—"
    assert "wall time —" in text
    bare = render_report_html({"kind": "a800lab-report", "report_version": 1})
    assert Page(bare).errors == [] and "no claims in this report" in bare


def test_compare_page():
    a = make_report()
    b = make_gpu_report(complete=False, stopped="cancelled",
                        points={"planned": 40, "measured": 12})
    c = compare_reports(a, b, "cpu-run/", "gpu-run/")
    text = render_compare_html(c)
    page = Page(text)
    assert page.errors == [] and page.stack == [] and EXTERNAL.search(text) is None
    assert "A is CPU fallback, B is a GPU" in text
    assert "B was not complete (12 of 40 points measured, stopped: cancelled)" in text
    env = next(t for t in page.tables if t[0]["cells"] == ["field", "A", "B", "meaning"])
    assert ["mode", "CPU fallback", "GPU"] == env[1]["cells"][:3]
    figures = next(t for t in page.tables if t[0]["cells"][-1] == "B / A")
    tile = next(r for r in figures if r["cells"][0] == "guide tile / fp32")
    assert tile["cells"][1:] == ["0.05", "2.9", "x", "58.00x"]
    claims = next(t for t in page.tables if t[0]["cells"][:2] == ["claim", "text"])
    rows = {r["cells"][0]: r for r in claims[1:]}
    # a CPU's method beside a GPU's verdict: side by side only with each scope named
    shape = rows["tile_shape"]
    assert shape["cells"][2].startswith("method shown on CPU") and "on this CPU" in \
        shape["cells"][2]
    assert shape["cells"][3].startswith("holds here") and "on this GPU: NVIDIA H200" in \
        shape["cells"][3]
    assert shape["cells"][4] == "different scopes" and "changed" not in shape["classes"]
    same = compare_reports(make_gpu_report(), make_gpu_report(claims=[
        {**cl, "status": FAILS} if cl["id"] == "amp_speed" else cl
        for cl in make_gpu_report()["claims"]]))
    page = Page(render_compare_html(same))
    claims = next(t for t in page.tables if t[0]["cells"][:2] == ["claim", "text"])
    changed = [r["cells"][0] for r in claims[1:] if "changed" in r["classes"]]
    assert changed == ["amp_speed"]


def test_write_helpers(tmp_path, gpu_report):
    c = compare_reports(make_report(), make_report())
    out = write_compare_html(c, tmp_path / "sub" / "compare.html")
    assert out == tmp_path / "sub" / "compare.html"
    assert out.read_text(encoding="utf-8") == render_compare_html(c)
    report = make_report(series={}, device_name="Ωmega box")
    out = write_report_html(report, tmp_path / "report.html")
    assert "Ωmega box" in out.read_bytes().decode("utf-8")


def test_a_report_from_before_the_register_still_shows_its_claims():
    old = {"id": "tile_spread", "text": "the right tile gives 2.5x", "status": HOLDS,
           "scope": "on this CPU", "measured": "5.4x", "reason": "", "chapter": "02",
           "chapter_title": "TensorCore tiles",
           "chapter_path": "notebooks/02-tensor-core-tiles.ipynb", "noisy": False}
    text = render_report_html(make_report(report_version=1, claims=[old], series={}))
    assert Page(text).errors == [] and "Measured or measurable here" in text
    assert "the right tile gives 2.5x" in text and "5.4x" in text


def test_a_documentation_finding_names_its_documents_apart():
    report = make_report(series={})
    claim = next(c for c in report["claims"] if c["kind"] == "documentation")
    claim["reason"] = f"the documents say so ({claim['documents']})"
    card = next(x for x in Page(render_report_html(report)).cards if x["id"] == claim["id"])
    assert card["why"] == "Why: the documents say so"
    assert card["sources"] == "Documents: " + claim["documents"]
