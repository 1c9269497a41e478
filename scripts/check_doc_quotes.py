"""Is every quotation of the register's documentation rows on a page the row links? For each row
decided by documentation, every passage its finding quotes ('...', two words or more; a
bracketed insert [...] splits it) is looked for in the text of the pages it names.

    python scripts/check_doc_quotes.py --fetch             # download each page (needs a network)
    python scripts/check_doc_quotes.py --pages DIR          # copies: DIR/<slug>.{txt,html,md}
    python scripts/check_doc_quotes.py --pages DIR --slugs  # print each address's file name

A page's text is compared after markup is dropped (tags, Markdown links and code marks, reST
roles) and quotes, dashes, whitespace and case are made uniform. Prints one line per quotation
(found; NOT FOUND on every page its row links; no copy: not on those stored, and one of its
pages is not) and exits 1 if one was NOT FOUND.
"""

from __future__ import annotations

import argparse
import html
import re
import sys
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from a800lab.report.documented import DOCUMENTED  # noqa: E402

QUOTE = re.compile(r"(?<![A-Za-z])'(.+?)'(?![A-Za-z])")


def slug(url: str) -> str:
    """A page's file name in --pages: the address without its scheme, '/' and '.' as '_'."""
    return re.sub(r"[^A-Za-z0-9]+", "_", url.split("://", 1)[-1]).strip("_")


def normal(text: str) -> str:
    """Text as compared: no markup, uniform quotes, dashes and spaces, lower case."""
    text = html.unescape(re.sub(r"<[^>]+>", " ", text))
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)            # [text](link)
    text = re.sub(r":\w+:`~?([^`<]*?)(?:\s*<[^>]*>)?`", r"\1", text)  # :class:`x` (reST)
    text = text.replace("`", "").replace("*", "")
    for a, b in (("‘", "'"), ("’", "'"), ("“", '"'), ("”", '"'), ("–", "-"), ("—", "-"),
                 ("\u00a0", " ")):
        text = text.replace(a, b)
    return " ".join(text.split()).lower()


def quotations(finding: str) -> list[str]:
    """The finding's quoted passages of two words or more, split at bracketed inserts."""
    out = []
    for quote in QUOTE.findall(finding):
        out += [p.strip(" .,;") for p in re.split(r"\[[^\]]*\]", quote)
                if len(p.split()) >= 2]
    return out


def page_text(url: str, pages: Path | None, fetch: bool) -> str | None:
    if pages is not None:
        for suffix in (".txt", ".html", ".md"):
            path = pages / f"{slug(url)}{suffix}"
            if path.exists():
                return path.read_text(encoding="utf-8", errors="replace")
    if fetch:
        request = urllib.request.Request(url, headers={"User-Agent": "a800lab quote check"})
        try:
            with urllib.request.urlopen(request, timeout=30) as reply:
                return reply.read().decode("utf-8", errors="replace")
        except OSError as exc:
            print(f"  could not fetch {url}: {exc}", file=sys.stderr)
    return None


def check(pages: Path | None, fetch: bool) -> int:
    missing = 0
    for claim in (c for c in DOCUMENTED if c.doc):
        texts = {url: page_text(url, pages, fetch) for _, _, url in claim.doc.sources}
        have = {url: normal(t) for url, t in texts.items() if t is not None}
        for quote in quotations(claim.doc.finding):
            where = [url for url, text in have.items() if normal(quote) in text]
            status = ("found" if where else "NOT FOUND" if len(have) == len(texts) else
                      "no copy")   # not on the pages stored; one it links is not stored
            missing += status == "NOT FOUND"
            shown = quote if len(quote) < 70 else quote[:67] + "..."
            print(f"{claim.id:20} {status:9} '{shown}'" + (f"  ({where[0]})" if where else ""))
    print(f"{missing} quotation(s) not found on the pages their rows link")
    return 1 if missing else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=Path, help="a folder of stored page copies")
    parser.add_argument("--fetch", action="store_true", help="download pages not stored")
    parser.add_argument("--slugs", action="store_true",
                        help="print each linked address and its file name, then stop")
    args = parser.parse_args()
    if args.slugs:
        for claim in (c for c in DOCUMENTED if c.doc):
            for _, _, url in claim.doc.sources:
                print(f"{slug(url)}  {url}")
        return 0
    if args.pages is None and not args.fetch:
        parser.error("give --pages DIR, --fetch, or both")
    return check(args.pages, args.fetch)


if __name__ == "__main__":
    sys.exit(main())
