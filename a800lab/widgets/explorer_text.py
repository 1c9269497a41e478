"""The Explorer panel's words and tables (status lines, results table, captions) as pure
functions of records and frames, tested without widgets.

    table_html(df, ["batch_size", "precision"], run_numbers(df["run_id"]))   # fits 968 px
"""

import functools
import html
import math
import numbers

import numpy as np
import pandas as pd

from ..core.checks import positive_int
from ..core.noise import default_cpu_threads
from ..core.results import Record, param_column
from ..core.sweep import SweepResult
from ..core.units import MIB
from .params import format_param

TABLE_ROWS = 12  # the newest points; panel.results has them all


def panel_threads(device: str, cpu_threads: int | None) -> int | None:
    """`cpu_threads`, else on a CPU all usable cores but one (for the browser and server), on
    a GPU None (torch's own setting)."""
    if cpu_threads is not None:
        return positive_int("cpu_threads", cpu_threads, "4 (or None for the default)")
    return default_cpu_threads() if device == "cpu" else None


def run_numbers(run_ids) -> dict[str, int]:
    """Run id -> 1, 2, ... in start order (ids sort by start time)."""
    return {run: i for i, run in enumerate(sorted(set(run_ids)), start=1)}


def describe_record(record: Record) -> str:
    """"n=1: error: SystemExit: 2": a point and what became of it."""
    point = ", ".join(f"{k}={format_param(v)}" for k, v in record.params.items())
    return f"{point}: {record.outcome}: {record.message}"


def summary(result: SweepResult, elapsed_s: float, *, run_number: int, conditions: str,
            stopped_at: int | None = None) -> str:
    """The status line of a finished or stopped run; `stopped_at`: points done at Stop."""
    records = result.records
    counts = pd.Series([r.outcome for r in records]).value_counts()
    detail = ", ".join(f"{n} {outcome}" for outcome, n in counts.items()) or "nothing measured"
    if result.cancelled:
        text = f"Stopped after {len(records)} of {result.total} points ({detail})"
    else:
        text = f"Done: {len(records)} points ({detail}) in {elapsed_s:.1f} s"
    text += f", run #{run_number} on {conditions}."
    if result.cancelled and stopped_at is not None:
        text += (f" Stop came with {stopped_at} done; the point in flight was finished."
                 if len(records) > stopped_at else f" Stop came with {stopped_at} done.")
    noisy = sum(bool(r.noise.get("noisy")) for r in records)
    if noisy:
        reason = next((str(r.noise["reasons"][0]) for r in records
                       if r.noise.get("noisy") and r.noise.get("reasons")), "no reason recorded")
        text += f" {noisy} noisy (hollow markers; hover 'noisy' in the table for why: {reason})."
    failed = [r for r in records if r.outcome != "ok"]
    if failed:
        text += f" First failure: {describe_record(failed[0])}"
    return text


def auto_series(df: pd.DataFrame, x: str, params: list[str]) -> pd.Series:
    """Series names: the device label plus each other parameter that varies ("mode=fast")."""
    varying = [p for p in params if p != x and p in df and df[p].astype(str).nunique() > 1]
    parts = [] if df["label"].nunique() <= 1 and varying else [df["label"].astype(str)]
    parts += [p.removeprefix("param.") + "=" + df[p].map(format_param) for p in varying]
    return functools.reduce(lambda names, part: names + ", " + part, parts)


def fixed_differences(measured: pd.DataFrame, params: dict, controls: dict, x: str) -> str:
    """"; these points ran at precision=bf16 (the control reads fp32)", or ""."""
    if measured.empty or "run_id" not in measured:
        return ""
    newest = measured[measured["run_id"] == measured["run_id"].max()]
    notes = []
    for name, control in controls.items():
        column = param_column(name)
        if column == x or column not in newest:
            continue
        # a parameter the newest run did not have (another view's) is not a difference
        ran = list(dict.fromkeys(format_param(v) for v in newest[column].dropna()))
        now = format_param(control.value)
        if ran and ran != [now]:
            notes.append(f"{name}={', '.join(ran)} (the control reads {now})")
    return f"; these points ran at {'; '.join(notes)}" if notes else ""


# column -> (header with its unit, factor to the unit); other columns get their unit from
# their suffix (_ms, _s, _bytes, _gbs, _tflops) or are counts and names
HEADERS = {"iqr_ms": ("IQR (ms)", 1), "eval_loss": ("eval loss", 1),
           "accuracy": ("accuracy (%)", 100), "effective_batch": ("effective batch (samples)", 1),
           "model_flops_per_sample": ("model FLOP per sample", 1),
           "mfu_pct_of_datasheet_peak": ("MFU (% of datasheet peak)", 1),
           "mfu_pct_of_measured_peak": ("MFU (% of measured peak)", 1),
           "idle_fraction": ("device idle (%)", 100), "pct_of_link": ("% of the link", 1),
           "message_bytes": ("message (bytes)", 1), "throughput_unit": ("unit", 1),
           "bytes_per_step": ("all-reduced per step (MiB)", 1 / MIB)}
_SUFFIXES = (("_ms", "ms", 1), ("_s", "s", 1), ("_bytes", "MiB", 1 / MIB),
             ("_gbs", "GB/s", 1), ("_tflops", "TFLOP/s", 1))
MEASURED = ("throughput", "median_ms", "iqr_ms")  # a table's first columns, unless told


def header_of(column: str, units: list[str] | None = None) -> tuple[str, float]:
    """(header with its unit, factor to the unit); `units`: the rows' throughput units."""
    if column == "throughput":
        return (f"throughput ({units[0]})" if units and len(units) == 1 else "throughput"), 1
    if column in HEADERS:
        return HEADERS[column]
    name = column.removeprefix("param.")
    for suffix, unit, factor in _SUFFIXES:
        if name.endswith(suffix):
            return f"{name.removesuffix(suffix).replace('_', ' ')} ({unit})", factor
    return name, 1


def _cell(value, factor: float = 1) -> str:
    if value is None:
        return ""
    number = isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))
    if number and (isinstance(value, (float, np.floating)) or factor != 1):
        return "" if math.isnan(value) else f"{value * factor:.4g}"
    return html.escape(format_param(value))


def table_html(df: pd.DataFrame, params: list[str], numbers: dict[str, int], *,
               measured: tuple[str, ...] = MEASURED, more: tuple[str, ...] = ()) -> str:
    """The newest points as an HTML table that fits a notebook: the parameters that differ, the
    outcome when one failed, the `measured` columns; every column behind a toggle."""
    if df.empty:
        return ""
    tail = df.tail(TABLE_ROWS)

    def present(c: str) -> bool:
        return c in tail and bool((tail[c].notna() & (tail[c].astype(str) != "")).any())

    units = list(tail["throughput_unit"].dropna().unique()) if "throughput_unit" in tail else []
    shown = [c for c in measured if present(c)]
    if "throughput" in shown and len(units) > 1:  # mixed units: the unit beside each rate
        shown.insert(shown.index("throughput") + 1, "throughput_unit")
    differ = [p for p in params if present(p) and tail[p].astype(str).nunique() > 1]
    failed = "outcome" in tail and bool((tail["outcome"] != "ok").any())
    main = [*differ, *(["outcome"] if failed else []), *shown]
    every = [c for c in dict.fromkeys([*params, "outcome", *shown, *more, "message"]) if present(c)]
    note = (f"<caption style='caption-side: bottom'>the newest {TABLE_ROWS} of {len(df)} "
            "points; panel.results has them all</caption>") if len(df) > TABLE_ROWS else ""
    # a parameter keeps its name and the values a user types (size_bytes stays in bytes)
    heads = {c: (c.removeprefix("param."), 1) if c in params else header_of(c, units)
             for c in every}
    table = _table(tail, main, numbers, heads, note)
    rest = [c for c in every if c not in main]
    if rest:
        names = ", ".join(heads[c][0] for c in rest[:6]) + (", ..." if len(rest) > 6 else "")
        table += (f"<details><summary><small>all columns ({len(rest)} more: {html.escape(names)})"
                  f"</small></summary>{_table(tail, every, numbers, heads, '')}</details>")
    return table


def with_units(df: pd.DataFrame, params=()) -> pd.DataFrame:
    """`df` with each measured column headed and scaled as in the table ("step peak (MiB)")."""
    units = list(df["throughput_unit"].dropna().unique()) if "throughput_unit" in df else []
    out = df.copy()
    if len(units) == 1 and "throughput" in out:
        out = out.drop(columns="throughput_unit")
    names = {}
    for column in out.columns:
        if column in params or column in ("outcome", "message", "noisy", "run_id"):
            continue
        name, factor = header_of(column, units)
        if factor != 1:
            out[column] = pd.to_numeric(out[column], errors="coerce") * factor
        names[column] = name
    return out.rename(columns=names)


def _table(tail: pd.DataFrame, columns: list[str], numbers: dict[str, int], heads: dict,
           note: str) -> str:
    heads = [heads[c] for c in columns]
    head = "".join(f"<th>{html.escape(h)}</th>" for h in ["run", *(h for h, _ in heads), "noisy"])
    body = []
    for row in tail.to_dict("records"):
        cells = [f"<td>#{numbers.get(row.get('run_id', ''), '?')}</td>"]
        cells += [f"<td>{_cell(row[c], factor)}</td>"
                  for c, (_, factor) in zip(columns, heads, strict=True)]
        reason = str(row.get("noise_reason") or "")
        noisy = bool(row.get("noisy")) and row.get("outcome") == "ok"
        cells.append(f'<td class="a800lab-noisy" title="{html.escape(reason)}" '
                     'style="text-decoration: underline dotted; cursor: help">noisy</td>'
                     if noisy else "<td></td>")
        body.append(f"<tr>{''.join(cells)}</tr>")
    return (f'<table class="a800lab-results">{note}<thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(body)}</tbody></table>")


def overlay_hint(recorded_dir, found: int) -> str:
    where = html.escape(str(recorded_dir))
    lead = (f"{found} recorded run file(s) in {where}." if found else
            f"No recorded runs in {where} yet.")
    return (f'<div style="line-height: 1.3"><small>{lead} To overlay a run from another '
            "machine (an A800, an H200), put its JSON Lines file there: the output of "
            "<i>python -m a800lab sweep ... --out FILE</i> or of a panel's Save.</small></div>")
