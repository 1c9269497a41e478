"""Tune the tile of one matmul shape: successive halving over a config grid, every trial a
record, the winner stored per device and reused.

    outcome = tune(4096, 4096, 4096, "bf16", device="cuda", out="tune.jsonl")
"""

import dataclasses
import itertools
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from ...core.backends import resolve_device
from ...core.cancel import Cancelled, CancelToken
from ...core.environment import environment, fingerprint
from ...core.knobs import tuner_axes
from ...core.results import Record, append_record, check_writable, new_run_id
from ...core.search import SearchResult, search
from ...core.store import TunedStore, tuned_store_path
from ...core.sweep import measure_point
from ...core.timing import Timing
from ..matmul import TILE_FIELDS, MatmulSpec
from .config import check_config
from .point import default_tile_backend, tiled_matmul_point

# the tile kernel's grid is the spec fields' values to try on a GPU, its CPU stand-in's on a CPU
DEFAULT_AXES = {"triton": tuner_axes(MatmulSpec, "cuda"),
                "cpu_blocked": tuner_axes(MatmulSpec, "cpu")}
WARMUP_SHARE = 0.5  # warm-up per trial, as a share of its budget (the check already ran it once)


def config_grid(axes: Mapping[str, Sequence], backend: str) -> list[dict]:
    """The cartesian product of tile axes for `backend` (a foreign axis is refused)."""
    foreign = [name for name in axes if name not in TILE_FIELDS[backend]]
    if foreign:
        raise ValueError(f"{foreign} are not tile fields of backend={backend!r}; it takes "
                         f"{list(TILE_FIELDS[backend])}")
    names = list(axes)
    return [dict(zip(names, values, strict=True))
            for values in itertools.product(*(list(dict.fromkeys(v)) for v in axes.values()))]


def default_grid(backend: str) -> list[dict]:
    """The grid tune() searches for `backend` ("triton" or "cpu_blocked")."""
    if backend not in DEFAULT_AXES:
        raise ValueError(f"backend={backend!r} has no tile grid: cuBLAS ('torch') picks its own "
                         "tiles; tune 'triton' on a GPU or 'cpu_blocked' on the CPU")
    return config_grid(DEFAULT_AXES[backend], backend)


@dataclass
class TuneOutcome:
    """What tune() did: the stored entry, whether it was reused, and the search if one ran."""

    entry: dict
    reused: bool
    search: SearchResult | None = None
    records: list[Record] = field(default_factory=list)


def tune(m: int, n: int, k: int, precision: str = "fp32", backend: str = "auto",
         grid: Sequence[Mapping] | None = None, *, device: str = "auto", budget_s: float = 0.3,
         store: str | os.PathLike | None = None, out: str | os.PathLike | None = None,
         force: bool = False, on_trial: Callable[[Record], None] | None = None,
         on_start: Callable[[dict, float], None] | None = None,
         cancel: CancelToken | None = None, fp8_acc: str | None = None) -> TuneOutcome:
    """The fastest tile of `grid` (default: default_grid) for one shape, stored or reused
    (`force`: tune even when stored). `on_trial(record)` sees each trial's record,
    `on_start(config, budget_s)` each trial as it begins; configs the card refuses
    (check_config) are left out before anything is timed."""
    device = resolve_device(device)
    backend = default_tile_backend(device) if backend == "auto" else backend
    grid = [dict(c) for c in (grid if grid is not None else default_grid(backend))]
    shape = {"m": m, "n": n, "k": k, "precision": precision, "backend": backend}
    if fp8_acc is not None:
        shape["fp8_acc"] = fp8_acc
    MatmulSpec(m, n, k, precision, backend, fp8_acc=fp8_acc)  # a bad shape: refused up front
    if out is not None:
        check_writable(out)
    env = environment(device)
    env["fingerprint"] = fingerprint(env)
    tuned = TunedStore(store if store is not None else tuned_store_path())
    key = TunedStore.key(fingerprint=env["fingerprint"], **shape)
    if not force:
        entry = tuned.get(key, grid)
        if entry is not None:
            return TuneOutcome(entry=entry, reused=True)

    outcome, run_id = TuneOutcome(entry={}, reused=False), new_run_id()

    def validate(config: dict) -> None:
        check_config(MatmulSpec(m, n, k, precision, backend, fp8_acc=fp8_acc, **config),
                     device)

    def evaluate(config: dict, trial_budget_s: float, first: bool) -> dict:
        if on_start is not None:
            on_start(config, trial_budget_s)
        def point(**params):  # checked against float64 the first time it runs, then timed
            return tiled_matmul_point(**params, device=device, budget_s=trial_budget_s,
                                      warmup_s=WARMUP_SHARE * trial_budget_s, check=first,
                                      cancel=cancel)

        record = measure_point(point, {**shape, **config}, workload="tiles", device=device,
                               env=env, run_id=run_id, cancel=cancel)
        record = dataclasses.replace(record, metrics={**record.metrics,
                                                      "budget_s": trial_budget_s})
        outcome.records.append(record)
        if out is not None:
            append_record(out, record)
        if on_trial is not None:
            on_trial(record)
        if record.outcome != "ok":
            return {"outcome": record.outcome, "message": record.message}
        timing = Timing(samples_ms=record.time_ms, warmup=0, device=record.env.get("device", ""))
        return {"outcome": "ok", "timing": timing, "noise": record.noise}

    try:
        outcome.search = search(grid, validate, evaluate, budget_s=budget_s,
                                should_stop=lambda: cancel is not None and cancel.cancelled)
    except Cancelled:
        outcome.search = None
    if outcome.search is not None and outcome.search.best is not None and \
            not outcome.search.cancelled and not outcome.search.contended:
        best = next(r for r in reversed(outcome.records) if r.outcome == "ok" and all(
            r.params.get(f) == v for f, v in outcome.search.best.items()))
        outcome.entry = tuned.put(key, grid, outcome.search, shape=shape,
                                  tflops=best.throughput, device_name=env["device_name"])
    return outcome

