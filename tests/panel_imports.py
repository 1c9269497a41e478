"""Which test code imports a panel (a800lab.widgets or ipywidgets): the conftest leaves such
modules out, or skips such tests, where ipywidgets is missing (a lent GPU machine's stack)."""

import re

# a panel import at a module's top (no indent) or inside a test's body (indented)
_PANELS = re.compile(r"^([ \t]*)(?:(?:from|import) (?:a800lab\.widgets|ipywidgets)\b|"
                     r"from a800lab import .*\bwidgets\b)", re.MULTILINE)


def imports_panels(source: str, *, top_level: bool) -> bool:
    """Whether `source` imports a panel (a800lab.widgets or ipywidgets): at its top level only,
    or anywhere in it (a test's body)."""
    return any(not indent or not top_level for indent in _PANELS.findall(source))
