"""What every judge shares: one report's records by battery step (Context), the Finding a judge
returns, and the three-way rule at a claim's figure. A judge takes (ctx, claim) and returns a
Finding, or None when its records are not there; report.verdicts applies the CPU rule after."""

import json
import statistics
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from ..core.results import Record
from .claims import INCONCLUSIVE, RUN, Claim
from .rules import confirmed, over_runs, rel_spread, runs_text, three_way, undecided, within_noise


@dataclass
class Finding:
    """A judge's result: status, the measurement in words, its figures, and the other
    readings' outcomes ({reading name: (status, text)})."""

    status: str
    measured: str
    figures: dict = field(default_factory=dict)
    noisy: bool = False
    reason: str = ""
    readings: dict = field(default_factory=dict)


def newest_by_step(records: Iterable[Record]) -> dict[str, list[Record]]:
    """The newest record of each point, grouped by step (the record's label)."""
    newest: dict[str, Record] = {}
    for record in records:
        newest[record.point_key() + "|" + record.label] = record
    steps: dict[str, list[Record]] = defaultdict(list)
    for record in newest.values():
        steps[record.label].append(record)
    return dict(steps)


def ok(records: list[Record]) -> list[Record]:   # those that measured something
    return [r for r in records if r.outcome == "ok" and r.throughput]


def point_of(record: Record) -> str:
    """A record's point without its run number: the same for every run of one point."""
    return json.dumps({k: v for k, v in record.params.items() if k != RUN}, sort_keys=True,
                      default=str)


def run_of(record: Record) -> int:
    return record.params.get(RUN, 0)


def typical(records: list[Record]) -> list[Record]:
    """One record per point: the run of median throughput (for health and the figures)."""
    points: dict[str, list[Record]] = defaultdict(list)
    for record in records:
        points[point_of(record)].append(record)
    return [sorted(runs, key=lambda r: r.throughput or 0.0)[(len(runs) - 1) // 2]
            for runs in points.values()]


def noisy(*records: Record) -> bool:
    return any(bool(r.noise.get("noisy")) for r in records if r is not None)


def loss_text(loss: float | None) -> str:
    return "diverged" if loss is None else f"{loss:.4g}"


def median_ms(record: Record) -> float | None:
    return statistics.median(record.time_ms) if record.time_ms else None


def cut_pct(new: Record, old: Record, value: Callable[[Record], float]) -> tuple[float, float]:
    """How much lower `value` is for new than for old, in %, and its spread."""
    ratio = value(new) / value(old)
    return 100 * (1 - ratio), 100 * ratio * (rel_spread(new.time_ms) + rel_spread(old.time_ms))


def failures_text(records: list[Record]) -> str:
    """"2 of 4 point(s) failed: out of memory: <message>" ("" when none failed)."""
    failed = [r for r in records if r.outcome != "ok"]
    if not failed:
        return ""
    first = failed[0]
    kind = {"oom": "out of memory", "wrong": "wrong result"}.get(first.outcome) or (
        "unsupported here" if first.message.startswith("ValueError") else "error")
    return f"{len(failed)} of {len(records)} point(s) failed: {kind}: {first.message}"


class Context:
    """The records of one report, by step, and the plan they were measured for."""

    def __init__(self, steps: dict[str, list[Record]], plan, device_name: str,
                 price_per_gpu_hour_usd: float):
        self.steps, self.plan, self.device_name = steps, plan, device_name
        self.price = price_per_gpu_hour_usd
        self.on_gpu = plan.device.startswith("cuda")

    def ok(self, step: str, **params) -> list[Record]:   # whose params include `params`
        return ok([r for r in self.steps.get(step, [])
                   if all(r.params.get(k) == v for k, v in params.items())])

    def one(self, step: str, **params) -> Record | None:   # the first run's
        return next(iter(self.runs(step, **params)), None)

    def runs(self, step: str, **params) -> list[Record]:
        """The ok records of `step` whose params include `params`, by run."""
        return sorted(self.ok(step, **params), key=run_of)

    def again(self, step: str, record: Record | None) -> list[Record]:
        """`record`'s point timed again in `step` (a confirmation step's runs), by run."""
        if record is None:
            return []
        return [r for r in self.runs(step) if point_of(r) == point_of(record)]

    def winner(self, step: str, candidates: list[Record]) -> tuple[Record | None, list[Record]]:
        """The fastest of `candidates`, and its runs in "<step>_confirm" ([] before they ran)."""
        best = max(candidates, key=lambda r: r.throughput, default=None)
        return best, self.again(f"{step}_confirm", best)

    @staticmethod
    def paired(tops: list[Record], bases: list[Record]) -> list[tuple[Record, Record]]:
        """Records of two points measured in the same runs, paired by run."""
        by_run = {run_of(r): r for r in bases}
        return [(t, by_run[run_of(t)]) for t in tops if run_of(t) in by_run]

    @staticmethod
    def rate_ratio(top: Record, base: Record) -> tuple[float, float]:
        """top's rate over base's, and its spread (both records' relative half-IQRs summed)."""
        ratio = top.throughput / base.throughput
        return ratio, ratio * (rel_spread(top.time_ms) + rel_spread(base.time_ms))

    def finding(self, claim: Claim, value: float, spread: float, measured: str,
                figures: dict | None = None, noisy_: bool = False, readings: dict | None = None,
                at_most: bool = False) -> Finding:
        """`value` ± `spread` against the claim's figure; if inconclusive, what would decide it."""
        status = three_way(value, spread, claim.low, at_most)
        reason = within_noise(value, spread, claim.low, "" if claim.unit == "x" else claim.unit) \
            if status == INCONCLUSIVE else ""
        return Finding(status, measured, figures or {}, noisy_, reason, readings or {})

    def confirmed(self, claim: Claim, runs: list[tuple[float, float]], measured: str,
                  figures: dict | None = None, noisy_: bool = False,
                  readings: dict | None = None, at_most: bool = False) -> Finding:
        """Independent runs' (value, spread) against the claim's figure (claims.confirmed);
        `measured` ends naming the figure ("...; the cut:"), the runs follow; the reason says
        what would decide it."""
        status = confirmed(runs, claim.low, at_most)
        unit = "" if claim.unit == "x" else claim.unit
        reason = undecided(runs, claim.low, unit) if status == INCONCLUSIVE else ""
        return Finding(status, f"{measured} {runs_text(runs, claim.unit)}", figures or {},
                       noisy_, reason, readings or {})


def reading_runs(runs: list[tuple[float, float]], claimed: float, unit: str = "x",
                 at_most: bool = False) -> tuple[str, str]:
    """A reading beside the literal one over the same runs: (status, "median over n runs ...")."""
    return confirmed(runs, claimed, at_most), f"{runs_text(runs, unit)} against {claimed:g}" \
        f"{unit}"


def median_of(runs: list[tuple[float, float]]) -> float:
    return over_runs(runs)[0]
