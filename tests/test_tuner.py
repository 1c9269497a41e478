"""The tuner driver (core/tuner.py) on its own: the re-measurement rule, a stop while the grid is
planned, the store (reuse, a contended round shown or dropped, never stored), the axes refused."""

import pytest

from a800lab.core import noise, sweep
from a800lab.core.cancel import Cancelled
from a800lab.core.tuner import REMEASURE_TRIES, TrialLog, Tuned, drive, first_to_meet, lever_grid

GRID = [{"block": b} for b in (1, 2, 4)]


def point(block):
    """Faster with a larger block: 1 ms per call at block 4."""
    return {"throughput": float(block), "time_ms": [4.0 / block] * 9}


def evaluate_with(log):
    return lambda config, budget_s, first: log.timed(log.measure(point, config))


def test_first_to_meet_stops_at_the_first_that_meets_and_skips_failures():
    seen = []

    def measure(attempt, tries):
        seen.append(attempt)
        return {} if attempt == "fails" else {"attempt": attempt, "tries": tries,
                                               "meets_target": attempt == "meets"}

    assert first_to_meet(["misses", "fails", "meets", "never"], measure) == {
        "attempt": "meets", "tries": 3, "meets_target": True}
    assert seen == ["misses", "fails", "meets"]
    assert first_to_meet(["misses", "fails"], measure)["attempt"] == "misses"
    assert first_to_meet(["a", "b", "c", "d", "e"], measure)["tries"] == REMEASURE_TRIES
    assert first_to_meet([], measure) == {}


def test_a_stop_while_the_grid_is_planned_ends_the_run_with_nothing_stored(tmp_path):
    def plan():
        raise Cancelled("stopped while bounding")

    log = TrialLog("tune-test", "cpu")
    outcome = drive(Tuned(), log, plan, lambda c: None, evaluate_with(log), budget_s=0.01,
                    key="k", keyed_on=GRID, store=tmp_path / "t.json")
    assert outcome.cancelled and outcome.search is None and outcome.entry == {}
    assert not (tmp_path / "t.json").exists()


@pytest.mark.usefixtures("quiet_cpu")
def test_the_winner_is_stored_and_reused_and_a_contended_one_never(tmp_path, monkeypatch):
    store = tmp_path / "t.json"

    def run(**options):
        log = TrialLog("tune-test", "cpu")
        return drive(Tuned(), log, GRID, lambda c: None, evaluate_with(log), budget_s=0.01,
                     key="k", keyed_on=GRID, store=store,
                     facts=lambda outcome: {"snippet": f"block = {outcome.search.best['block']}"},
                     **options)

    first = run()
    assert first.winner == {"block": 4} and first.entry["stored"] and not first.reused
    assert first.snippet == "block = 4" and len(first.records) >= len(GRID)
    again = run()
    assert again.reused and again.search is None and again.snippet == "block = 4"
    monkeypatch.setattr(sweep, "assess", lambda samples, conditions=None, *, on_cpu=False, **own: {
        **noise.assess(samples), "noisy": True, "contended": True,
        "reasons": ["oversubscribed: 3 threads on 2 cores"]})
    store.unlink()
    shown = run(show_unstored=True)
    assert shown.entry["stored"] is False and shown.entry["contended"].startswith("oversub")
    assert shown.snippet == "block = 4" and not store.exists()
    assert run().entry == {} and not store.exists()  # a tuner that shows none: dropped


def test_axes_outside_the_levers_are_refused_by_name():
    assert lever_grid({"b": [1, 2], "a": [True]}, ("a", "b"), "tune_x") == [
        {"a": True, "b": 1}, {"a": True, "b": 2}]
    with pytest.raises(ValueError, match=r"unknown axes \['c'\]: tune_x varies \['a', 'b'\]"):
        lever_grid({"c": [1]}, ("a", "b"), "tune_x")
