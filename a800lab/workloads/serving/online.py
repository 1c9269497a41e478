"""Tune serving online: the config and dynamic batcher with the most goodput (the highest
request rate whose pXX latency, counted from each request's arrival, meets the target), the
winner offered that rate again on a fresh server; beside it, what the closed-loop choice
(the most samples/s whose batch p99 meets the target) gives at the rate it promises. And one
config's goodput, the guide's "peak QPS" (G.9.4) measured before and after a change.

    outcome = tune_online(p99_ms=5.0, model="transformer")
    print(outcome.summary()); outcome.goodput_rps, outcome.remeasured["p99_ms"]
    peak_qps(5.0, model="transformer", precision="bf16")["goodput_rps"]
"""

import functools
import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from ...core.backends import resolve_device
from ...core.knobs import knobs, levers, tuner_axes
from ...core.noise import default_cpu_threads
from ...core.results import Record, new_run_id
from ...core.sweep import thread_count
from ...core.tuner import REMEASURE_TRIES, TrialLog, Tuned, first_to_meet
from ..models.presets import preset
from .arrivals import Arrivals
from .goodput import MEETS, find_goodput, verdict
from .load import Batcher, default_duration_s, prepare
from .spec import MIN_REQUESTS, ServeRun, ServeSpec, serving_spec
from .tune import ServeTuneOutcome, describe_serving, serving_snippet, tune_serve

WORKLOAD = "tune-load"
MODEL_LEVERS = ("precision", *levers(ServeSpec))  # a config beside its batcher
TOP_CONFIGS = 3        # closed-loop configs (by samples/s, meeting the target) tried online
REMEASURE_STEP = 0.8   # a winner missing its goodput again: the next rate that met, else 20% less


def default_batcher_axes(device: str, target_ms: float) -> dict:
    """max_batch over powers of four (Batcher's `tune` values); delays 0 and a tenth of the
    target."""
    return {**tuner_axes(Batcher, device), "max_delay_ms": [0.0, round(target_ms / 10, 3)]}


def describe_online(config: Mapping) -> str:
    """"max batch 16, delay 0.5 ms, bf16, compile off, graphs off"."""
    model = describe_serving({**config, "batch_size": config["max_batch"]})
    return f"max batch {config['max_batch']}, delay {config['max_delay_ms']:g} ms, " + \
        model.split(", ", 1)[1]


@dataclass
class OnlineTuneOutcome(Tuned):
    """What tune_online found (core/tuner.Tuned, though not by its drive(): each candidate's
    search is over offered rates): the closed-loop stage, every candidate's goodput search,
    the winner offered its goodput again, and the closed-loop choice offered its own rate."""

    target_ms: float = 0.0
    percentile: float = 99
    closed_loop: ServeTuneOutcome | None = None
    searches: list[dict] = field(default_factory=list)   # {"config", "capacity_rps", "found"}
    closed_choice: dict = field(default_factory=dict)

    @property
    def goodput_rps(self) -> float:
        return self.remeasured["rate_rps"] if self.winner is not None else 0.0

    def summary(self) -> str:
        """The winner as offered again, the closed-loop choice's fate, each search's line."""
        name = f"p{self.percentile:g}"
        again, lines = self.remeasured, []
        if self.winner is not None:
            searched = again["searched_goodput_rps"]
            lower = "" if again["rate_rps"] == searched else \
                f" (the search's {searched:.4g} missed when offered again)"
            lines.append(f"winner: {describe_online(self.winner)}: goodput {again['rate_rps']:.4g} "
                         f"requests/s{lower}; offered that rate again on a fresh server: {name} "
                         f"{again['target_ms']:.3g} ms <= {self.target_ms:g} ms (95% interval "
                         f"{again['ci_low_ms']:.3g}-{again['ci_high_ms']:.3g} ms, "
                         f"{again['requests']} requests)")
        else:
            lines.append(f"no config: none met {name} <= {self.target_ms:g} ms at any rate "
                         "tried" + ("" if not again else " when offered its goodput again") +
                         "; raise the target or try smaller batches")
        choice = self.closed_choice
        if choice:
            fate = "meets" if choice["verdict"] == MEETS else "would miss" if \
                choice["verdict"] != "inconclusive" else "is inconclusive against"
            why = "" if choice["verdict"] != "inconclusive" else \
                " (it missed on a contended CPU)" if choice["contended"] else \
                " (the target lies inside its 95% interval)"
            lines.append(
                f"closed-loop choice: {describe_serving(choice['config'])}: "
                f"{choice['samples_per_s']:.4g} samples/s with a batch p99 of "
                f"{choice['batch_p99_ms']:.3g} ms; offered {choice['rate_rps']:.4g} requests/s "
                f"(the rate it promises) behind a batcher of {choice['config']['batch_size']} "
                f"(delay {choice['max_delay_ms']:.3g} ms) it gives {name} "
                f"{choice['target_ms']:.3g} ms" + (" and saturates" if choice["saturated"]
                                                   else "") +
                f": it {fate} the {self.target_ms:g} ms target{why}")
        lines.append("goodput per config (requests/s at which the target holds):")
        lines += [f"  {s['found'].goodput_rps:10.4g}  of {s['capacity_rps']:.4g} closed-loop  "
                  f"{describe_online(s['config'])}" for s in self.searches]
        return "\n".join(lines)


@dataclass
class Offers:
    """Offers a prepared server a rate, as one record each of `log` (its memory, the CPU's
    state, the noise verdict), and judges the target on it."""

    target_ms: float
    percentile: float
    arrival: str
    burstiness: float
    trace: str | None
    log: TrialLog

    def __call__(self, ready, config: dict, rate: float, seconds: float) -> dict:
        """`rate` offered for `seconds`, or long enough for MIN_REQUESTS and a fifth more."""
        seconds = max(seconds, 1.2 * MIN_REQUESTS / rate)

        def point(**_params):
            return ready.offer(Arrivals(self.arrival, rate, seconds, self.burstiness,
                                        self.trace), self.percentile, self.log.cancel)

        record = self.log.measure(point, {**config, "rate_rps": rate, "duration_s": seconds})
        got = {**record.metrics, "outcome": record.outcome, "message": record.message,
               "contended": bool(record.noise.get("contended"))}
        return {**got, "verdict": verdict(got, self.target_ms)}


def tune_online(p99_ms: float, task=None, *, model: str = "transformer", size: str | None = None,
                axes: Mapping | None = None, batcher_axes: Mapping | None = None,
                percentile: float = 99, arrival: str = "poisson", burstiness: float = 1.0,
                trace: str | None = None, duration_s: float | None = None,
                device: str = "auto", budget_s: float = 0.3, out=None,
                on_trial: Callable[[Record], None] | None = None, cancel=None,
                run_id: str | None = None, top: int = TOP_CONFIGS) -> OnlineTuneOutcome:
    """The most goodput under `pXX <= p99_ms` over the model `axes` (tune.default_axes less
    batch_size) x the `batcher_axes` (max_batch, max_delay_ms)."""
    ServeRun(p99_ms=p99_ms, percentile=percentile)  # refuses a target that is no latency
    device = resolve_device(device)
    batchers = {**default_batcher_axes(device, p99_ms), **(batcher_axes or {})}
    for values in itertools.product(*batchers.values()):
        Batcher(*values)  # a bad value: refused before anything runs
    duration_s = duration_s or default_duration_s(device) / 2
    Arrivals(arrival, 1.0 if arrival != "trace" else None, duration_s, burstiness, trace)
    run_id = run_id or new_run_id()
    model_axes = {k: v for k, v in (axes or {}).items() if k != "batch_size"}
    closed = tune_serve(p99_ms, task, model=model, size=size, device=device, budget_s=budget_s,
                        axes={**model_axes, "batch_size": batchers["max_batch"]}, out=out,
                        on_trial=on_trial, cancel=cancel, run_id=run_id)
    log = TrialLog(WORKLOAD, device, out, on_trial, cancel, run_id, list(closed.records))
    outcome = OnlineTuneOutcome(records=log.records, cancelled=closed.cancelled,
                                target_ms=p99_ms, percentile=percentile, closed_loop=closed)
    if outcome.cancelled:
        return outcome
    base = serving_spec({"model": model, "size": size}, device, task)
    task = task or preset(base.model, base.size)
    offered = Offers(p99_ms, percentile, arrival, burstiness, trace, log)

    def ready_for(config: dict):
        spec = replace(base, batch_size=config["max_batch"],
                       **{k: config[k] for k in MODEL_LEVERS})
        return prepare(spec, Batcher(config["max_batch"], config["max_delay_ms"]), task,
                       device)

    met = sorted((c for c in closed.candidates if c["meets_target"]),
                 key=lambda c: -c["samples_per_s"])[:top]
    for candidate, delay in itertools.product(met, batchers["max_delay_ms"]):
        config = {"max_batch": candidate["config"]["batch_size"], "max_delay_ms": delay,
                  **{k: candidate["config"][k] for k in MODEL_LEVERS}}
        ready = ready_for(config)
        if ready.wrong:
            continue
        found = find_goodput(functools.partial(offered, ready, config, seconds=duration_s),
                             target_ms=p99_ms, capacity_rps=candidate["samples_per_s"],
                             percentile=percentile)
        outcome.searches.append({"config": config, "capacity_rps": candidate["samples_per_s"],
                                 "found": found})
    _remeasure(outcome, ready_for, offered, 2 * duration_s)
    _closed_choice(outcome, ready_for, offered, duration_s)
    again = outcome.remeasured
    if again.get("meets_target"):
        outcome.entry = {"best": again["config"], "snippet": serving_snippet(
            {**again["config"], "batch_size": again["config"]["max_batch"]}, device,
            note=f"tuned online by a800lab on {log.env['device_name']}: goodput "
                 f"{again['rate_rps']:.4g} requests/s at p{percentile:g} <= {p99_ms:g} ms",
            delay_ms=again["config"]["max_delay_ms"])}
    return outcome


def _remeasure(outcome: OnlineTuneOutcome, ready_for, offered, seconds: float) -> None:
    """The best search's goodput offered again on a fresh server, for twice as long; when it
    misses, the next lower rate that met in the search (else 20% less), up to
    REMEASURE_TRIES."""
    ranked = sorted((s for s in outcome.searches if s["found"].goodput_rps > 0),
                    key=lambda s: -s["found"].goodput_rps)
    if not ranked:
        return
    config, found = ranked[0]["config"], ranked[0]["found"]
    met = sorted({p["rate_rps"] for p in found.points if p["verdict"] == MEETS}, reverse=True)
    ready = ready_for(config)

    def again(rate: float, tries: int) -> dict:
        got = offered(ready, config, rate, seconds)
        return {"config": config, "rate_rps": rate, "tries": tries,
                "target_ms": got.get("target_percentile_ms"), "p99_ms": got.get("p99_ms"),
                "p50_ms": got.get("p50_ms"), "ci_low_ms": got.get("target_ci_low_ms"),
                "ci_high_ms": got.get("target_ci_high_ms"), "requests": got.get("requests"),
                "saturated": got.get("saturated"), "meets_target": got["verdict"] == MEETS,
                "searched_goodput_rps": found.goodput_rps}

    rates = met + [met[-1] * REMEASURE_STEP ** n for n in range(1, REMEASURE_TRIES)]
    outcome.remeasured = first_to_meet(rates, again)


def _closed_choice(outcome: OnlineTuneOutcome, ready_for, offered, seconds: float) -> None:
    """The closed-loop winner offered the requests/s its samples/s promises, behind a batcher
    of its batch size that holds a request up to one batch's arrival time."""
    again = outcome.closed_loop.remeasured
    if not again.get("meets_target"):
        return
    config, rate = again["config"], again["samples_per_s"]
    delay_ms = round(1e3 * config["batch_size"] / rate, 3)
    batched = {"max_batch": config["batch_size"], "max_delay_ms": delay_ms,
               **{k: config[k] for k in MODEL_LEVERS}}
    got = offered(ready_for(batched), batched, rate, seconds)
    outcome.closed_choice = {"config": config, "samples_per_s": rate,
                             "batch_p99_ms": again["p99_ms"], "rate_rps": rate,
                             "max_delay_ms": delay_ms,
                             "target_ms": got.get("target_percentile_ms"),
                             "saturated": bool(got.get("saturated")), "verdict": got["verdict"],
                             "contended": got["contended"]}


def peak_qps(target_ms: float, task=None, *, max_batch: int = 8, max_delay_ms: float = 0.0,
             percentile: float = 99, arrival: str = "poisson", burstiness: float = 1.0,
             duration_s: float | None = None, device: str = "auto", budget_s: float = 0.3,
             torch_threads: int | None = None, cancel=None, **fields) -> dict:
    """One config's peak QPS (ServeSpec's `fields`: model, size, precision, levers): its
    goodput under `pXX <= target_ms` (the closed-loop capacity measured first, then the rate
    searched), with `torch_threads` (on a CPU by default all usable cores but one, as the
    panels and commands). {"goodput_rps", "capacity_rps", "found" (the Goodput, every rate
    tried), "records", "outcome"}: measure it before and after a change."""
    knobs(ServeRun)["p99_ms"].check("target_ms", target_ms)
    device = resolve_device(device)
    seconds = duration_s or default_duration_s(device) / 2
    Arrivals(arrival, 1.0, seconds, burstiness)  # a bad schedule: refused before building
    spec = serving_spec(fields, device, task, batch_size=max_batch)
    name, size = spec.model, spec.size
    config = {"max_batch": max_batch, "max_delay_ms": max_delay_ms,
              **{k: getattr(spec, k) for k in MODEL_LEVERS}}
    if torch_threads is None and device == "cpu":
        torch_threads = default_cpu_threads()
    with thread_count(torch_threads):
        ready = prepare(spec, Batcher(max_batch, max_delay_ms), task or preset(name, size),
                        device)
        if ready.wrong:
            return {**ready.gap, "goodput_rps": None}
        capacity = ready.capacity(device, budget_s, cancel)["capacity_rps"]
        offered = Offers(target_ms, percentile, arrival, burstiness, None,
                         TrialLog(WORKLOAD, device, cancel=cancel))
        found = find_goodput(functools.partial(offered, ready, config, seconds=seconds),
                             target_ms=target_ms, capacity_rps=capacity,
                             percentile=percentile)
    return {"outcome": "ok", "goodput_rps": found.goodput_rps, "capacity_rps": capacity,
            "found": found, "records": offered.log.records, "summary": found.summary()}
