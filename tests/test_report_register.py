"""The claim register read against the guide itself (docs/guide/): every checkable sentence
cited by a row, every other sentence in the no-claim list with why, no cite the translation
lacks, every `stated` the translation's own words, one definition per claim, and the one
source of docs/claims.md, `report --register [--json]` and chapter 11's table."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from a800lab.cli import main
from a800lab.report import compute, documented, snippets, systems, training
from a800lab.report.claims import DOCUMENTED, MEASURED, UNMEASURABLE, Claim, Doc, Reading
from a800lab.report.register import (
    CLAIMS,
    NO_CLAIM,
    REGISTER,
    register_markdown,
    register_rows,
    register_table,
)

REPO = Path(__file__).resolve().parents[1]
GUIDE = REPO / "docs" / "guide"
CHECKABLE = ("G.1.5-9 G.2.2-6 G.3.2-5 G.4.2-4 G.5.5-6 G.6.3 G.6.5 G.6.8 G.7.2-3 G.7.5 G.8.3-5 "
             "G.9.2-4 G.10.4 G.11.2 G.11.4 G.11.6 G.11.8 G.11.10 D.3.1 D.4.2-4 D.4.6 D.4.8 D.5.1 "
             "D.5.3-5")   # the sentences the issue that asked for the citations lists
# sentences a later reading found to hold a claim after all, and those the register once gave
# "other rows check it" as the reason to hold none: the rows that check them cite them
CLAIM_AFTER_ALL = {"G.3.1": {"tf32_speed", "half_speed"}, "G.4.1": {"mp_memory", "amp_trains"},
                   "G.7.4": {"k8s_priority"}, "G.1.4": {"amp_trains"}, "G.6.2": {"versions"}}


def sentences() -> dict[str, str]:
    """Every id of both translations and its text (a code block and the notes included)."""
    text = "\n".join(p.read_text(encoding="utf-8") for p in sorted(GUIDE.glob("*.en.md")))
    parts = re.split(r"\[([GD]\.\d+\.\d+)\]", text)
    return {sid: body for sid, body in zip(parts[1::2], parts[2::2], strict=True)}


def expand(spec: str) -> set[str]:
    out = set()
    for item in spec.split():
        head, _, last = item.rpartition(".")
        low, _, high = last.partition("-")
        out |= {f"{head}.{n}" for n in range(int(low), int(high or low) + 1)}
    return out


def test_the_guide_in_the_project_is_the_shared_translation_where_that_is_at_hand():
    shared = REPO.parent / "shared" / "guide"
    ids = sentences()
    assert len(ids) == 89 and "G.11.10" in ids and "D.5.7" in ids
    if shared.is_dir():
        for path in GUIDE.iterdir():
            assert path.read_bytes() == (shared / path.name).read_bytes(), path.name


def test_every_checkable_sentence_has_a_row_and_every_other_one_says_why_not():
    ids = sentences()
    cited = {sid for c in REGISTER for sid in c.cites}
    assert expand(CHECKABLE) <= cited
    assert cited <= set(ids), cited - set(ids)             # no cite the translation lacks
    assert set(NO_CLAIM) <= set(ids) and not set(NO_CLAIM) & cited
    assert cited | set(NO_CLAIM) == set(ids), set(ids) - cited - set(NO_CLAIM)
    assert all(len(why) > 20 for why in NO_CLAIM.values())


def test_every_stated_claim_is_the_translations_own_words():
    ids = sentences()
    for c in REGISTER:
        if c.source:   # a check beside the guide: its own words, and the sentences it tests
            assert "beside the guide" in c.source, c.id
            assert not c.cites or f"testing the guide {', '.join(c.cites)}" in c.where, c.id
            continue
        text = " ".join(ids[sid] for sid in c.cites)
        for fragment in c.stated.split(" … "):
            assert fragment in text, (c.id, fragment)


def test_each_claim_is_defined_once_with_its_judge_or_its_documents_or_why_not():
    defined = [v for m in (compute, training, systems, snippets) for v in vars(m).values()
               if isinstance(v, Claim)] + list(documented.DOCUMENTED)
    assert sorted(c.id for c in defined) == sorted(CLAIMS)
    for c in REGISTER:
        if c.kind == MEASURED:
            assert c.judge.__name__ == c.id and c.steps and c.decides, c.id
            assert sum(r.literal for r in c.readings) == 1, c.id
            assert c.cpu_answers or c.about, c.id   # what a CPU run cannot answer, and why
            if c.figure and not c.source:           # the guide's figure is in its own words
                assert c.figure.split(",")[0].split("-")[0].rstrip("%x+").lstrip("~") in \
                    c.stated, c.id
        elif c.doc:
            assert c.doc.verdict in DOCUMENTED and len(c.doc.finding) > 80, c.id
            assert all(url.startswith("https://") and title and section
                       for title, section, url in c.doc.sources), c.id
        else:
            assert len(c.not_measurable) > 40, c.id


def test_sentences_that_hold_a_claim_after_all_are_cited_by_the_rows_that_check_them(capsys):
    assert main(["report", "--register", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    for sid, ids in CLAIM_AFTER_ALL.items():
        assert {r["id"] for r in rows if sid in r["cites"]} == ids, sid
        assert sid not in NO_CLAIM
    host = next(r for r in CLAIMS["mp_memory"].readings if r.name == "host memory")
    assert "内存" in host.text and host.unmeasured         # the reading G.4.1's word allows
    k8s = next(r for r in rows if r["id"] == "k8s_priority")
    assert k8s["kind"] == "documentation" and "kubernetes.io" in k8s["documents"]


def test_the_hospital_case_is_one_kind_not_measurable_with_its_method_shown():
    hospital = CLAIMS["case_hospital"]
    assert hospital.kind == UNMEASURABLE and hospital.judge and hospital.steps
    assert hospital.to_dict()["kind"] == "not measurable"
    assert [c.id for c in REGISTER if c.kind == UNMEASURABLE and c.judge] == ["case_hospital"]


def test_a_claim_must_give_exactly_one_way_to_decide_it():
    with pytest.raises(ValueError, match="give one of"):
        Claim("x", ("G.1.1",), "something", "09")
    with pytest.raises(ValueError, match="give one of"):
        Claim("x", ("G.1.1",), "something", "09", not_measurable="because",
              doc=Doc("agrees with the documentation", "it says so", ()))
    with pytest.raises(ValueError, match="exactly one literal reading"):
        Claim("x", ("G.1.1",), "something", "09", judge=len, steps=("peak",), decides="rule",
              readings=(Reading("a", "one way"), Reading("b", "another")))
    with pytest.raises(ValueError, match="cite the guide"):
        Claim("x", (), "something", "09", not_measurable="because")


def test_the_readings_the_issue_names_are_stated_and_the_literal_one_decides():
    literal = {c.id: next(r for r in c.readings if r.literal) for c in REGISTER if c.judge}
    assert literal["idle_cut"].name == "relative"
    assert "percentage points" in [r.name for r in CLAIMS["idle_cut"].readings]
    assert literal["energy"].name == "power" and "watts" in literal["energy"].text
    assert "energy per FLOP" in [r.name for r in CLAIMS["energy"].readings]
    assert re.search(r"fp32 dense -> mixed precision .*-> mixed precision \+ 2:4 sparse",
                     literal["energy"].text)
    assert "sparse tensor cores' datasheet peak" in literal["sparsity_util"].text
    assert "other tiles" in literal["tile_shape"].text and "confirmation run" in \
        literal["tile_shape"].text
    assert "never deciding" in CLAIMS["tile_shape"].readings[2].text
    assert "ResNet-50" in literal["amp_speed"].text and "channels_last" in \
        literal["amp_speed"].text
    assert "ResNet-50" in literal["mp_memory"].text and "ResNet-50" in \
        literal["buffers_resnet50"].text
    assert {"resnet50"} <= set(CLAIMS["amp_speed"].needs)
    assert "ranks on two or more nodes" in literal["hierarchical"].text
    assert "deprecated" in literal["amp_trains"].text and "three seeds" in \
        literal["amp_trains"].text
    assert "fp32 in both" in literal["embeddings_fp32"].text
    assert "eps = 1e-8" in CLAIMS["embeddings_fp32"].readings[1].text
    assert "as printed, run in TensorFlow" in literal["accum_snippet"].text
    assert "the torch emulation" in [r.name for r in CLAIMS["accum_snippet"].readings]
    assert CLAIMS["amp_speed"].low == 1.8 and CLAIMS["amp_speed"].high == 2.5


def test_the_amp_snippets_torch_cuda_amp_calls_are_deprecated_as_its_row_says():
    import warnings

    import torch

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.amp.GradScaler()
        torch.cuda.amp.autocast()
    deprecated = [str(w.message) for w in caught if "is deprecated" in str(w.message)]
    assert any("torch.amp.GradScaler('cuda'" in m for m in deprecated)
    assert any("torch.amp.autocast('cuda'" in m for m in deprecated)
    assert "deprecated" in CLAIMS["amp_trains"].readings[0].text


def test_register_json_and_markdown_are_one_table(capsys):
    assert main(["report", "--register", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["id"] for r in rows] == [c.id for c in REGISTER] == [r["id"] for r in
                                                                   register_rows()]
    for r in rows:
        assert {"id", "cites", "stated", "kind", "readings", "decides", "about",
                "cpu_answers"} <= set(r)
    kinds = {r["kind"] for r in rows}
    assert kinds == {"measured", "documentation", "not measurable"}
    assert main(["report", "--register"]) == 0
    assert capsys.readouterr().out.strip() == register_markdown()


def test_docs_claims_md_is_the_register_as_the_code_prints_it():
    text = (REPO / "docs" / "claims.md").read_text(encoding="utf-8")
    block = text.split("<!-- register:start -->")[1].split("<!-- register:end -->")[0].strip()
    assert block == register_markdown()
    assert "docs/claims.md" in (REPO / "README.md").read_text(encoding="utf-8")


def test_chapter_11_shows_the_register_itself():
    nb = json.loads((REPO / "notebooks" / "11-report.ipynb").read_text())
    code = "".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
    assert "register_table()" in code
    table = register_table()
    assert list(table.index) == [c.id for c in REGISTER]
    assert {"cites", "stated", "kind", "readings", "decides", "chapter"} <= set(table.columns)


def test_the_documentation_rows_read_again_say_what_their_pages_say():
    windows, libraries, memory = (CLAIMS[c].doc for c in ("windows_build", "cuda_libraries",
                                                          "memory_first"))
    assert windows.verdict == "partly agrees with the documentation"
    assert any("intel.com" in url for _, _, url in windows.sources)
    assert "LD_LIBRARY_PATH" in libraries.finding and any(
        "tensorflow/docs" in url for _, _, url in libraries.sources)
    assert "replicated on each machine and each device" not in memory.finding
    assert "synchronizing gradients across each model replica" in memory.finding
