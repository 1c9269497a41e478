"""The chapters and the register say the same: wherever a chapter says how the report decides a
claim it quotes the row (`claim_id` is decided by *the register's words*), the chapters that
explain a row's rule quote it, and the sentences that paraphrase a rule (chapters 04, 08 and
12) name what the row's rule names."""

from __future__ import annotations

import json
import re
from pathlib import Path

from a800lab.report.register import CLAIMS

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
QUOTE = re.compile(r"`([a-z0-9_]+)` is decided by \*(.+?)\*(?=[\s.,;:)]|$)")
# a sentence about how the report decides a claim (its verb, and the report or a claim's id)
JUDGING = re.compile(r"\b(judged|judges|decides|decided|reads the claim|is read|takes it)\b")
# the rows whose rule a chapter explains; each must quote the rule as the register words it
EXPLAINED = {"02": {"tile_shape", "tc_peak"}, "10": {"energy"},
             "11": {"tile_shape", "amp_speed", "mp_memory", "compression", "idle_cut", "energy",
                    "placement", "hierarchical", "accum_snippet", "amp_trains"}}
# sentences that paraphrase a row's rule without quoting it: what both must name
PARAPHRASES = {("04", "amp_speed"): "default fp32", ("12", "unit_util"): "AMP step",
               ("08", "hierarchical"): "time cut at the largest message"}


def markdown(chapter: str) -> str:
    nb = json.loads(next(NOTEBOOKS.glob(f"{chapter}-*.ipynb")).read_text(encoding="utf-8"))
    return " ".join(" ".join("".join(c["source"]).split()) for c in nb["cells"]
                    if c["cell_type"] == "markdown")


def chapters() -> dict[str, str]:
    return {p.name[:2]: markdown(p.name[:2]) for p in sorted(NOTEBOOKS.glob("[0-9][0-9]-*"))}


def sentences(text: str) -> list[str]:
    """Sentences, a table's cells and headings apart."""
    return re.split(r"(?<=[.!?])\s+(?=[A-Z*(`])|\s\|\s|\s#+\s", text)


def test_every_quoted_rule_is_the_registers_own():
    quoted = {}
    for chapter, text in chapters().items():
        for cid, rule in QUOTE.findall(text):
            assert cid in CLAIMS, (chapter, cid)
            assert rule == " ".join(CLAIMS[cid].decides.split()), (chapter, cid, rule)
            quoted.setdefault(chapter, set()).add(cid)
    for chapter, ids in EXPLAINED.items():
        assert ids <= quoted.get(chapter, set()), (chapter, ids - quoted.get(chapter, set()))


def test_a_sentence_on_how_the_report_decides_a_claim_quotes_or_names_its_rule():
    ids = "|".join(map(re.escape, CLAIMS))
    about_a_claim = re.compile(rf"[GD]\.\d+\.\d+|`({ids})`")
    texts = chapters()
    for chapter, text in texts.items():
        for sentence in sentences(text):
            if not (JUDGING.search(sentence) and "report" in sentence
                    and about_a_claim.search(sentence)) or QUOTE.search(sentence):
                continue
            assert any(ch == chapter and phrase in sentence
                       for (ch, _), phrase in PARAPHRASES.items()), (chapter, sentence[:200])
    for (chapter, cid), phrase in PARAPHRASES.items():   # the paraphrase and the rule agree
        assert any(JUDGING.search(x) and phrase in x for x in sentences(texts[chapter])), \
            (chapter, phrase)
        claim = CLAIMS[cid]
        assert phrase in " ".join([claim.decides, *(r.text for r in claim.readings
                                                    if r.literal)]), (cid, phrase)


def test_the_chapters_no_longer_say_what_the_register_does_not():
    assert "against the same product without TensorCores, with the best tile" not in \
        markdown("02")
    assert "as **energy per TFLOP**" not in markdown("10")
    assert "With ranks on two or more nodes (torchrun) it is judged" not in markdown("11")
