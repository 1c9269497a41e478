"""The claim register: every claim of the guide and the checks beside it, in the guide's order,
and the sentences that hold no claim, with why. The one source of the report's rows, chapter
11's table, docs/claims.md and `python -m a800lab report --register [--json]`."""

import re

from . import compute, snippets, systems, training
from .claims import Claim
from .documented import DOCUMENTED, NO_CLAIM

__all__ = ["CLAIMS", "NO_CLAIM", "REGISTER", "register_markdown", "register_rows"]


def _guide_order(claim: Claim) -> tuple:
    """The guide's sentences (G before D, by section and sentence), then the checks beside it."""
    if not claim.cites:
        return (2,)
    doc, *numbers = re.split(r"\.", claim.cites[0])
    return (0 if doc == "G" else 1, *map(int, numbers))


_DEFINED = [v for module in (compute, training, systems, snippets) for v in vars(module).values()
            if isinstance(v, Claim)] + list(DOCUMENTED)
REGISTER: tuple[Claim, ...] = tuple(sorted(_DEFINED, key=_guide_order))
CLAIMS: dict[str, Claim] = {c.id: c for c in REGISTER}
if len(CLAIMS) != len(REGISTER):
    raise RuntimeError("two register entries share an id")


def register_rows() -> list[dict]:
    """One row per claim (`report --register --json`)."""
    return [c.to_dict() for c in REGISTER]


def _cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def register_markdown() -> str:
    """The register as a Markdown table (docs/claims.md)."""
    head = ("| claim | cites | the guide says | kind | readings (the literal one decides) | "
            "decided by | chapter |\n|---|---|---|---|---|---|---|")
    rows = []
    for r in register_rows():
        readings = "; ".join(f"{'**' if x['decides'] else ''}{x['name']}"
                             f"{'**' if x['decides'] else ''}: {x['text']}"
                             + (f" (not measured: {x['unmeasured']})" if x.get("unmeasured")
                                else "") for x in r["readings"]) or "—"
        decides = r["decides"] + (f" ({r['documents']})" if r["documents"] else "")
        rows.append(f"| `{r['id']}` | {_cell(r['where'])} | {_cell(r['stated'])} | {r['kind']} "
                    f"| {_cell(readings)} | {_cell(decides)} | {r['chapter']} |")
    no_claim = "\n".join(f"| {sid} | {_cell(why)} |" for sid, why in NO_CLAIM.items())
    return "\n".join([head, *rows, "", "Sentences that hold no claim:", "",
                      "| sentence | why |\n|---|---|", no_claim])


def register_table():
    """The register as a pandas DataFrame (chapter 11)."""
    import pandas as pd

    return pd.DataFrame(register_rows()).set_index("id")
