"""The tuner driver: the sequence the tile, training and serving tuners share. Each supplies its
trial (each one a record of a TrialLog), its grid and what is its own after the search (how to
measure the winner again, the entry's facts, the code to paste); drive() looks the store up,
searches, re-measures, takes the frontier and stores the winner (never from a contended last
round: that one is shown, labelled, or dropped), into one outcome.

    log = TrialLog("tiles", device, out=out, on_trial=on_trial, cancel=cancel)
    outcome = drive(Tuned(), log, grid, validate, evaluate, budget_s=0.3, key=key,
                    keyed_on=grid, store=path, facts=lambda outcome: {...})
    outcome.winner, outcome.entry, outcome.frontier, outcome.snippet, outcome.reused
"""

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from .cancel import Cancelled, CancelToken
from .environment import environment, fingerprint
from .results import Record, append_record, check_writable, new_run_id
from .search import SearchResult, config_key, pareto_frontier, search
from .store import TunedStore, tuned_store_path
from .sweep import grid as cartesian
from .sweep import measure_point
from .timing import Timing

REMEASURE_TRIES = 3  # a winner measured again: at most this many tries until one meets


def lever_grid(axes: Mapping[str, Sequence], levers: Sequence[str], tuner: str) -> list[dict]:
    """Every combination of the `axes`, in the order of `levers` (an axis not among them is
    refused, naming what `tuner` varies)."""
    unknown = set(axes) - set(levers)
    if unknown:
        raise ValueError(f"unknown axes {sorted(unknown)}: {tuner} varies {list(levers)}")
    return cartesian({name: axes[name] for name in levers if name in axes})


@dataclass
class TrialLog:
    """A tuning run's trials as records: each measured in its own window (measure_point), kept,
    appended to `out` and shown to `on_trial`; one environment and run id for all."""

    workload: str
    device: str
    out: str | os.PathLike | None = None
    on_trial: Callable[[Record], None] | None = None
    cancel: CancelToken | None = None
    run_id: str = ""
    records: list[Record] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.out is not None:
            check_writable(self.out)
        self.run_id = self.run_id or new_run_id()
        self.env = environment(self.device)
        self.env["fingerprint"] = fingerprint(self.env)

    def measure(self, point: Callable, params: dict) -> Record:
        record = measure_point(point, params, workload=self.workload, device=self.device,
                               env=self.env, run_id=self.run_id, cancel=self.cancel)
        self.records.append(record)
        if self.out is not None:
            append_record(self.out, record)
        if self.on_trial is not None:
            self.on_trial(record)
        return record

    def timed(self, record: Record, per: int = 1) -> dict:
        """The record as the search's evaluate() answers: its failure, or its timing (each
        sample divided by `per`, e.g. per sample of a batch) and noise."""
        if record.outcome != "ok":
            return {"outcome": record.outcome, "message": record.message}
        samples = tuple(t / per for t in record.time_ms) if per != 1 else record.time_ms
        return {"outcome": "ok", "timing": Timing(samples, 0, self.device),
                "noise": record.noise}


@dataclass
class Tuned:
    """What a tuner did. `entry`: the winner's facts (best, snippet, ...), reused from the store,
    stored now ("stored": True) or shown unstored ("stored": False); {} without a winner."""

    entry: dict = field(default_factory=dict)
    reused: bool = False
    search: SearchResult | None = None
    records: list[Record] = field(default_factory=list)
    candidates: list[dict] = field(default_factory=list)  # each config's last trial, measured
    remeasured: dict = field(default_factory=dict)        # the winner measured again
    cancelled: bool = False
    device_name: str = ""
    mode: str = ""
    cost = "peak_bytes"  # the frontier's other axis beside samples/s

    @property
    def winner(self) -> dict | None:
        return self.entry.get("best")

    @property
    def snippet(self) -> str:
        return self.entry.get("snippet", "")

    def failed_lines(self, limit: int = 3) -> list[str]:
        """"  failed: <why>" for the first `limit` configs that failed (not those over a
        target: the tuner names them)."""
        failed = self.search.failed.values() if self.search is not None else ()
        return [f"  failed: {why}" for why in failed if not why.startswith("over-target")][:limit]

    @property
    def frontier(self) -> list[dict]:
        """The candidates none beats in both samples/s and `cost` (stored with the entry)."""
        return self.entry.get("frontier") or pareto_frontier(self.candidates, self.cost)


def drive(outcome: Tuned, log: TrialLog, grid: Sequence[Mapping] | Callable[[], list],
          validate: Callable[[dict], None], evaluate: Callable[[dict, float, bool], Mapping],
          *, budget_s: float, key: str = "", keyed_on: Sequence[Mapping] = (),
          store: str | os.PathLike | None = None, force: bool = False,
          candidates: Callable[[SearchResult], list] | None = None,
          remeasure: Callable[[dict, int], dict] | None = None,
          facts: Callable[[Tuned], dict] | None = None, show_unstored: bool = False) -> Tuned:
    """The shared sequence into `outcome`: with a `key`, the `store` (default
    tuned_store_path()) gives back its entry for the key and the grid `keyed_on` unless `force`;
    else the search over `grid` (or what grid() plans: a stop there ends the run),
    `candidates(result)` measured, `remeasure(config, tries)` tried on the ranking
    (first_to_meet); the winner's entry is `facts(outcome)`, stored under the `key`."""
    outcome.records = log.records
    outcome.device_name, outcome.mode = log.env["device_name"], log.env["mode"]
    tuned = TunedStore(store if store is not None else tuned_store_path())
    if key and not force:
        outcome.entry = tuned.get(key, keyed_on) or {}
        if outcome.entry:
            outcome.reused = True
            return outcome
    cancel = log.cancel
    try:
        configs = grid() if callable(grid) else grid
        outcome.search = search(configs, validate, evaluate, budget_s=budget_s,
                                should_stop=lambda: cancel is not None and cancel.cancelled)
    except Cancelled:
        outcome.cancelled = True
        return outcome
    result = outcome.search
    outcome.cancelled = result.cancelled
    outcome.candidates = candidates(result) if candidates is not None else []
    best = None if result.cancelled else result.best
    if remeasure is not None and best is not None:
        ranked = [t.config for t in result.ranking() if config_key(t.config) not in result.failed]
        outcome.remeasured = first_to_meet(ranked, remeasure)
        best = outcome.remeasured["config"] if outcome.remeasured.get("meets_target") else None
    if best is None:
        return outcome
    got = {"best": best, **(facts(outcome) if facts is not None else {})}
    if not key:
        outcome.entry = got
    elif result.contended:  # a contended last round ranks nothing: shown at most, never stored
        outcome.entry = {"best": best, "best_median_ms": result.best_median_ms,
                         "verdict": result.verdict, "contended": result.contended,
                         "stored": False, **got} if show_unstored else {}
    else:
        outcome.entry = {**tuned.put(key, keyed_on, result, **got), "stored": True}
    return outcome


def first_to_meet(attempts: Sequence, measure: Callable[[object, int], dict]) -> dict:
    """`measure(attempt, tries)` of the first REMEASURE_TRIES `attempts` (configs, rates) until
    one meets its target ("meets_target"); the last one measured ({} when none measured: a
    failed measurement answers {})."""
    last: dict = {}
    for tries, attempt in enumerate(attempts[:REMEASURE_TRIES], start=1):
        last = measure(attempt, tries) or last
        if last.get("meets_target"):
            break
    return last
