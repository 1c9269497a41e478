"""What a chapter cell shows must be true of what ran: a figure is a picture (never
"<Figure size 860x460 with 1 Axes>" text), and a chapter writes to stderr (a red box in
JupyterLab) only where it means to: a cell tagged `a800lab-stderr` in its metadata.

    output_problems(cell, outputs)   # [] or one sentence per problem

notebooks/conftest.py applies it to every cell nbval runs, so the README test command checks
every chapter's outputs while running it once.
"""

from __future__ import annotations

import re

STDERR_TAG = "a800lab-stderr"  # a cell whose stderr the chapter means (e.g. an error shown)
FIGURE_TEXT = re.compile(r"<(?:matplotlib\.figure\.)?\w*Figure size [\d.]+x[\d.]+ with \d+ Axes>")


def output_problems(cell, outputs) -> list[str]:
    """The problems of one executed cell's outputs (nbformat NotebookNodes or dicts)."""
    problems = []
    tags = (cell.get("metadata") or {}).get("tags", [])
    for out in outputs:
        kind = out.get("output_type")
        if kind in ("display_data", "execute_result"):
            data = out.get("data") or {}
            text = str(data.get("text/plain", ""))
            if "image/png" not in data and FIGURE_TEXT.search(text):
                problems.append(f"a figure is shown as text ({FIGURE_TEXT.search(text)[0]}), "
                                "not as a picture")
        elif kind == "stream" and out.get("name") == "stderr" and STDERR_TAG not in tags:
            text = " ".join(str(out.get("text", "")).split())
            problems.append(f"the cell wrote to stderr (a red box in JupyterLab): {text[:300]!r}")
    return problems
