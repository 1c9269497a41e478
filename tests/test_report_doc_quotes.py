"""scripts/check_doc_quotes.py: the quotations of the register's documentation rows found on the
pages they link (stored copies or fetched): what counts as a quotation, how a page's markup is
dropped, and found / NOT FOUND / no copy."""

from __future__ import annotations

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "check_doc_quotes.py"
spec = importlib.util.spec_from_file_location("check_doc_quotes", SCRIPT)
quotes = importlib.util.module_from_spec(spec)
spec.loader.exec_module(quotes)


def test_quotations_are_quoted_passages_of_two_words_or_more():
    finding = ("the kernel's author sets it ('only a hint'); DDP 'is proven to be faster than "
               "[the single-process] DataParallel for training'; the label 'GB'")
    assert quotes.quotations(finding) == ["only a hint", "is proven to be faster than",
                                          "DataParallel for training"]


def test_markup_is_dropped_before_comparing():
    page = ("can use [Node Labels and Node Selectors](/docs/x)\nto schedule pods; GPUs in the "
            "`limits` section; is faster than :class:`torch.nn.DataParallel` &amp; more")
    text = quotes.normal(page)
    for quote in ("Node Labels and Node Selectors to schedule pods", "in the limits section",
                  "faster than torch.nn.DataParallel & more"):
        assert quotes.normal(quote) in text


def test_each_quotation_is_found_not_found_or_without_a_copy(tmp_path, capsys, monkeypatch):
    from a800lab.report.claims import PARTLY, Claim, Doc

    rows = (Claim("a", ("G.2.5",), "x", "09", doc=Doc(PARTLY, "it says 'pods can have priority'",
                                                      (("K8s", "s", "https://k8s.test/p/"),))),
            Claim("b", ("G.2.5",), "x", "09", doc=Doc(PARTLY, "it says 'no such words here'",
                                                      (("K8s", "s", "https://k8s.test/p/"),))),
            Claim("c", ("G.2.5",), "x", "09", doc=Doc(PARTLY, "it says 'never stored anywhere'",
                                                      (("X", "s", "https://x.test/q"),))))
    monkeypatch.setattr(quotes, "DOCUMENTED", rows)
    (tmp_path / f"{quotes.slug('https://k8s.test/p/')}.html").write_text(
        "<p>Pods can <b>have</b> priority.</p>")
    assert quotes.check(tmp_path, fetch=False) == 1
    out = capsys.readouterr().out.splitlines()
    assert [line.split()[1] for line in out[:3]] == ["found", "NOT", "no"]
    assert out[-1] == "1 quotation(s) not found on the pages their rows link"
