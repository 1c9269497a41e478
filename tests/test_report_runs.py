"""Verdicts that run-to-run noise cannot tip: a timed figure is decided over three independent
runs, holding (or not) only when every run does, and each figure carries the spread of its own
samples (an idle fraction's per-step samples, power's power samples). Simulated at the figure
with 2.5% run-to-run variation, a judge says "inconclusive" far more often than either way; a
figure 3% short (or a 22.5% idle cut against 25%) almost never holds."""

from __future__ import annotations

import random

import pytest

from a800lab.report.claims import FAILS, HOLDS, INCONCLUSIVE, RUNS
from a800lab.report.judge import Context, newest_by_step
from a800lab.report.plan import Plan, Step
from a800lab.report.register import CLAIMS
from a800lab.report.rules import confirmed
from tests.test_report_verdicts import (
    STEADY,
    judge,
    peak,
    power_chain,
    rung,
    spread,
    three,
)

TRIALS = 400
RUN_TO_RUN = 0.025   # the simulation: 2-3% between runs


def test_every_run_must_hold_and_fewer_runs_decide_nothing():
    assert confirmed([(2.6, 0.05)] * RUNS, 2.5) == HOLDS
    assert confirmed([(2.3, 0.05)] * RUNS, 2.5) == FAILS
    assert confirmed([(2.6, 0.05), (2.6, 0.05), (2.4, 0.05)], 2.5) == INCONCLUSIVE
    assert confirmed([(2.6, 0.0)] * (RUNS - 1), 2.5) == INCONCLUSIVE
    assert confirmed([(0.01, 0.0)] * RUNS, 0.02, at_most=True) == HOLDS


def test_one_run_that_disagrees_leaves_the_row_inconclusive_and_says_so():
    records = three([peak("fp32", 19.0, 19.5), peak("tf32", 19.0 * 8.5, 156.0)],
                    factors=(1.0, 1.0, 1.0))
    tipped = [r if r.params.get("run") != 2 or r.params["precision"] != "tf32" else
              r.__class__(**{**vars(r), "throughput": 19.0 * 7.5}) for r in records]
    v = judge(tipped, runs=False)["tf32_speed"]
    assert v["status"] == INCONCLUSIVE and "over 3 runs (8.5, 8.5, 7.5)" in v["measured"]
    assert "quieter machine" in v["reason"]
    once = judge([peak("fp32", 19.0, 19.5), peak("tf32", 19.0 * 9, 156.0)], runs=False)
    assert once["tf32_speed"]["status"] == INCONCLUSIVE
    assert "measured in 1 run: a timed figure is decided over 3" in once["tf32_speed"]["reason"]


def test_idle_cut_takes_the_idle_fractions_own_spread_not_the_timings():
    steady_idle = [rung(0, False, False, 0.60, 0.0, spread(0.3)),
                   rung(4, False, False, 0.40, 0.0, spread(0.3))]
    assert judge(steady_idle)["idle_cut"]["status"] == HOLDS     # noisy steps, steady idle
    noisy_idle = [rung(0, False, False, 0.60, 0.08), rung(4, False, False, 0.40, 0.08)]
    assert judge(noisy_idle)["idle_cut"]["status"] == INCONCLUSIVE


def test_energy_takes_the_power_samples_spread_not_the_timings():
    v = judge(power_chain(19.0, rel=0.0))["energy"]
    assert v["status"] == HOLDS
    v = judge(power_chain(19.0, rel=0.03))["energy"]    # 19% ± ~5: within the noise of 18%
    assert v["status"] == INCONCLUSIVE


# ---- the simulation ----------------------------------------------------------------------------
def _plan(records) -> Plan:
    names = dict.fromkeys(r.label for r in records)
    return Plan("quick", "cuda:0", 2, tuple(Step(n, n, tuple(r.params for r in records
                                                              if r.label == n)) for n in names),
                {})


def _judge(cid: str, records) -> str:
    claim = CLAIMS[cid]
    ctx = Context(newest_by_step(records), _plan(records), "NVIDIA A800-SXM4-80GB", 2.0)
    return claim.judge(ctx, claim).status


def _shares(cid: str, build, rng: random.Random) -> dict[str, float]:
    counts = dict.fromkeys((HOLDS, FAILS, INCONCLUSIVE), 0)
    for _ in range(TRIALS):
        counts[_judge(cid, build(rng))] += 1
    return {k: n / TRIALS for k, n in counts.items()}


def _tf32(true_ratio: float):
    """TF32 over fp32 at `true_ratio`, each run off by ~2.5%, each run's timings 1% spread."""
    def build(rng: random.Random):
        out = []
        for run in range(RUNS):
            factor = 1 + rng.gauss(0, RUN_TO_RUN)
            for r in (peak("fp32", 19.0, 19.5, time_ms=spread(0.005)),
                      peak("tf32", 19.0 * true_ratio * factor, 156.0, time_ms=spread(0.005))):
                out.append(r.__class__(**{**vars(r), "params": {**r.params, "run": run}}))
        return out
    return build


def _idle(true_cut_pct: float):
    """An idle fraction of 60% cut by `true_cut_pct`, each run's idle off by ~2.5%, the
    per-step idle samples 1% (absolute) apart."""
    def build(rng: random.Random):
        out = []
        for run in range(RUNS):
            i0 = 0.60 * (1 + rng.gauss(0, RUN_TO_RUN))
            iw = 0.60 * (1 - true_cut_pct / 100) * (1 + rng.gauss(0, RUN_TO_RUN))
            for r in (rung(0, False, False, i0, 0.01, STEADY),
                      rung(4, False, False, iw, 0.01, STEADY)):
                out.append(r.__class__(**{**vars(r), "params": {**r.params, "run": run}}))
        return out
    return build


@pytest.mark.parametrize("cid, build", [("tf32_speed", _tf32(8.0)), ("idle_cut", _idle(25.0))])
def test_a_figure_exactly_at_the_claim_is_inconclusive_far_more_often_than_either_way(cid,
                                                                                        build):
    shares = _shares(cid, build, random.Random(36))
    assert shares[INCONCLUSIVE] >= 0.75, shares
    assert shares[HOLDS] <= 0.15 and shares[FAILS] <= 0.15, shares


@pytest.mark.parametrize("cid, build", [("tf32_speed", _tf32(8.0 * 0.97)),
                                        ("idle_cut", _idle(22.5))])
def test_a_figure_short_of_the_claim_almost_never_holds(cid, build):
    shares = _shares(cid, build, random.Random(7))
    assert shares[HOLDS] <= 0.02, shares


def test_the_cluster_row_takes_each_sitting_into_a_file_as_one_run():
    """`comm collectives` across nodes, run three times into one file: three runs decide
    G.7.2 (report.cluster); one sitting alone is inconclusive and says why."""
    from a800lab.core.results import Record
    from a800lab.report.cluster import hierarchical_row

    def sitting(run_id: str, cut: float) -> list:
        return [Record(workload="comm", params={"op": op, "size_bytes": 2**30, "world_size": 16,
                                                "backend": "nccl", "nodes": 2,
                                                "ranks_per_node": 8},
                       outcome="ok", throughput=100.0, run_id=run_id,
                       time_ms=tuple(ms * t / 10 for t in spread(0.01)))
                for op, ms in (("all_reduce", 12.0), ("hierarchical_all_reduce",
                                                      12.0 * (1 - cut)))]

    three_sittings = sitting("a", 0.5) + sitting("b", 0.5) + sitting("c", 0.5)
    status, measured, _ = hierarchical_row(three_sittings, "cuda")
    assert status == HOLDS and "over 3 runs" in measured
    status, _, reason = hierarchical_row(sitting("a", 0.5), "cuda")
    assert status == INCONCLUSIVE and "measured in 1 run" in reason
