"""The search every tuner shares: successive halving over a config grid, honest about noise
(a config is never dropped on a difference inside the noise while there is room; a lead inside
it is said) and contention (a contended round ranks nothing and must not be stored). A stop
(`should_stop`, or Cancelled inside a trial) keeps what was measured.

    result = search(configs, validate, evaluate, budget_s=0.3)
    result.best, result.verdict, result.rivals, result.contended
"""

import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from .cancel import Cancelled
from .checks import positive_float
from .memory import is_oom
from .timing import Timing

ETA = 4         # each round keeps 1/ETA of the configs and gives them ETA x the budget
ROUNDS = 3      # first round at budget_s / ETA^(ROUNDS-1), the last at budget_s
KEEP_NOISY = 2  # a round may keep up to this many times 1/ETA for configs inside the noise


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
    noise: dict = field(default_factory=dict)   # a800lab.core.noise.assess of this timing

    @property
    def median_ms(self) -> float:
        return self.timing.median_ms

    @property
    def contended(self) -> str:
        """Why this trial's CPU was contended (its first such reason), or ""."""
        if not self.noise.get("contended"):
            return ""
        reasons = [r for r in self.noise.get("reasons", ()) if not r.startswith("timing spread")]
        return reasons[0] if reasons else "the CPU was contended"

    def overlaps(self, other: "Trial") -> bool:
        """Whether the two timings' middle halves (25th-75th percentile) overlap."""
        a, b = self.timing, other.timing
        return a.q25_ms <= b.q75_ms and b.q25_ms <= a.q75_ms


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

    def _last_round(self) -> list[Trial]:
        ranked = self.ranking()
        return [r for r in ranked if ranked and r.round == ranked[0].round]

    @property
    def lead(self) -> float | None:
        """Runner-up median / winner median - 1 (0.04 = the winner is 4% faster)."""
        last = self._last_round()
        return last[1].median_ms / last[0].median_ms - 1 if len(last) >= 2 else None

    @property
    def rivals(self) -> list[dict]:
        """The configs of the last round whose middle half overlaps the winner's."""
        last = self._last_round()
        return [t.config for t in last[1:] if t.overlaps(last[0])]

    @property
    def contended(self) -> str:
        """Why the last round's timings cannot rank (a contended CPU), or ""."""
        return next((t.contended for t in self._last_round() if t.contended), "")

    @property
    def inside_noise(self) -> bool | None:
        """True when the winner may not be the fastest (a rival within the noise, or a
        contended CPU); None without a runner-up."""
        if self.lead is None:
            return None
        return bool(self.rivals) or bool(self.contended)

    @property
    def verdict(self) -> str:
        """One sentence a user can act on."""
        if self.best is None:
            why = "; ".join(list(self.refused.values())[:2] + list(self.failed.values())[:2])
            return f"no config ran correctly{': ' + why if why else ''}"
        text = f"best: {describe_config(self.best)} ({self.best_median_ms:.4g} ms)"
        if self.lead is None:
            return text + "; no runner-up to compare with"
        if self.contended:
            return (text + f"; the timings were contended ({self.contended}): they rank "
                    "nothing; run again on a quiet machine")
        runner_up = describe_config(self.ranking()[1].config)
        rivals = self.rivals
        if rivals:
            others = f"{len(rivals)} other config{'s' * (len(rivals) > 1)}"
            return (text + f"; within the noise of {others} (middle halves overlap; the "
                    f"runner-up, {runner_up}, is {100 * self.lead:.1f}% slower by median): "
                    "any of them may win a re-run")
        return text + f"; leads {runner_up} by {100 * self.lead:.1f}% (outside the noise)"

    def to_dict(self) -> dict:
        return {"best": self.best, "best_median_ms": self.best_median_ms, "lead": self.lead,
                "inside_noise": self.inside_noise, "rivals": self.rivals,
                "contended": self.contended, "verdict": self.verdict,
                "refused": self.refused, "failed": self.failed, "wall_s": self.wall_s,
                "trials": [{"config": t.config, "round": t.round, "budget_s": t.budget_s,
                            "median_ms": t.median_ms, "iqr_ms": t.timing.iqr_ms}
                           for t in self.trials]}


def search(configs: Sequence[Mapping], validate: Callable[[dict], None],
           evaluate: Callable[[dict, float, bool], Mapping], *, budget_s: float = 0.3,
           on_trial: Callable[[Trial], None] | None = None,
           should_stop: Callable[[], bool] | None = None) -> SearchResult:
    """Noise-aware successive halving over `configs`; see the module docstring."""
    positive_float("budget_s", budget_s, "0.3")
    started = time.perf_counter()
    result = SearchResult()
    alive = []
    for config in {config_key(c): dict(c) for c in configs}.values():
        try:
            validate(config)
        except ValueError as exc:
            result.refused[config_key(config)] = str(exc)
        else:
            alive.append(config)
    round_number, ran = 0, set()
    while alive:
        final_round = round_number >= ROUNDS - 1 or len(alive) <= 2
        budget = budget_s if final_round else budget_s / ETA ** (ROUNDS - 1 - round_number)
        timed = []
        for config in alive:
            if should_stop is not None and should_stop():
                result.cancelled = True
                break
            key = config_key(config)
            try:
                trial = _try(config, round_number, budget, key not in ran, evaluate, result)
            except Cancelled:  # stopped inside a trial: as between trials, the rest is kept
                result.cancelled = True
                break
            ran.add(key)
            if trial is not None:
                result.trials.append(trial)
                timed.append(trial)
                if on_trial:
                    on_trial(trial)
        if result.cancelled or final_round:
            break
        alive = [t.config for t in _survivors(timed)]
        round_number += 1
    result.wall_s = time.perf_counter() - started
    return result


def _survivors(timed: list[Trial]) -> list[Trial]:
    """The fastest 1/ETA (at least 2), and the next ones while their middle half overlaps the
    slowest kept, up to KEEP_NOISY times as many."""
    ranked = sorted(timed, key=lambda t: t.median_ms)
    keep = max(2, math.ceil(len(ranked) / ETA))
    kept = ranked[:keep]
    for trial in ranked[keep:KEEP_NOISY * keep]:
        if not trial.overlaps(kept[keep - 1]):
            break
        kept.append(trial)
    return kept


def _try(config: dict, round_number: int, budget_s: float, first: bool, evaluate,
         result: SearchResult):
    """Time one config; a wrong result, an out-of-memory or an error goes to result.failed."""
    try:
        out = evaluate(config, budget_s, first)
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
    return Trial(config, round_number, budget_s, timing, dict(out.get("noise") or {}))


def pareto_frontier(candidates: list[dict], cost: str = "peak_bytes") -> list[dict]:
    """The candidates none beats in both samples/s and `cost` (peak_bytes, p99_ms), by cost."""
    ordered = sorted(candidates, key=lambda c: (c[cost], -c["samples_per_s"]))
    frontier, best = [], 0.0
    for c in ordered:
        if c["samples_per_s"] > best:
            frontier.append(c)
            best = c["samples_per_s"]
    return frontier
