"""The claim register: every claim of the guide has an entry (measured, or why not), each
measured entry says its reading and rule, and it is the one source of the README's list and
chapter 11's table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from a800lab.cli import main
from a800lab.report.claims import SOURCES, Claim
from a800lab.report.register import CLAIMS, REGISTER, register_markdown, register_table
from a800lab.report.verdicts import JUDGES

REPO = Path(__file__).resolve().parents[1]
README_START, README_END = "<!-- register:start -->", "<!-- register:end -->"

# The guide's checkable statements, as the issue that asked for the register lists them.
GUIDE = {
    "summary table": ("deploy_complexity", "tc_peak", "mp_memory", "idle_cut", "compression"),
    "TensorCore section": ("tile_shape", "buffers_resnet50", "sparsity_util"),
    "mixed precision": ("amp_speed", "accum_frequency"),
    "scheduling": ("mps_k8s", "placement"),
    # unit_util_mfu: the same claim read as a training step's MFU (issue 20)
    "distributed": ("hierarchical", "unit_util", "unit_util_mfu", "nlp_speed_memory"),
    "cost": ("energy", "accum_traffic", "elastic"),
    "conclusion": ("overall",),
    "FAQ": ("embeddings_fp32", "versions", "nccl_logs", "ecc_memory_clocks", "windows_build"),
    "customer cases": ("case_speedup", "case_35_to_12", "case_23_to_9ms", "case_minus_27",
                       "case_minus_34", "case_plus_41"),
}
SECOND_DOCUMENT = ("accum_snippet", "amp_trains", "workload_kinds")


def test_every_claim_of_the_guide_has_an_entry_where_it_stands():
    for section, ids in GUIDE.items():
        for cid in ids:
            assert CLAIMS[cid].source == "the guide" and CLAIMS[cid].section == section, cid
    for cid in SECOND_DOCUMENT:
        assert CLAIMS[cid].source == "the guide's second document"
    guide_ids = {c for ids in GUIDE.values() for c in ids} | set(SECOND_DOCUMENT)
    assert {c.id for c in REGISTER if c.source.startswith("the guide")} == guide_ids
    # what is not the guide's says whose it is, apart from the guide's rows
    others = [c for c in REGISTER if not c.source.startswith("the guide")]
    assert {c.source for c in others} <= set(SOURCES) and all(
        c.section == "beside the guide" for c in others)


def test_each_entry_is_measured_with_a_reading_and_rule_or_says_why_not():
    for c in REGISTER:
        if c.not_measurable:
            assert not c.judge and len(c.not_measurable) > 40, c.id
        else:
            assert c.judge in JUDGES, c.id
            assert c.reading and c.decides and c.method, c.id
            assert c.cpu_answers or c.about, c.id   # what a CPU run cannot answer, and why
    for c in REGISTER:   # the guide's figure is quoted in the claim as stated
        if c.figure and c.source.startswith("the guide") and c.section != "customer cases":
            first = c.figure.split(",")[0].split("-")[0].rstrip("%x+").lstrip("~")
            assert first in c.stated, c.id


def test_the_guides_block_shapes_and_snippet_are_read_faithfully():
    shape = CLAIMS["tile_shape"]
    assert "16x16x16" in shape.reading and "32x16x16" in shape.reading
    assert "tl.dot needs every dimension >= 16" in shape.reading
    assert "WMMA" in shape.other and "without tensor cores" in shape.reading
    snippet = CLAIMS["accum_snippet"]
    assert "TensorFlow" in snippet.other and "divides the loss by k" in snippet.other
    assert "zero_grad() Keras optimizers do not have" in snippet.other
    assert "framework's default fp32" in CLAIMS["amp_speed"].reading
    assert "TF32" in CLAIMS["amp_speed"].other
    assert CLAIMS["amp_speed"].low == 1.8 and CLAIMS["amp_speed"].high == 2.5
    assert CLAIMS["tc_peak"].low == 92.0 and CLAIMS["idle_cut"].low == 25.0
    assert "one lever" in CLAIMS["idle_cut"].reading


def test_a_claim_must_give_a_judge_or_a_reason():
    with pytest.raises(ValueError, match="give a judge, or say why"):
        Claim("x", "the guide", "FAQ", "something", "", "09")
    with pytest.raises(ValueError, match="source"):
        Claim("x", "a blog", "FAQ", "something", "", "09", not_measurable="because")


def test_the_readme_lists_the_register_as_the_register_prints_it(capsys):
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    block = readme.split(README_START)[1].split(README_END)[0].strip()
    assert block == register_markdown()
    assert main(["report", "--register"]) == 0
    assert capsys.readouterr().out.strip() == register_markdown()


def test_chapter_11_shows_the_register_itself():
    nb = json.loads((REPO / "notebooks" / "11-report.ipynb").read_text())
    code = "".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
    assert "register_table()" in code
    table = register_table()
    assert list(table.index) == [c.id for c in REGISTER]
    assert {"stated", "reading", "decides", "chapter"} <= set(table.columns)
