"""From a report's measured records to its verdicts, health section, comparable figures and
figure series: the judging half of `a800lab report` (report.run measures, this reads).

    from a800lab.report.verdicts import judge_claims
    facts = judge_claims(records, plan, device_name="NVIDIA H200", price_per_gpu_hour_usd=2.0)
    facts["claims"]        # one Verdict dict per claim of claims.CLAIMS, in order
    facts["health"]        # cards (peak and copy bandwidth per GPU), sibling flags, busbw
    facts["figures"]       # flat {key: {"label", "value", "unit"}}: what --compare divides
    facts["series"]        # per-figure rows for the HTML report

`records` are the report's points (a800lab.core.results.Record), each labelled with the name of
its battery step; the newest record of each point counts. A claim whose step was not measured
(budget, Stop) is "not measured yet"; one the plan could not run here is "cannot be tested"
with the plan's reason; the rules are the thresholds of a800lab.report.claims. Pure: no
measuring, no torch.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable

from ..core.results import Record
from ..core.units import MIB
from ..workloads.stress import DATASHEET_THRESHOLD, THRESHOLD, CardResult, flag_cards
from ..workloads.usage import cost_per_million_samples_usd
from .battery import Plan
from .claims import (
    ACCUMULATION_GAP,
    CLAIMS,
    FAILS,
    HOLDS,
    MODEL_ERROR,
    NO_COST_FACTOR,
    NOT_MEASURED,
    OVERLAP_CUT,
    PEAK_SLACK_POINTS,
    UNTESTABLE,
    Verdict,
    figure,
    holds_ratio,
)


def newest_by_step(records: Iterable[Record]) -> dict[str, list[Record]]:
    """The newest record of each point, grouped by step name (the record's label), in the
    order the points were first measured."""
    newest: dict[str, Record] = {}
    for record in records:
        newest[record.point_key() + "|" + record.label] = record
    steps: dict[str, list[Record]] = defaultdict(list)
    for record in newest.values():
        steps[record.label].append(record)
    return dict(steps)


def _ok(records: list[Record]) -> list[Record]:
    return [r for r in records if r.outcome == "ok" and r.throughput]


def _noisy(*records: Record) -> bool:
    return any(bool(r.noise.get("noisy")) for r in records)


def _x(value: float | None) -> str:
    return "—" if value is None else f"{value:.3g}x"


class _Judge:
    """One report's verdicts; each claim method returns a Verdict or None (not measured)."""

    def __init__(self, steps: dict[str, list[Record]], plan: Plan, device_name: str,
                 price_per_gpu_hour_usd: float):
        self.steps, self.plan, self.price = steps, plan, price_per_gpu_hour_usd
        on_gpu = plan.device.startswith("cuda")
        self.scope = (f"on this GPU: {device_name} ({plan.device})" if on_gpu else
                      f"on this CPU ({device_name}): the claim's method only, not a GPU result")
        self.figures: dict[str, dict] = {}

    def verdict(self, claim: str, status: str, measured: str, figures: dict,
                noisy: bool = False, reason: str = "") -> Verdict:
        for name, fig in figures.items():
            self.figures[f"{claim}.{name}"] = fig
        if noisy:
            measured += " (noisy: some timings behind it were noisy; run again before acting)"
        return Verdict(claim, status, self.scope, measured, reason, figures, noisy)

    def peak(self, precision: str, device: str | None = None) -> Record | None:
        device = device or self.plan.device
        for record in _ok(self.steps.get("peak", [])):
            if record.params.get("precision") == precision and record.params.get(
                    "device") == device:
                return record
        return None

    # ---- chapter 02: tiles ---------------------------------------------------------------
    def tile_spread(self) -> Verdict | None:
        ok = _ok(self.steps.get("tiles", []))
        if len(ok) < 2:
            return None
        best, worst = max(ok, key=lambda r: r.throughput), min(ok, key=lambda r: r.throughput)
        ratio = best.throughput / worst.throughput
        shape = "x".join(str(best.params[d]) for d in "mnk")
        text = (f"{len(ok)} tile configs of a {shape} {best.params['precision']} matmul: best "
                f"{best.metrics.get('tile_config')} {best.throughput:.4g} TFLOP/s, worst "
                f"{worst.metrics.get('tile_config')} {worst.throughput:.4g} TFLOP/s: {_x(ratio)}")
        return self.verdict("tile_spread", HOLDS if holds_ratio(ratio, 2.5) else FAILS, text, {
            "ratio": figure("best / worst tile", ratio, "x"),
            "best_tflops": figure("best tile TFLOP/s", best.throughput, "TFLOP/s")},
            _noisy(best, worst))

    def tile_peak(self) -> Verdict | None:
        ok = _ok(self.steps.get("tiles", []))
        if not ok:
            return None
        best = max(ok, key=lambda r: r.throughput)
        pct = best.metrics.get("pct_of_datasheet_peak")
        if pct is None:
            return Verdict("tile_peak", UNTESTABLE, self.scope, reason=(
                "the lab's specs table has no datasheet peak for this device and precision"))
        text = (f"best tile {best.throughput:.4g} TFLOP/s = {pct:.1f}% of the datasheet's "
                f"{best.metrics.get('datasheet_peak_tflops'):.4g} TFLOP/s")
        status = HOLDS if pct >= 85 - PEAK_SLACK_POINTS else FAILS
        return self.verdict("tile_peak", status, text,
                            {"pct_of_peak": figure("best tile, % of datasheet", pct, "%")},
                            _noisy(best))

    # ---- chapter 03: precisions ----------------------------------------------------------
    def _rate_ratio(self, claim: str, top: list[str], base: str, claimed: float):
        base_rec = self.peak(base)
        tops = [(p, self.peak(p)) for p in top]
        if base_rec is None or any(r is None for _, r in tops):
            return None
        ratios = {p: r.throughput / base_rec.throughput for p, r in tops}
        worst = min(ratios.values())
        size = base_rec.params.get("size")
        text = f"{size}^3 matmul: " + ", ".join(
            f"{p} {r.throughput:.4g}" for p, r in [*tops, (base, base_rec)]) + " TFLOP/s; " + \
            ", ".join(f"{p}/{base} {_x(v)}" for p, v in ratios.items())
        return self.verdict(claim, HOLDS if holds_ratio(worst, claimed) else FAILS, text,
                            {f"{p}_over_{base}": figure(f"{p} / {base} matmul rate", v, "x")
                             for p, v in ratios.items()},
                            _noisy(base_rec, *(r for _, r in tops)))

    def tf32_speed(self):
        return self._rate_ratio("tf32_speed", ["tf32"], "fp32", 8)

    def half_speed(self):
        return self._rate_ratio("half_speed", ["bf16", "fp16"], "tf32", 2)

    def fp8_speed(self):
        return self._rate_ratio("fp8_speed", ["fp8"], "bf16", 2)

    def tf32_accuracy(self) -> Verdict | None:
        fp32, tf32 = self.peak("fp32"), self.peak("tf32")
        if fp32 is None or tf32 is None:
            return None
        e32, etf = fp32.metrics.get("rel_error"), tf32.metrics.get("rel_error")
        if not e32 or etf is None:
            return None
        factor = etf / e32
        text = (f"relative error vs float64: fp32 {e32:.3g}, TF32 {etf:.3g} ({factor:.3g}x fp32's)")
        return self.verdict("tf32_accuracy", HOLDS if factor <= NO_COST_FACTOR else FAILS, text,
                            {"error_factor": figure("TF32 error / fp32 error", factor, "x")})

    def sparsity_speed(self) -> Verdict | None:
        ok = _ok(self.steps.get("sparsity", []))
        if not ok:
            return None
        largest = max(ok, key=lambda r: r.params["m"] * r.params["n"] * r.params["k"])
        speedups = {f"{r.params['m']}^3 {r.params['precision']}": r.metrics.get("speedup")
                    for r in ok}
        main = largest.metrics.get("speedup") or 0.0
        text = "2:4-sparse over dense: " + ", ".join(f"{k} {_x(v)}" for k, v in speedups.items())
        return self.verdict("sparsity_speed", HOLDS if holds_ratio(main, 2) else FAILS, text,
                            {"speedup": figure("2:4 sparse / dense (largest shape)", main, "x")},
                            _noisy(*ok))

    # ---- chapter 04: mixed precision -----------------------------------------------------
    def _train_pairs(self) -> list[tuple[str, Record, Record]]:
        by = {(r.params["model"], r.params["precision"]): r for r in _ok(self.steps.get(
            "train", []))}
        return [(m, by[(m, "fp32")], by[(m, "bf16")]) for m, p in by if p == "fp32"
                and (m, "bf16") in by]

    def mp_memory(self) -> Verdict | None:
        pairs = self._train_pairs()
        if not pairs:
            return None
        savings = {m: 1 - b.metrics["step_peak_bytes"] / a.metrics["step_peak_bytes"]
                   for m, a, b in pairs}
        text = "; ".join(
            f"{m}: fp32 step peak {a.metrics['step_peak_bytes'] / MIB:.1f} MiB, bf16 "
            f"{b.metrics['step_peak_bytes'] / MIB:.1f} MiB, saving {100 * savings[m]:.0f}%"
            for m, a, b in pairs)
        status = HOLDS if all(holds_ratio(100 * s, 40) for s in savings.values()) else FAILS
        return self.verdict("mp_memory", status, text, {
            f"{m}_saving_pct": figure(f"{m}: bf16 memory saving", 100 * s, "%")
            for m, s in savings.items()})

    def mp_speed(self) -> Verdict | None:
        pairs = self._train_pairs()
        if not pairs:
            return None
        speed = {m: b.throughput / a.throughput for m, a, b in pairs}
        text = "; ".join(f"{m}: fp32 {a.throughput:.4g}, bf16 {b.throughput:.4g} samples/s "
                         f"({_x(speed[m])})" for m, a, b in pairs)
        status = HOLDS if all(holds_ratio(s, 1.8) for s in speed.values()) else FAILS
        return self.verdict("mp_speed", status, text, {
            f"{m}_speedup": figure(f"{m}: bf16 / fp32 samples/s", s, "x")
            for m, s in speed.items()}, _noisy(*(r for _, a, b in pairs for r in (a, b))))

    # ---- chapter 06: accumulation, max batch ---------------------------------------------
    def accumulation(self) -> Verdict | None:
        ok = _ok(self.steps.get("accumulation", []))
        large = {r.params["model"]: r for r in ok if r.params["accum_steps"] == 1}
        parts, figures, holds, noisy = [], {}, True, False
        for r in ok:
            whole = large.get(r.params["model"])
            if r.params["accum_steps"] == 1 or whole is None:
                continue
            gap = r.metrics.get("accumulation_gap")
            mem = r.metrics["step_peak_bytes"] / whole.metrics["step_peak_bytes"]
            cost = r.throughput / whole.throughput
            holds &= gap is not None and gap <= ACCUMULATION_GAP and mem < 1
            noisy |= _noisy(r, whole)
            m = r.params["model"]
            parts.append(f"{m}: {r.params['accum_steps']} x {r.params['batch_size']} vs "
                         f"{whole.params['batch_size']}: gradient gap {gap:.2g}, peak memory "
                         f"{100 * mem:.0f}% of the large batch's, throughput {100 * cost:.0f}%")
            figures[f"{m}_memory_share"] = figure(f"{m}: accumulated / large-batch memory", mem,
                                                  "x")
            figures[f"{m}_throughput_share"] = figure(f"{m}: accumulated / large-batch "
                                                      "samples/s", cost, "x")
        if not parts:
            return None
        return self.verdict("accumulation", HOLDS if holds else FAILS, "; ".join(parts),
                            figures, noisy)

    def max_batch(self) -> Verdict | None:
        ok = _ok(self.steps.get("max_batch", []))
        if not ok:
            return None
        parts, figures, holds = [], {}, True
        for r in ok:
            name = f"{r.params['model']} {r.params['precision']}"
            error = r.metrics.get("prediction_error")
            holds &= error is not None and abs(error) <= MODEL_ERROR
            limit = r.metrics.get("limit_bytes")
            parts.append(f"{name}: {int(r.throughput)} per micro-batch in "
                         f"{(limit or 0) / MIB:.0f} MiB, model "
                         + ("no prediction" if error is None else f"{100 * error:+.1f}%"))
            figures[f"{r.params['model']}_{r.params['precision']}_batch"] = figure(
                f"{name}: largest micro-batch", r.throughput, "samples")
        if not self.plan.device.startswith("cuda"):
            return self.verdict("max_batch", UNTESTABLE, "; ".join(parts), figures, reason=(
                "on a CPU the verified peak is counted tensor bytes, the memory model's own "
                "accounting, so agreement tests only the model's fit; the largest batches "
                "found are listed"))
        return self.verdict("max_batch", HOLDS if holds else FAILS, "; ".join(parts), figures)

    # ---- chapter 07, 08, 10 --------------------------------------------------------------
    def pipeline_overlap(self) -> Verdict | None:
        ok = {r.params["num_workers"]: r for r in _ok(self.steps.get("pipeline", []))}
        if 0 not in ok or len(ok) < 2:
            return None
        plain, best = ok[0], ok[max(ok)]
        idle0, idle1 = plain.metrics["idle_fraction"], best.metrics["idle_fraction"]
        cut = 1 - idle1 / idle0 if idle0 > 0 else 0.0
        text = (f"device idle {100 * idle0:.0f}% with 0 workers, {100 * idle1:.0f}% with "
                f"{max(ok)} workers + pinned memory + non_blocking ({100 * cut:.0f}% cut); "
                f"samples/s {plain.throughput:.4g} -> {best.throughput:.4g}")
        return self.verdict("pipeline_overlap", HOLDS if cut >= OVERLAP_CUT else FAILS, text, {
            "idle_cut": figure("idle fraction cut by workers", 100 * cut, "%"),
            "speedup": figure("samples/s with / without workers",
                              best.throughput / plain.throughput, "x")}, _noisy(plain, best))

    def compression(self) -> Verdict | None:
        ok = {(r.params["hook"], r.params["sync"]): r for r in _ok(self.steps.get(
            "compression", []))}
        per_sync = {}
        for hook in {h for h, _ in ok}:
            every, quiet = ok.get((hook, "every_micro_batch")), ok.get((hook, "no_sync"))
            if every and quiet:   # accum_steps syncs vs one: the difference is comm per sync
                extra = every.metrics["syncs_per_step"] - quiet.metrics["syncs_per_step"]
                step_ms = {k: statistics.median(r.time_ms) for k, r in (("e", every),
                                                                          ("q", quiet))}
                per_sync[hook] = max(step_ms["e"] - step_ms["q"], 0.0) / extra
        if "allreduce" not in per_sync or len(per_sync) < 2:
            return None
        best = min((h for h in per_sync if h != "allreduce"), key=per_sync.get)
        speed = per_sync["allreduce"] / per_sync[best] if per_sync[best] > 0 else float("inf")
        losses = {h: ok[(h, "no_sync")].metrics.get("eval_loss") for h in per_sync}
        text = ("exposed communication per sync: " + ", ".join(
            f"{h} {ms:.3g} ms" for h, ms in per_sync.items()) + f"; {best} {_x(speed)} faster "
            "than allreduce; eval loss " + ", ".join(f"{h} {v:.4g}" for h, v in losses.items()
                                                     if v is not None))
        return self.verdict("compression", HOLDS if holds_ratio(speed, 3) else FAILS, text,
                            {"speedup": figure(f"allreduce / {best} comm time", speed, "x")},
                            _noisy(*ok.values()))

    def _costs(self) -> tuple[dict[str, Record], dict[str, dict]]:
        """The metered steps by precision, and each one's $ per million samples (a figure)."""
        ok = {r.params["precision"]: r for r in _ok(self.steps.get("usage", []))}
        return ok, {p: figure(f"{p}: $ per million samples",
                              cost_per_million_samples_usd(r.throughput, self.price), "$")
                    for p, r in ok.items()}

    def usage(self) -> tuple[str, dict]:
        """What the metered steps cost: $ per million samples and J per sample per precision."""
        ok, cost = self._costs()
        text = "; ".join(f"{p}: {r.throughput:.4g} samples/s, ${cost[p]['value']:.3g} per "
                         f"million samples at ${self.price:g} per GPU-hour, energy per sample "
                         f"{_joules(r)}" for p, r in ok.items())
        return text, {f"{p}_usd_per_million": c for p, c in cost.items()}

    def bill(self) -> Verdict | None:
        ok, cost = self._costs()
        if "fp32" not in ok or "bf16" not in ok:
            return None
        fp32, bf16 = cost["fp32"]["value"], cost["bf16"]["value"]
        ratio = fp32 / bf16
        text = (f"at ${self.price:g} per GPU-hour: fp32 ${fp32:.3g}, bf16 ${bf16:.3g} per "
                f"million samples ({_x(ratio)}); energy per sample "
                + ", ".join(f"{p} {_joules(r)}" for p, r in ok.items()))
        return self.verdict("bill", HOLDS if holds_ratio(ratio, 2) else FAILS, text, {
            "cost_ratio": figure("fp32 / bf16 cost per million samples", ratio, "x"),
            **{f"{p}_usd_per_million": c for p, c in cost.items()}}, _noisy(*ok.values()))


def _joules(record: Record) -> str:
    j = record.metrics.get("j_per_sample")
    source = record.metrics.get("energy_source")
    return f"unknown ({source})" if j is None else f"{j:.3g} J ({source})"


def _measured_line(records: list[Record]) -> str:
    failed = [r for r in records if r.outcome != "ok"]
    if not failed:
        return ""
    first = failed[0]
    return f"{len(failed)} of its {len(records)} point(s) failed: {first.outcome}: {first.message}"


def judge_claims(records: Iterable[Record], plan: Plan, *, device_name: str,
          price_per_gpu_hour_usd: float) -> dict:
    """Verdicts, health, figures and series of the report; see the module docstring."""
    steps = newest_by_step(records)
    j = _Judge(steps, plan, device_name, price_per_gpu_hour_usd)
    step_of = {c: s.name for s in plan.steps for c in s.claims}
    verdicts = []
    for claim in CLAIMS:
        if claim in plan.untestable:
            # the bill's figures are still worth having where bf16 cannot be compared
            measured, figures = j.usage() if claim == "bill" else ("", {})
            verdicts.append(j.verdict(claim, UNTESTABLE, measured, figures,
                                      reason=plan.untestable[claim]))
            continue
        verdict = getattr(j, claim)()
        if verdict is None:
            step = step_of.get(claim)
            planned = next((len(s.points) for s in plan.steps if s.name == step), 0)
            got = steps.get(step, []) if step else []
            why = (f"{len(got)} of the {planned} point(s) of step '{step}' measured"
                   if step else "no step of this battery measures it")
            failed = _measured_line(got)
            if failed and len(got) == planned:
                why = f"step '{step}' gave no usable result: {failed}"
            elif step:
                why += "; run the same command again to resume"
            verdict = Verdict(claim, NOT_MEASURED, j.scope, reason=why)
        verdicts.append(verdict)
    health = _health(steps, plan)
    for card in health["cards"]:
        for key, label, unit in (("matmul_tflops", "matmul TFLOP/s", "TFLOP/s"),
                                 ("copy_gbs", "copy GB/s", "GB/s")):
            j.figures[f"health.{card['device']}.{card['precision']}.{key}"] = figure(
                f"{card['device']} {card['precision']} {label}", card[key], unit)
    for row in health["busbw"].get("rows", []):
        j.figures[f"busbw.{row['size_bytes']}"] = figure(
            f"all-reduce busbw at {row['size_bytes'] / MIB:g} MiB", row["busbw_gbs"], "GB/s")
    return {"claims": [v.to_dict() for v in verdicts], "health": health,
            "figures": j.figures, "series": _series(steps)}


def _health(steps: dict[str, list[Record]], plan: Plan) -> dict:
    """Per-card peaks (the main card's in the siblings' precision first), sibling flags, busbw."""
    cards: list[CardResult] = []
    noisy: dict[str, bool] = {}
    sibling_precisions = {r.params["precision"] for r in steps.get("siblings", [])}
    for record in _ok(steps.get("peak", []) + steps.get("siblings", [])):
        p = record.params["precision"]
        if sibling_precisions and p not in sibling_precisions:
            continue
        m = record.metrics
        cards.append(CardResult(record.params["device"], m.get("card_name") or "", p,
                                record.throughput, m.get("copy_gbs"), m.get("datasheet_tflops"),
                                m.get("datasheet_copy_gbs"), _noisy(record)))
        noisy[record.params["device"]] = _noisy(record)
    flags = flag_cards(cards)
    rows = [{"size_bytes": r.params["size_bytes"], "busbw_gbs": r.throughput,
             "algbw_gbs": r.metrics.get("algbw_gbs"),
             "time_ms": statistics.median(r.time_ms) if r.time_ms else None,
             "link_gbs": r.metrics.get("link_gbs"), "noisy": _noisy(r)}
            for r in _ok(steps.get("busbw", []))]
    if "busbw" in plan.untestable:
        busbw = {"untestable": plan.untestable["busbw"]}
    else:
        busbw = {"rows": rows, "link_gbs": next((r["link_gbs"] for r in rows), None)}
    return {"cards": [{"device": c.device, "name": c.name, "precision": c.precision,
                       "matmul_tflops": c.matmul_tflops, "datasheet_tflops": c.datasheet_tflops,
                       "ratio_of_datasheet": (c.matmul_tflops / c.datasheet_tflops
                                              if c.datasheet_tflops else None),
                       "copy_gbs": c.copy_gbs, "datasheet_copy_gbs": c.datasheet_gbs,
                       "noisy": c.noisy} for c in cards],
            "flags": [{"device": f.device, "metric": f.metric, "value": f.value,
                       "reference": f.reference, "against": f.against, "message": f.message}
                      for f in flags],
            "threshold": THRESHOLD, "datasheet_threshold": DATASHEET_THRESHOLD, "busbw": busbw}


def _series(steps: dict[str, list[Record]]) -> dict:
    """Rows for the report's figures."""
    peaks = [{"device": r.params["device"], "card_name": r.metrics.get("card_name"),
              "precision": r.params["precision"], "tflops": r.throughput,
              "datasheet_tflops": r.metrics.get("datasheet_tflops"), "noisy": _noisy(r)}
             for r in _ok(steps.get("peak", []) + steps.get("siblings", []))]
    tiles = [{"config": r.metrics.get("tile_config") or _tile_text(r.params),
              "tflops": r.throughput if r.outcome == "ok" else None, "noisy": _noisy(r),
              "outcome": r.outcome, "message": r.message} for r in steps.get("tiles", [])]
    train = [{"model": r.params["model"], "size": r.params["size"],
              "precision": r.params["precision"], "samples_per_s": r.throughput,
              "peak_mib": r.metrics["step_peak_bytes"] / MIB, "noisy": _noisy(r)}
             for r in _ok(steps.get("train", []))]
    busbw = [{"size_bytes": r.params["size_bytes"], "busbw_gbs": r.throughput,
              "noisy": _noisy(r)} for r in _ok(steps.get("busbw", []))]
    return {"peaks": peaks, "tiles": tiles, "train": train, "busbw": busbw}


def _tile_text(params: dict) -> str:
    return "x".join(str(params.get(k)) for k in ("block_m", "block_n", "block_k"))

