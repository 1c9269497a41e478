"""From a report's records to its verdicts, health, figures and series (report.run measures,
this reads; no torch). A judge reads a claim's records only once every point of its steps has
one (never a verdict from part of a grid); on a CPU a claim a CPU does not answer is "method
shown on CPU".

    facts = judge_claims(records, plan, device_name="NVIDIA H200", price_per_gpu_hour_usd=2.0)
    facts["claims"], facts["health"], facts["figures"], facts["series"]
"""

import dataclasses
from collections.abc import Iterable

from ..core.results import Record
from ..core.units import MIB
from ..workloads.stress import DATASHEET_THRESHOLD, THRESHOLD, CardResult, flag_cards
from .claims import (
    FAILED,
    JUDGED,
    METHOD_ON_CPU,
    NOT_MEASURABLE,
    NOT_MEASURED,
    UNTESTABLE,
    Claim,
    Verdict,
    figure,
)
from .judge import Context, Finding, failures_text, median_ms, newest_by_step, noisy, ok, typical
from .plan import Plan, resolve_points
from .register import REGISTER

CPU_ANSWERS = ("counted or computed the same way on any device (bytes, calls, gradients), so "
               "a CPU answers it")


def _missing(claim: Claim, j: Context, resolved) -> str:
    """Why the claim cannot be judged yet ("" when every point of its steps has a record)."""
    planned = [(s, p) for s, p in resolved if s.name in claim.steps]
    if not planned:
        return "no step of this battery measures it"
    got = sum(any(r.params == p for r in j.steps.get(s.name, [])) for s, p in planned)
    if got == len(planned):
        return ""
    names = ", ".join(f"'{n}'" for n in dict.fromkeys(s.name for s, _ in planned))
    return (f"{got} of the {len(planned)} point(s) of step {names} measured; run the same "
            "command again to resume")


def _failed(claim: Claim, j: Context) -> str:
    """Why a claim whose points are all measured gave its judge nothing to judge."""
    got = [r for s in claim.steps for r in j.steps.get(s, [])]
    names = ", ".join(f"'{s}'" for s in claim.steps if s in j.steps)
    return (f"step {names}: " + (failures_text(got) or "its points gave nothing to judge")
            + "; running again gives the same: change the configuration or the machine")


def on_cpu(status: str, claim: Claim, j: Context) -> str:
    """The CPU rule: on a CPU a judged claim a CPU does not answer is "method shown on CPU"."""
    return METHOD_ON_CPU if status in JUDGED and not j.on_gpu and not claim.cpu_answers \
        else status


def _verdict(claim: Claim, j: Context, resolved, figures: dict) -> Verdict:
    scope = (f"on this GPU: {j.device_name} ({j.plan.device})" if j.on_gpu else
             f"on this CPU ({j.device_name})")
    if claim.not_measurable:   # its judge, if any, only shows the method on the lab's workload
        found = claim.judge and not _missing(claim, j, resolved) and claim.judge(j, claim)
        return Verdict(claim.id, NOT_MEASURABLE, scope if found else "",
                       found.measured if found else "", claim.not_measurable,
                       found.figures if found else {}, bool(found and found.noisy),
                       tuple({"name": name, "status": NOT_MEASURABLE, "text": text}
                             for name, (_, text) in found.readings.items()) if found else ())
    if claim.doc:
        return Verdict(claim.id, claim.doc.verdict, reason=f"{claim.doc.finding} "
                       f"({claim.doc.cited()})")
    untestable = j.plan.untestable.get(claim.id, "")
    missing = _missing(claim, j, resolved)
    if missing:
        return Verdict(claim.id, UNTESTABLE if untestable else NOT_MEASURED, scope,
                       reason=untestable or missing)
    found: Finding | None = claim.judge(j, claim)
    if found is None:
        return Verdict(claim.id, UNTESTABLE if untestable else FAILED, scope,
                       reason=untestable or _failed(claim, j))
    status, reason = on_cpu(found.status, claim, j), found.reason
    if untestable:
        status, reason = UNTESTABLE, untestable
    elif status == METHOD_ON_CPU and found.status != METHOD_ON_CPU or \
            status == METHOD_ON_CPU and not reason:
        about = f"a claim about {claim.about}" if claim.about else "a GPU claim"
        reason = (f"{about}: this CPU ran its method at small sizes; the numbers show the method "
                  "works, not what a GPU does")
    elif status in JUDGED and not j.on_gpu:
        reason = f"{reason}; {CPU_ANSWERS}" if reason else CPU_ANSWERS
    measured = found.measured
    if found.noisy and measured:
        measured += " (noisy: some timings behind it were noisy; run again before acting)"
    for name, fig in found.figures.items():
        figures[f"{claim.id}.{name}"] = fig
    readings = tuple({"name": name, "status": on_cpu(s, claim, j), "text": text}
                     for name, (s, text) in found.readings.items())
    return Verdict(claim.id, status, scope, measured, reason, found.figures, found.noisy,
                   readings)


def judge_claims(records: Iterable[Record], plan: Plan, *, device_name: str,
                 price_per_gpu_hour_usd: float) -> dict:
    """Verdicts, health, figures and series of the report; see the module docstring."""
    steps = newest_by_step(records)
    j = Context(steps, plan, device_name, price_per_gpu_hour_usd)
    resolved = resolve_points(plan, [r for rs in steps.values() for r in rs])
    figures: dict[str, dict] = {}
    verdicts = [_verdict(claim, j, resolved, figures).to_dict(claim.to_dict())
                for claim in REGISTER]
    health = _health(steps, plan)
    for card in health["cards"]:
        for key, label, unit in (("matmul_tflops", "matmul TFLOP/s", "TFLOP/s"),
                                 ("copy_gbs", "copy GB/s", "GB/s")):
            figures[f"health.{card['device']}.{card['precision']}.{key}"] = figure(
                f"{card['device']} {card['precision']} {label}", card[key], unit)
    for row in health["busbw"].get("rows", []):
        figures[f"busbw.{row['size_bytes']}"] = figure(
            f"all-reduce busbw at {row['size_bytes'] / MIB:g} MiB", row["busbw_gbs"], "GB/s")
    return {"claims": verdicts, "health": health, "figures": figures,
            "series": _series(steps, health["busbw"].get("rows", []))}


def _health(steps: dict[str, list[Record]], plan: Plan) -> dict:
    """Per-card peaks (the main card's in the siblings' precision first), sibling flags, busbw."""
    cards: list[CardResult] = []
    sibling_precisions = {r.params["precision"] for r in steps.get("siblings", [])}
    for record in typical(ok(steps.get("peak", []) + steps.get("siblings", []))):
        p = record.params["precision"]
        if sibling_precisions and p not in sibling_precisions:
            continue
        m = record.metrics
        cards.append(CardResult(record.params["device"], m.get("card_name") or "", p,
                                record.throughput, m.get("copy_gbs"), m.get("datasheet_tflops"),
                                m.get("datasheet_copy_gbs"), noisy(record)))
    rows = [{"size_bytes": r.params["size_bytes"], "busbw_gbs": r.throughput,
             "algbw_gbs": r.metrics.get("algbw_gbs"), "time_ms": median_ms(r),
             "link_gbs": r.metrics.get("link_gbs"), "noisy": noisy(r)}
            for r in typical(ok(steps.get("hierarchical", [])))
            if r.params.get("op") == "all_reduce"]
    busbw = ({"untestable": plan.untestable["busbw"]} if "busbw" in plan.untestable else
             {"rows": rows, "link_gbs": next((r["link_gbs"] for r in rows), None)})
    return {"cards": [{"device": c.device, "name": c.name, "precision": c.precision,
                       "matmul_tflops": c.matmul_tflops, "datasheet_tflops": c.datasheet_tflops,
                       "ratio_of_datasheet": (c.matmul_tflops / c.datasheet_tflops
                                              if c.datasheet_tflops else None),
                       "copy_gbs": c.copy_gbs, "datasheet_copy_gbs": c.datasheet_gbs,
                       "noisy": c.noisy} for c in cards],
            "flags": [dataclasses.asdict(f) for f in flag_cards(cards)],
            "threshold": THRESHOLD, "datasheet_threshold": DATASHEET_THRESHOLD, "busbw": busbw}


def _series(steps: dict[str, list[Record]], busbw: list[dict]) -> dict:
    """Rows for the report's figures (`busbw`: the health section's rows)."""
    peaks = [{"device": r.params["device"], "card_name": r.metrics.get("card_name"),
              "precision": r.params["precision"], "tflops": r.throughput,
              "datasheet_tflops": r.metrics.get("datasheet_tflops"), "noisy": noisy(r)}
             for r in typical(ok(steps.get("peak", []) + steps.get("siblings", [])))]
    tiles = [{"config": _config_label(step, r),
              "tflops": r.throughput if r.outcome == "ok" else None, "noisy": noisy(r),
              "outcome": r.outcome, "message": r.message}
             for step in ("tiles", "guide_tiles") for r in steps.get(step, [])
             if r.params.get("backend") != "torch"]
    train = [{"model": r.params["model"], "size": r.params["size"],
              "precision": r.params["precision"], "samples_per_s": r.throughput,
              "peak_mib": r.metrics["step_peak_bytes"] / MIB, "noisy": noisy(r)}
             for r in typical(ok(steps.get("amp", [])))]
    points, roofs = _roofline(steps)
    return {"peaks": peaks, "tiles": tiles, "train": train, "busbw": [
        {k: r[k] for k in ("size_bytes", "busbw_gbs", "noisy")} for r in busbw],
        "roofline": points, "roofs": roofs}


def _roofline(steps: dict[str, list[Record]]) -> tuple[list[dict], dict]:
    """The tile points at their arithmetic intensity, and the roofs of their precision: the
    datasheet's, and the matmul rate and copy bandwidth the report's peak step measured."""
    tiles = [(step, r) for step in ("tiles", "guide_tiles") for r in ok(steps.get(step, []))
             if r.metrics.get("arithmetic_intensity")]
    if not tiles:
        return [], {}
    precision = tiles[0][1].params["precision"]
    points = [{"config": _config_label(step, r),
               "kind": "cublas" if r.params.get("backend") == "torch" else
               "guide" if step == "guide_tiles" else "tile",
               "intensity_flop_per_byte": r.metrics["arithmetic_intensity"],
               "tflops": r.throughput, "noisy": noisy(r)}
              for step, r in tiles if r.params["precision"] == precision]
    peak = next((r for r in typical(ok(steps.get("peak", [])))
                 if r.params["precision"] == precision), None)
    if peak is None:
        return points, {"precision": precision}
    return points, {"precision": precision, "datasheet_tflops": peak.metrics.get(
        "datasheet_tflops"), "datasheet_gbs": peak.metrics.get("datasheet_copy_gbs"),
        "measured_tflops": peak.throughput, "measured_gbs": peak.metrics.get("copy_gbs"),
        "measured_noisy": noisy(peak), "measured_size": peak.params.get("size")}


def _config_label(step: str, r: Record) -> str:
    """A tile point's name in the figures: its config ("guide " for the guide's), or cuBLAS."""
    if r.params.get("backend") == "torch":
        return "cuBLAS"
    blocks = "x".join(str(r.params.get(k)) for k in ("block_m", "block_n", "block_k"))
    return ("guide " if step == "guide_tiles" else "") + (r.metrics.get("tile_config") or blocks)

