"""Tune the tile of one matmul shape: successive halving over a config grid, every trial a
record, the winner stored per device and reused.

    outcome = tune(4096, 4096, 4096, "bf16", device="cuda", out="tune.jsonl")
"""

import os
from collections.abc import Callable, Mapping, Sequence

from ...core.backends import resolve_device
from ...core.cancel import CancelToken
from ...core.knobs import tuner_axes
from ...core.results import Record
from ...core.store import TunedStore
from ...core.sweep import grid as cartesian
from ...core.tuner import TrialLog, Tuned, drive
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
    return cartesian(axes)


def default_grid(backend: str) -> list[dict]:
    """The grid tune() searches for `backend` ("triton" or "cpu_blocked")."""
    if backend not in DEFAULT_AXES:
        raise ValueError(f"backend={backend!r} has no tile grid: cuBLAS ('torch') picks its own "
                         "tiles; tune 'triton' on a GPU or 'cpu_blocked' on the CPU")
    return config_grid(DEFAULT_AXES[backend], backend)


def tune(m: int, n: int, k: int, precision: str = "fp32", backend: str = "auto",
         grid: Sequence[Mapping] | None = None, *, device: str = "auto", budget_s: float = 0.3,
         store: str | os.PathLike | None = None, out: str | os.PathLike | None = None,
         force: bool = False, on_trial: Callable[[Record], None] | None = None,
         on_start: Callable[[dict, float], None] | None = None,
         cancel: CancelToken | None = None, fp8_acc: str | None = None) -> Tuned:
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
    log = TrialLog("tiles", device, out, on_trial, cancel)
    key = TunedStore.key(fingerprint=log.env["fingerprint"], **shape)

    def validate(config: dict) -> None:
        check_config(MatmulSpec(m, n, k, precision, backend, fp8_acc=fp8_acc, **config),
                     device)

    def evaluate(config: dict, trial_budget_s: float, first: bool) -> dict:
        if on_start is not None:
            on_start(config, trial_budget_s)

        def point(**params):  # checked against float64 the first time it runs, then timed
            return {**tiled_matmul_point(**params, device=device, budget_s=trial_budget_s,
                                         warmup_s=WARMUP_SHARE * trial_budget_s, check=first,
                                         cancel=cancel), "budget_s": trial_budget_s}

        return log.timed(log.measure(point, {**shape, **config}))

    def facts(outcome: Tuned) -> dict:
        best = next(r for r in reversed(log.records) if r.outcome == "ok" and all(
            r.params.get(f) == v for f, v in outcome.search.best.items()))
        return {"shape": shape, "tflops": best.throughput, "device_name": log.env["device_name"]}

    return drive(Tuned(), log, grid, validate, evaluate, budget_s=budget_s, key=key,
                 keyed_on=grid, store=store, force=force, facts=facts)
