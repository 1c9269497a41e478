"""The search every tuner shares: successive halving over a config grid, honest about noise
(the tuned configs are kept by a800lab.core.store.TunedStore).

    result = search(configs, validate, evaluate, budget_s=0.3)
    result.best, result.best_median_ms       # the winner and its median time
    result.verdict                           # "block_m=128 ... leads by 4% (outside the noise)"
    result.inside_noise                      # True when the runner-up may really be as fast

`validate(config)` raises ValueError for a config that cannot run (the reason is kept);
`evaluate(config, budget_s)` runs one config and returns a point function's dict (outcome
"ok" with a `timing` Timing, or "wrong" / an exception for configs that fail). Impossible
configs are refused before anything runs. Then every valid config is timed with a tenth of
`budget_s`, the faster half is kept and timed again with twice the budget (at most `budget_s`),
and so on until two remain; those two are timed with the full `budget_s`. A measured config
keeps its best (longest-budget) timing. The winner's lead over the runner-up is inside the noise
when their middle halves (25th-75th percentile of the time samples) overlap: then the ranking
may flip from run to run, and the verdict says so rather than crowning a winner by chance.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from .cancel import Cancelled
from .memory import is_oom
from .timing import Timing

FIRST_ROUND_SHARE = 0.1   # the first round's budget per config, as a share of budget_s
ETA = 2                   # each round keeps 1/ETA of the configs and gives them ETA x the budget


def config_key(config: Mapping) -> str:
    """A config as canonical JSON: its identity in results and in the store."""
    return json.dumps(dict(config), sort_keys=True)


def describe_config(config: Mapping) -> str:
    """"block_m=128, block_n=64, ..." for messages."""
    return ", ".join(f"{k}={v}" for k, v in config.items())


@dataclass(frozen=True)
class Trial:
    """One timing of one config in one round."""

    config: dict
    round: int
    budget_s: float
    timing: Timing

    @property
    def median_ms(self) -> float:
        return self.timing.median_ms


@dataclass
class SearchResult:
    """What a search measured and concluded; see the module docstring."""

    trials: list[Trial] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)   # config key -> why it cannot run
    failed: dict[str, str] = field(default_factory=dict)    # config key -> wrong / oom / error
    wall_s: float = 0.0
    cancelled: bool = False

    def final(self) -> dict[str, Trial]:
        """Each measured config's trial with the largest budget (latest round on ties)."""
        best: dict[str, Trial] = {}
        for trial in self.trials:
            key = config_key(trial.config)
            if key not in best or (trial.round, trial.budget_s) >= (best[key].round,
                                                                    best[key].budget_s):
                best[key] = trial
        return best

    def ranking(self) -> list[Trial]:
        """The configs of the last round first (fastest first), then earlier ones by median."""
        return sorted(self.final().values(), key=lambda t: (-t.round, t.median_ms))

    @property
    def best(self) -> dict | None:
        ranked = self.ranking()
        return ranked[0].config if ranked else None

    @property
    def best_median_ms(self) -> float | None:
        ranked = self.ranking()
        return ranked[0].median_ms if ranked else None

    @property
    def lead(self) -> float | None:
        """Runner-up median / winner median - 1 (0.04 = the winner is 4% faster)."""
        ranked = self.ranking()
        if len(ranked) < 2 or ranked[0].round != ranked[1].round:
            return None
        return ranked[1].median_ms / ranked[0].median_ms - 1

    @property
    def inside_noise(self) -> bool | None:
        """True when the winner's and runner-up's middle halves overlap; None without a pair."""
        ranked = self.ranking()
        if self.lead is None:
            return None
        winner, runner_up = ranked[0].timing, ranked[1].timing
        return winner.q75_ms >= runner_up.q25_ms

    @property
    def verdict(self) -> str:
        """One sentence a user can act on."""
        if self.best is None:
            why = "; ".join(list(self.refused.values())[:2] + list(self.failed.values())[:2])
            return f"no config ran correctly{': ' + why if why else ''}"
        text = f"best: {describe_config(self.best)} ({self.best_median_ms:.4g} ms)"
        if self.lead is None:
            return text + "; no runner-up to compare with"
        runner_up = describe_config(self.ranking()[1].config)
        if self.inside_noise:
            return (text + f"; its {100 * self.lead:.1f}% lead over {runner_up} is inside the "
                    "measurement noise (their middle halves overlap): either may win a re-run")
        return text + f"; leads {runner_up} by {100 * self.lead:.1f}% (outside the noise)"

    def to_dict(self) -> dict:
        return {"best": self.best, "best_median_ms": self.best_median_ms, "lead": self.lead,
                "inside_noise": self.inside_noise, "verdict": self.verdict,
                "refused": self.refused, "failed": self.failed, "wall_s": self.wall_s,
                "trials": [{"config": t.config, "round": t.round, "budget_s": t.budget_s,
                            "median_ms": t.median_ms, "iqr_ms": t.timing.iqr_ms}
                           for t in self.trials]}


def search(configs: Sequence[Mapping], validate: Callable[[dict], None],
           evaluate: Callable[[dict, float], Mapping], *, budget_s: float = 0.3,
           on_trial: Callable[[Trial], None] | None = None,
           should_stop: Callable[[], bool] | None = None) -> SearchResult:
    """Successive halving over `configs`; see the module docstring."""
    if not (isinstance(budget_s, int | float) and math.isfinite(budget_s) and budget_s > 0):
        raise ValueError(f"budget_s={budget_s!r} must be a finite number of seconds > 0")
    started = time.perf_counter()
    result = SearchResult()
    alive = []
    for config in dict((config_key(c), dict(c)) for c in configs).values():
        try:
            validate(config)
        except ValueError as exc:
            result.refused[config_key(config)] = str(exc)
        else:
            alive.append(config)
    round_budget, round_number = budget_s * FIRST_ROUND_SHARE, 0
    while alive:
        final_round = len(alive) <= 2
        budget = budget_s if final_round else round_budget
        timed = []
        for config in alive:
            if should_stop is not None and should_stop():
                result.cancelled = True
                break
            trial = _try(config, round_number, budget, evaluate, result)
            if trial is not None:
                result.trials.append(trial)
                timed.append(trial)
                if on_trial:
                    on_trial(trial)
        if result.cancelled or final_round:
            break
        timed.sort(key=lambda t: t.median_ms)
        alive = [t.config for t in timed[:max(2, math.ceil(len(timed) / ETA))]]
        round_budget = min(budget_s, round_budget * ETA)
        round_number += 1
    result.wall_s = time.perf_counter() - started
    return result


def _try(config: dict, round_number: int, budget_s: float, evaluate, result: SearchResult):
    """Time one config; a wrong result, an out-of-memory or an error goes to result.failed."""
    try:
        out = evaluate(config, budget_s)
    except Cancelled:
        raise
    except Exception as exc:  # a config that fails at run time is a finding, not a crash
        kind = "oom" if is_oom(exc) else "error"
        result.failed[config_key(config)] = f"{kind}: {type(exc).__name__}: {exc}"
        return None
    outcome = out.get("outcome", "ok")
    timing = out.get("timing")
    if outcome != "ok" or not isinstance(timing, Timing):
        result.failed[config_key(config)] = f"{outcome}: {out.get('message', 'no timing')}"
        return None
    return Trial(config, round_number, budget_s, timing)
