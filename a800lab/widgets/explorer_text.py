"""The words and tables of the Explorer panel: status summaries, the results table, captions.

    summary(result, elapsed_s, run_number=2, threads_note="CPU fallback, 1 torch thread")
    table_html(df, ["batch_size", "precision"], {"20261130T2145...": 1})
    auto_series(df, "n", ["n", "mode"])

Pure functions of records and frames, so the panel's text is tested without widgets.
"""

from __future__ import annotations

import html
import math

import pandas as pd

from ..core.results import Record, param_column
from ..core.sweep import SweepResult
from .params import format_param

TABLE_ROWS = 12  # the newest points; panel.results has them all


def conditions_text(device: str, torch_threads: int | None) -> str:
    """"GPU cuda:0" or "CPU fallback, 1 torch thread": where a panel runs, for its status."""
    if device != "cpu":
        threads = "" if torch_threads is None else f", {torch_threads} CPU threads"
        return f"GPU {device}{threads}"
    return f"CPU fallback, {torch_threads} torch thread{'s' * (torch_threads != 1)}"


def run_numbers(run_ids) -> dict[str, int]:
    """Run id -> 1, 2, ... in start order (ids sort by start time)."""
    return {run: i for i, run in enumerate(sorted(set(run_ids)), start=1)}


def describe_record(record: Record) -> str:
    point = ", ".join(f"{k}={format_param(v)}" for k, v in record.params.items())
    return f"{point}: {record.outcome}: {record.message}"


def summary(result: SweepResult, elapsed_s: float, *, run_number: int, conditions: str,
            stopped_at: int | None = None) -> str:
    """One status line for a finished or stopped run: counts, noise, failures, conditions;
    `stopped_at`: how many points were done when Stop was pressed."""
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
        text += (f" {noisy} noisy (hollow markers; hover 'noisy' in the table for why: "
                 f"{noisy_reason(records)}).")
    failed = [r for r in records if r.outcome != "ok"]
    if failed:
        text += f" First failure: {describe_record(failed[0])}"
    return text


def noisy_reason(records: list[Record]) -> str:
    """The first noise reason among `records` (what was seen and what to do)."""
    for record in records:
        reasons = record.noise.get("reasons") or ()
        if record.noise.get("noisy") and reasons:
            return str(reasons[0])
    return "no reason recorded"


def auto_series(df: pd.DataFrame, x: str, params: list[str]) -> pd.Series:
    """Series names that separate every configuration: the device label, plus each non-swept
    parameter that takes more than one value among the points (e.g. "mode=fast"). Runs are
    kept apart by the plot itself, not by the name."""
    varying = [p for p in params if p != x and p in df and df[p].astype(str).nunique() > 1]
    parts = [] if df["label"].nunique() <= 1 and varying else [df["label"].astype(str)]
    parts += [p.removeprefix("param.") + "=" + df[p].map(format_param) for p in varying]
    names = parts[0]
    for part in parts[1:]:
        names = names + ", " + part
    return names


def fixed_differences(measured: pd.DataFrame, params: dict, controls: dict, x: str) -> str:
    """"; these points ran at precision=bf16 (the control reads fp32)" for each parameter
    other than `x` whose values in the newest run differ from its control now; "" if none."""
    if measured.empty or "run_id" not in measured:
        return ""
    newest = measured[measured["run_id"] == measured["run_id"].max()]
    notes = []
    for name, control in controls.items():
        column = param_column(name)
        if column == x or column not in newest:
            continue
        ran = list(dict.fromkeys(format_param(v) for v in newest[column]))
        now = format_param(control.value)
        if ran != [now]:
            notes.append(f"{name}={', '.join(ran)} (the control reads {now})")
    return f"; these points ran at {'; '.join(notes)}" if notes else ""


def _cell(value) -> str:
    if isinstance(value, float):
        return "" if math.isnan(value) else f"{value:.4g}"
    return html.escape(format_param(value))


def table_html(df: pd.DataFrame, params: list[str], numbers: dict[str, int]) -> str:
    """The newest points as an HTML table: run, parameters, outcome, throughput, timing, noise
    (hover the word "noisy" for the reason) and the message."""
    if df.empty:
        return ""
    tail = df.tail(TABLE_ROWS)
    columns = [c for c in [*params, "outcome", "throughput", "throughput_unit", "median_ms",
                           "iqr_ms", "message"]
               if c in tail and (tail[c].notna() & (tail[c].astype(str) != "")).any()]
    head = "".join(f"<th>{html.escape(c.removeprefix('param.'))}</th>"
                   for c in ["run", *columns, "noisy"])
    body = []
    for _, row in tail.iterrows():
        cells = [f"<td>#{numbers.get(row.get('run_id', ''), '?')}</td>"]
        cells += [f"<td>{_cell(row[c])}</td>" for c in columns]
        reason = str(row.get("noise_reason") or "")
        noisy = bool(row.get("noisy")) and row.get("outcome") == "ok"
        cells.append(f'<td class="a800lab-noisy" title="{html.escape(reason)}" '
                     'style="text-decoration: underline dotted; cursor: help">noisy</td>'
                     if noisy else "<td></td>")
        body.append(f"<tr>{''.join(cells)}</tr>")
    note = ""
    if len(df) > TABLE_ROWS:
        note = (f"<caption style='caption-side: bottom'>the newest {TABLE_ROWS} of {len(df)} "
                "points; panel.results has them all</caption>")
    return (f'<table class="a800lab-results">{note}<thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(body)}</tbody></table>")


def overlay_hint(recorded_dir, found: int) -> str:
    """What the overlay box is for, and how to put a recorded run there."""
    where = html.escape(str(recorded_dir))
    lead = (f"{found} recorded run file(s) in {where}." if found else
            f"No recorded runs in {where} yet.")
    return (f'<div style="line-height: 1.3"><small>{lead} To overlay a run from another '
            "machine (an A800, an H200), put its JSON Lines file there: the output of "
            "<i>python -m a800lab sweep ... --out FILE</i> or of a panel's Save.</small></div>")
