"""Two `a800lab report` runs side by side: their environments (core.envdiff), every figure as
B / A (None unless both are positive numbers in the same unit) and each claim on both machines.

    c = compare_reports(load_report("a800/"), load_report("h200/report.json"), "a800/", "h200/")
    print(format_compare(c))                                      # report --compare A/ B/
"""

import json
import math
import textwrap
from pathlib import Path
from typing import Any

from ..core.doctor import table_lines
from ..core.envdiff import diff_sides, show_value, side_from_report

REPORT_KIND, REPORT_FILE, POINTS_FILE = "a800lab-report", "report.json", "points.jsonl"
KNOWN_VERSIONS = (1, 2, 3)   # 1: before the claim register; 3: cited claims (by id all)
RUN_HINT = "run `python -m a800lab report --out {dir}` first"


def load_report(path: str | Path) -> dict:
    """A report written by `python -m a800lab report`: `path` is its directory or its
    report.json. A ValueError names the path and what to do."""
    p = Path(path)
    file = p / REPORT_FILE if p.is_dir() else p
    if p.is_dir() and not file.is_file():
        why = ("holds points.jsonl but no report.json: the run was interrupted before it wrote "
               "its report; run the same command again to resume it"
               if (p / POINTS_FILE).is_file() else "has no report.json")
        raise ValueError(f"{p} {why}: {RUN_HINT.format(dir=p)}")
    if not p.is_file() and not p.is_dir():
        raise ValueError(f"{p}: no such report directory or file: {RUN_HINT.format(dir=p)}, "
                         "then compare the directories it wrote")
    try:
        data = json.loads(file.read_text(encoding="utf-8", errors="replace"))
    except json.JSONDecodeError as err:
        raise ValueError(f"{file}: not valid JSON (line {err.lineno}, column {err.colno}: "
                         f"{err.msg}); the file is damaged or truncated: run "
                         f"`python -m a800lab report --out {file.parent}` again") from None
    if not isinstance(data, dict):
        raise ValueError(f"{file}: holds a JSON {type(data).__name__}, not a report (a JSON "
                         f"object); give the directory `python -m a800lab report` wrote")
    if data.get("kind") != REPORT_KIND:
        hint = ("it looks like a doctor report: compare those with `python -m a800lab diff A B`"
                if "gpus" in data and "system" in data
                else "give a report.json written by `python -m a800lab report`")
        raise ValueError(f"{file}: kind {data.get('kind')!r} is not {REPORT_KIND!r}; {hint}")
    if data.get("report_version") not in KNOWN_VERSIONS:
        raise ValueError(f"{file}: report_version {data.get('report_version')!r} is unknown (this "
                         f"a800lab reads version {', '.join(map(str, KNOWN_VERSIONS))}); upgrade "
                         "a800lab, or run the report again with this one")
    return data


# ---- comparing ---------------------------------------------------------------------------------
def _side(report: dict, path: str) -> dict:
    points = report.get("points") or {}
    return {"path": path, **{k: report.get(k) for k in ("device_name", "scope", "mode",
                                                        "created", "complete")},
            "stopped": report.get("stopped") or "", "wall_s": report.get("wall_s"),
            "points": {"planned": points.get("planned"), "measured": points.get("measured")}}


def figure_ratio(a: Any, b: Any) -> float | None:
    """B / A for two figures' values; None unless both are positive finite numbers."""
    pa, pb = (float(v) if not isinstance(v, bool) and isinstance(v, int | float)
              and math.isfinite(v) and v > 0 else None for v in (a, b))
    return None if pa is None or pb is None else pb / pa


def _figures(fa: dict, fb: dict) -> list[dict]:
    rows = []
    for key in [*fa, *(k for k in fb if k not in fa)]:
        ea, eb = fa.get(key) or {}, fb.get(key) or {}
        only = "a" if key not in fb else "b" if key not in fa else None
        same_unit = only is not None or ea.get("unit") == eb.get("unit")
        rows.append({"key": key, "label": ea.get("label") or eb.get("label") or key,
                     "unit": ea.get("unit") if key in fa else eb.get("unit"),
                     "a": ea.get("value"), "b": eb.get("value"),
                     "ratio": figure_ratio(ea.get("value"), eb.get("value")) if same_unit
                     else None, "only": only, "units_differ": not same_unit})
    return rows


def _claims(ca: list, cb: list) -> list[dict]:
    """Each claim on both sides; verdicts of different scopes (a GPU's against a CPU's, or two
    different cards) are set side by side only with each scope named."""
    by_a, by_b = ({c["id"]: c for c in side if isinstance(c, dict) and "id" in c}
                  for side in (ca, cb))
    rows = []
    for cid in [*by_a, *(k for k in by_b if k not in by_a)]:
        va, vb = by_a.get(cid, {}), by_b.get(cid, {})
        first = va or vb
        same_scope = _scope_kind(va.get("scope")) == _scope_kind(vb.get("scope"))
        changed = va.get("status") != vb.get("status") and (same_scope or not (va and vb))
        rows.append({"id": cid, "text": first.get("stated") or first.get("text", ""),
                     "chapter": first.get("chapter"),
                     "a_status": va.get("status"), "b_status": vb.get("status"),
                     "a_scope": va.get("scope"), "b_scope": vb.get("scope"),
                     "same_scope": same_scope,
                     "a_measured": va.get("measured"), "b_measured": vb.get("measured"),
                     "a_noisy": bool(va.get("noisy")), "b_noisy": bool(vb.get("noisy")),
                     "changed": changed, "note": "changed" if changed else "different scopes"
                     if not same_scope and va and vb else ""})
    return rows


def _scope_kind(scope) -> str:
    """"on this GPU: <card>" / "on this CPU": the part that makes two verdicts comparable."""
    text = str(scope or "")
    if text.startswith("on this GPU"):
        return text.split(" (cuda")[0]      # the card's name, not which ordinal it had
    return "CPU" if text.startswith("on this CPU") else text


def _notes(sa: dict, sb: dict, figures: list[dict]) -> list[str]:
    notes = []
    if sa["scope"] != sb["scope"]:
        a, b = (("a GPU" if s["scope"] == "GPU" else str(s["scope"] or "of unknown scope"))
                for s in (sa, sb))
        notes.append(f"A is {a}, B is {b}: ratios compare different kinds of machine, not one "
                     "machine's software or settings")
    elif sa["scope"] == "CPU fallback":
        notes.append("both are CPU fallback runs: their figures check the lab's methods and say "
                     "nothing about a GPU")
    elif sa["device_name"] != sb["device_name"]:
        notes.append(f"A ran on {sa['device_name']}, B on {sb['device_name']}: ratios compare "
                     "hardware; compare each with its datasheet (% of peak) too")
    if sa["mode"] != sb["mode"]:
        notes.append(f"A is a {sa['mode']} report, B a {sb['mode']} one: sizes and grids "
                     "differ, so some figures are not like for like")
    for name, s in (("A", sa), ("B", sb)):
        if s["complete"] is False:
            stopped = f", stopped: {s['stopped']}" if s["stopped"] else ""
            notes.append(f"{name} was not complete ({s['points']['measured']} of "
                         f"{s['points']['planned']} points measured{stopped}): its missing "
                         "figures and claims show as absent or not measured yet; run its report "
                         "command again to resume")
    differ = [f["label"] for f in figures if f.get("units_differ")]
    if differ:
        notes.append(f"{len(differ)} figure(s) have different units on the two sides, so no "
                     f"ratio: {', '.join(differ)}")
    return notes


def compare_reports(a: dict, b: dict, a_path: str = "A", b_path: str = "B") -> dict:
    """Reports a and b (load_report's dicts) side by side; see the module docstring."""
    sa, sb = _side(a, str(a_path)), _side(b, str(b_path))
    figures = _figures(a.get("figures") or {}, b.get("figures") or {})
    notes = _notes(sa, sb, figures)
    env_diff = None
    if isinstance(a.get("doctor"), dict) and isinstance(b.get("doctor"), dict):
        diff = diff_sides(side_from_report(a["doctor"], str(a_path)),
                          side_from_report(b["doctor"], str(b_path)))
        env_diff = diff.to_dict()
        notes += diff.notes
    else:
        missing = [n for n, r in (("A", a), ("B", b)) if not isinstance(r.get("doctor"), dict)]
        notes.append(f"{' and '.join(missing)} {'holds' if len(missing) == 1 else 'hold'} no "
                     "doctor report: environments not compared")
    return {"a": sa, "b": sb, "env_diff": env_diff, "figures": figures,
            "claims": _claims(a.get("claims") or [], b.get("claims") or []), "notes": notes}


def compare_tables(c: dict):
    """compare_reports' figures and claims as two pandas DataFrames (chapter 11): (figure, A, B,
    unit, B / A) and (claim, A, B, changed, note)."""
    import pandas as pd

    figures = pd.DataFrame([{"figure": f["label"], "A": f["a"], "B": f["b"],
                             "unit": f["unit"] or "", "B / A": format_ratio(f)}
                            for f in c["figures"]], columns=["figure", "A", "B", "unit", "B / A"])
    claims = pd.DataFrame([{"claim": cl["id"], "A": _side_status(cl, "a"),
                            "B": _side_status(cl, "b"), "changed": cl["changed"],
                            "note": cl["note"]} for cl in c["claims"]],
                          columns=["claim", "A", "B", "changed", "note"])
    return figures.set_index("figure"), claims.set_index("claim")


# ---- text --------------------------------------------------------------------------------------
def format_number(value: Any) -> str:
    """A figure's value for a table: "—" where missing, 4 significant digits otherwise."""
    if value is None or isinstance(value, float) and not math.isfinite(value):
        return "—"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def format_ratio(f: dict) -> str:
    """A compared figure's B / A: "1.23x", "—", or "only in A"."""
    if f["only"]:
        return f"only in {f['only'].upper()}"
    return "—" if f["ratio"] is None else f"{f['ratio']:.2f}x"


def describe_side(s: dict) -> str:
    """One side's header line: path, device, scope, mode, created, completeness."""
    pts = s.get("points") or {}
    done = ("complete" if s.get("complete") else
            f"incomplete: {pts.get('measured')} of {pts.get('planned')} points"
            + (f", stopped: {s['stopped']}" if s.get("stopped") else ""))
    return (f"{s['path']}: {s.get('device_name') or '—'} ({s.get('scope') or '—'}), "
            f"{s.get('mode') or '—'} report of {s.get('created') or '—'}, {done}")


def _table(headers: tuple, rows: list[tuple]) -> list[str]:
    return ["  " + line for line in table_lines(headers, rows)]


def _side_status(cl: dict, side: str) -> str:
    text = f"{cl[f'{side}_status'] or '—'}{' (noisy)' * cl[f'{side}_noisy']}"
    if not cl["same_scope"] and cl[f"{side}_scope"]:
        text += f" [{_scope_kind(cl[f'{side}_scope'])}]"
    return text


def format_compare(c: dict, width: int = 100) -> str:
    """The comparison as plain text: sides, notes, environment differences, figures, claims."""
    out = [f"A: {describe_side(c['a'])}", f"B: {describe_side(c['b'])}"]
    if c["notes"]:
        out += ["", "Notes:"]
        for note in c["notes"]:
            out += textwrap.wrap(note, width, initial_indent="  - ", subsequent_indent="    ")
    d = c.get("env_diff")
    if d is not None:
        diffs = d["differences"]
        out += ["", f"Environment differences ({len(diffs)}):" if diffs else
                "Environment: no differences in the fields both doctor reports record."]
        for diff in diffs:
            out.append(f"  {diff['label']}: A {show_value(diff['field'], diff['a'])} | "
                       f"B {show_value(diff['field'], diff['b'])}")
            out += textwrap.wrap(diff["meaning"], width, initial_indent="      ",
                                 subsequent_indent="      ")
        for name, items in (("A", d["only_a"]), ("B", d["only_b"])):
            if items:  # per-GPU facts of a GPU report against a CPU one, mostly
                text = ", ".join(f"{i['label']} = {show_value(i['field'], i[name.lower()])}"
                                 for i in items)
                out += textwrap.wrap(f"Recorded only in {name} ({len(items)}): {text}", width,
                                     initial_indent="  ", subsequent_indent="      ")
    rows = [(f["label"], format_number(f["a"]), format_number(f["b"]), f["unit"] or "",
             format_ratio(f)) for f in c["figures"]]
    out += ["", "Figures (B / A):" if rows else "Figures: neither report has any."]
    out += _table(("figure", "A", "B", "unit", "B/A"), rows) if rows else []
    claims = [(cl["id"], *(_side_status(cl, side) for side in ("a", "b")), cl["note"])
              for cl in c["claims"]]
    out += ["", "Claims:" if claims else "Claims: neither report has any."]
    out += _table(("claim", "A", "B", ""), claims) if claims else []
    return "\n".join(out)
