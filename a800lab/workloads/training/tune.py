"""Tune a training configuration for a target effective batch: successive halving (the search
every tuner shares, a800lab.core.search) over precision x micro-batch x accumulation x
checkpointing x compile x optimizer implementation, every candidate verified, the frontier of
samples/s against peak memory, the winner stored and reused, the code to paste.

    from a800lab.workloads.training.tune import tune_train
    outcome = tune_train(model="transformer", target_batch=256)     # or task=custom_task(...)
    outcome.winner, outcome.entry["samples_per_s"]   # the config and its rate
    outcome.within_noise                             # how many others it cannot be told from
    outcome.frontier                                 # [{samples_per_s, peak_bytes, config}, ...]
    print(outcome.summary()); print(outcome.snippet) # what `tune train` prints

How: the max-batch finder bounds the micro-batch of each (precision, checkpointing) on this
device (on a CPU a pretend limit, 256 MiB by default); the micro-batches tried are the target's
divisors up to that bound (the largest and its halvings, MICRO_CANDIDATES of them), each with
the accumulation that makes the target. A config the device or the model cannot run is refused
with the reason before anything runs. Each candidate is verified once, at its first timing:
a fresh model's first two optimizer steps peak within the budget (the limit less the margin);
its gradient on the same samples from the same weights equals the fp32 reference (one batch of
the target, or the largest fp32 micro-batch that fits, accumulated) within the precision's
tolerance (GRAD_TOLERANCE, or twice what the precision alone costs, whichever is larger): batch
norm, for one, makes k micro-batches of b differ from one batch of k*b; and its loss stays
finite. Then the shared search times every candidate (whole optimizer steps at the target)
with a sixteenth of `budget_s`, keeps the fastest quarter and any within their noise, times
those with a quarter, and the last survivors with the full budget. Every trial is a result
record (workload "tune-train") appended to `out` as it is measured, with its noise verdict.

The winner is the fastest of the last round; "within noise of N others" counts the configs of
that round whose middle half of step times overlaps the winner's. A winner whose last round
ran on a contended CPU ranks nothing and is not stored (the summary says so). It is stored (default
~/.cache/a800lab/tuned.json, or $A800LAB_TUNED) per device fingerprint, model fingerprint
(its structure and batch shapes), torch version, target, optimizer and memory limit, and
reused by a later call over the same grid unless `force`.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

import torch
from torch import nn

from ...core.backends import resolve_device
from ...core.cancel import Cancelled, CancelToken
from ...core.environment import environment, fingerprint
from ...core.memory import free_after_oom, is_oom
from ...core.results import Record, append_record, check_writable, new_run_id
from ...core.search import SearchResult, config_key, search
from ...core.store import TunedStore
from ...core.sweep import measure_point
from ...core.timing import Timing, measure
from ...core.units import format_bytes
from ..tiles.tune import default_store_path
from .levers import CompileWatch, lever_unavailable
from .max_batch import DEFAULT_MARGIN, default_limit_bytes, find_max_batch_for
from .models import Task, default_size, preset
from .snippet import training_snippet
from .spec import TrainSpec, check_precision, positive_int, precisions_for
from .trainer import (
    POOL_BATCHES,
    Trainer,
    check_levers,
    gradient_gap,
    measure_step_memory,
)

WORKLOAD = "tune-train"
LEVERS = ("precision", "checkpointing", "compile", "optimizer_impl", "attention",
          "channels_last")
CPU_AXES = {"precision": ["fp32"], "checkpointing": [False, True], "compile": ["off"],
            "optimizer_impl": ["for-loop", "foreach", "fused"]}
GPU_AXES = {"precision": ["bf16", "fp16", "tf32"], "checkpointing": [False, True],
            "compile": ["off", "default"], "optimizer_impl": ["foreach", "fused"]}
MICRO_CANDIDATES = 4      # micro-batches per (precision, checkpointing): the largest, halvings
WARMUP_STEPS = 2          # per trial before timing (the first compiles, if anything does)
# |gradient - fp32 reference| / max |reference| allowed per precision (at least; or twice the
# precision's own gap without accumulation, whichever is larger)
GRAD_TOLERANCE = {"fp32": 1e-3, "tf32": 1e-2, "fp16": 2e-2, "bf16": 2e-2, "bf16_pure": 5e-2}
SCALER_RETRIES = 8        # fp16: first cycles may overflow until GradScaler backs off


def default_axes(device: str) -> dict:
    """The lever axes tune_train searches unless given (GPU precisions the device lacks are
    left out)."""
    if device == "cpu":
        return {k: list(v) for k, v in CPU_AXES.items()}
    axes = {k: list(v) for k, v in GPU_AXES.items()}
    axes["precision"] = [p for p in axes["precision"] if p in precisions_for(device)]
    return axes


def micro_batches(target_batch: int, bound: int, count: int = MICRO_CANDIDATES) -> list[int]:
    """Divisors of the target up to `bound`: the largest, then the largest at most half of the
    previous, `count` of them (largest first)."""
    out, limit = [], min(bound, target_batch)
    while limit >= 1 and len(out) < count:
        micro = next(d for d in range(limit, 0, -1) if target_batch % d == 0)
        out.append(micro)
        limit = micro // 2
    return out


def model_fingerprint(task: Task, device: str) -> str:
    """12 hex characters of the model's structure, parameter shapes and dtypes and the shapes
    of its batches: the same model gives the same fingerprint on any machine."""
    model = task.make_model()
    inputs, targets = task.make_batch(2, torch.Generator(device).manual_seed(0))
    flat = list(inputs) if isinstance(inputs, (tuple, list)) else [inputs]
    text = repr(model) + repr([(n, tuple(p.shape), str(p.dtype))
                               for n, p in model.named_parameters()])
    text += repr([(tuple(t.shape), str(t.dtype)) for t in [*flat, targets]])
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def pareto_frontier(candidates: list[dict]) -> list[dict]:
    """The candidates no other beats in both samples/s (higher) and peak_bytes (lower), by
    peak memory."""
    ordered = sorted(candidates, key=lambda c: (c["peak_bytes"], -c["samples_per_s"]))
    frontier, best = [], 0.0
    for c in ordered:
        if c["samples_per_s"] > best:
            frontier.append(c)
            best = c["samples_per_s"]
    return frontier


def _split(part, size: int):
    if isinstance(part, torch.Tensor):
        return list(torch.split(part, size))
    return [tuple(p) for p in zip(*(_split(x, size) for x in part), strict=True)]


class TuneSession:
    """The state of one tuning run: bounds, the grid, the reference gradient and each
    candidate's verification. tune_train drives it; benchmarks time its grid exhaustively
    (`validate`, `evaluate`) to compare."""

    def __init__(self, task: Task, base: TrainSpec, target_batch: int, device: str, *,
                 axes: Mapping, limit_bytes: int | None, margin: float,
                 out=None, on_trial: Callable[[Record], None] | None = None,
                 on_stage: Callable[[str], None] | None = None,
                 cancel: CancelToken | None = None):
        self.task, self.base, self.target, self.device = task, base, target_batch, device
        self.axes, self.margin, self.cancel = dict(axes), margin, cancel
        self.limit = limit_bytes or default_limit_bytes(device)
        self.injected = limit_bytes if (limit_bytes is not None or device == "cpu") else None
        if device == "cpu":
            self.injected = self.limit
        self.out, self.on_trial, self.say = out, on_trial, on_stage or (lambda text: None)
        self.env = environment(device)
        self.env["fingerprint"] = fingerprint(self.env)
        self.run_id, self.records = new_run_id(), []
        self.refused: dict[str, str] = {}
        self.bounds: dict[str, int] = {}
        self._checks: dict[str, dict] = {}
        self._baselines: dict[str, float] = {}
        self._samples = self._init = self._reference = None
        self.reference_micro = 0  # the fp32 reference's micro-batch, once computed

    @property
    def budget_bytes(self) -> float:
        return self.limit * (1 - self.margin)

    def lever_grid(self) -> list[dict]:
        """Every combination of the lever axes (no micro-batch yet): what the store keys on."""
        names = [n for n in LEVERS if n in self.axes]
        return [dict(zip(names, values, strict=True))
                for values in itertools.product(*(self.axes[n] for n in names))]

    def spec_of(self, config: Mapping) -> TrainSpec:
        return replace(self.base, **config)

    def plan(self) -> list[dict]:
        """Bound the micro-batch of each (precision, checkpointing) with the max-batch finder,
        then the full grid of configs; refusals land in `refused`."""
        grid = []
        for levers in self.lever_grid():
            spec = self.spec_of({**levers, "batch_size": 1, "accum_steps": 1})
            reason = lever_unavailable(spec, self.device)
            if not reason:
                reason = self._bound(spec)
            if reason:
                self.refused[config_key(levers)] = reason
                continue
            bound = self.bounds[_bound_key(spec)]
            for micro in micro_batches(self.target, bound):
                grid.append({"precision": levers["precision"], "batch_size": micro,
                             "accum_steps": self.target // micro,
                             **{k: v for k, v in levers.items() if k != "precision"}})
        return grid

    def _bound(self, spec: TrainSpec) -> str:
        """Find (once per precision and checkpointing) the largest micro-batch; "" or why not."""
        key = _bound_key(spec)
        if key not in self.bounds:
            self.say(f"bounding the micro-batch: {key} ...")
            try:
                found = find_max_batch_for(
                    replace(self.base, precision=spec.precision,
                            checkpointing=spec.checkpointing), self.task, device=self.device,
                    limit_bytes=self.injected, margin=self.margin, target_batch=self.target,
                    max_batch=self.target, cancel=self.cancel)
            except ValueError as exc:
                self.bounds[key] = 0
                return str(exc)
            self.bounds[key] = found.batch_size
            self.say(f"  {key}: micro-batches up to {found.batch_size} fit "
                     f"({found.runs} trials, {found.wall_s:.1f} s)")
        if not self.bounds[key]:
            return f"{key}: no micro-batch fits in {format_bytes(self.budget_bytes)}"
        return ""

    def validate(self, config: dict) -> None:
        """ValueError when a config cannot run (check_levers; a forced attention back end is
        tried once per back end and precision)."""
        spec = self.spec_of(config)
        key = f"levers {spec.attention}/{spec.precision}/{spec.compile}/{spec.channels_last}"
        if key not in self._checks:
            try:
                check_levers(spec, self.task, self.device)
                self._checks[key] = {}
            except ValueError as exc:
                self._checks[key] = {"refused": str(exc)}
        if "refused" in self._checks[key]:
            raise ValueError(self._checks[key]["refused"])

    # ---- the gradient reference -------------------------------------------------------------
    def _micro(self, trainer: Trainer, micro: int) -> list[tuple]:
        if self._samples is None:
            generator = torch.Generator(self.device).manual_seed(1)
            self._samples = self.task.make_batch(self.target, generator)
        parts = _split(tuple(self._samples), micro)
        return [trainer.prepare(p, micro) for p in parts]

    def _gradient(self, spec: TrainSpec) -> torch.Tensor:
        """The spec's unscaled gradient of the reference samples from the reference weights
        (fp16: after GradScaler has backed off any overflowing first cycles)."""
        if self._init is None:
            self._reference_gradient()
        trainer = Trainer(spec, self.task, self.device)
        trainer.load_parameters(self._init)
        batches = self._micro(trainer, spec.batch_size)
        for _ in range(SCALER_RETRIES):
            grad = trainer.cycle_gradient(batches)  # a non-finite one was skipped: same weights
            if bool(torch.isfinite(grad).all()) or not trainer.scaler.is_enabled():
                return grad
        return grad

    def _reference_gradient(self) -> None:
        fp32 = replace(self.base, precision="fp32", checkpointing=False, batch_size=1,
                       accum_steps=1)
        self._bound(fp32)
        micro = micro_batches(self.target, max(1, self.bounds[_bound_key(fp32)]), 1)[0]
        spec = replace(fp32, batch_size=micro, accum_steps=self.target // micro)
        trainer = Trainer(spec, self.task, self.device)
        self._init = [p.detach().clone() for p in trainer.model.parameters()]
        self._reference = trainer.cycle_gradient(self._micro(trainer, micro))
        self.reference_micro = micro

    def tolerance(self, precision: str) -> float:
        """GRAD_TOLERANCE, or twice the precision's own gap at the reference micro-batch."""
        if precision not in self._baselines:
            gap = 0.0
            if precision != "fp32":
                spec = replace(self.base, precision=precision, batch_size=self.reference_micro,
                               accum_steps=self.target // self.reference_micro)
                gap = gradient_gap(self._gradient(spec), self._reference)
            self._baselines[precision] = gap
        return max(GRAD_TOLERANCE[precision], 2 * self._baselines[precision])

    # ---- one candidate ----------------------------------------------------------------------
    def _verify(self, spec: TrainSpec) -> dict:
        """Memory within the budget, the gradient equal to the reference, finite: {} or the
        failure as a point function's {"outcome", "message"}; plus the metrics seen."""
        try:
            peak = measure_step_memory(spec, self.task, self.device, cycles=2,
                                       limit_bytes=self.injected).peak_bytes
            failure = None
        except Exception as exc:
            if not is_oom(exc):
                raise
            failure = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        if failure is not None:
            free_after_oom()  # out of the except block: the failed step's tensors are gone
            return {"outcome": "oom", "message": failure}
        if peak > self.budget_bytes:
            return {"outcome": "oom", "message": f"peaked at {format_bytes(peak)}, over the "
                                                 f"{format_bytes(self.budget_bytes)} budget"}
        grad = self._gradient(spec)
        if not bool(torch.isfinite(grad).all()):
            return {"outcome": "wrong", "message": "the gradient is not finite"}
        gap, tol = gradient_gap(grad, self._reference), self.tolerance(spec.precision)
        if not gap <= tol:
            norm = any(isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d))
                       for m in self.task.make_model().modules())
            return {"outcome": "wrong", "step_peak_bytes": peak, "grad_gap": gap, "message": (
                f"gradient off: {spec.accum_steps} x {spec.batch_size} gives {gap:.2g} from the "
                f"fp32 reference ({self.target // self.reference_micro} x "
                f"{self.reference_micro}), over the {spec.precision} tolerance {tol:.2g}"
                + ("; batch norm makes micro-batches differ from one batch" if norm else ""))}
        return {"step_peak_bytes": peak, "grad_gap": gap, "grad_tolerance": tol}

    def trial(self, *, budget_s: float, cancel: CancelToken | None = None, **config) -> dict:
        """Verify (the first time) and time one config: a sweep point function."""
        config = {k: v for k, v in config.items() if k in (*LEVERS, "batch_size",
                                                             "accum_steps")}
        spec, key = self.spec_of(config), config_key(config)
        if key not in self._checks:
            self._checks[key] = self._verify(spec)
        checked = self._checks[key]
        if checked.get("outcome"):
            return dict(checked)
        trainer = Trainer(spec, self.task, self.device)
        compiling = CompileWatch(spec.compile)
        history = trainer.train(1, cancel=cancel)
        compiling.first_step_done()
        history += trainer.train(WARMUP_STEPS - 1, cancel=cancel)
        pool = trainer.batches(min(spec.accum_steps, POOL_BATCHES))
        last = {}
        timing = measure(lambda: last.update(loss=trainer.cycle(pool)), device=self.device,
                         budget_s=budget_s, warmup_s=0.0, min_warmup=1, cancel=cancel)
        loss = float(last["loss"])
        if not math.isfinite(loss):
            return {"outcome": "wrong", "message": f"the loss is {loss} after the timed steps "
                                                   "(this precision diverged)"}
        return {"throughput": self.target / (timing.median_ms / 1e3),
                "throughput_unit": "samples/s", "timing": timing, "loss": loss,
                "budget_s": budget_s, **checked,
                **compiling.metrics([h["wall_s"] for h in history])}

    def evaluate(self, config: dict, budget_s: float, first: bool = True) -> dict:
        """One trial as a record (appended to `out`); the search's evaluate() (a config is
        verified at its first trial whatever `first` says: the check is kept per config)."""
        def point(**params):
            return self.trial(budget_s=budget_s, cancel=self.cancel, **params)

        record = measure_point(point, dict(config), workload=WORKLOAD, device=self.device,
                               env=self.env, run_id=self.run_id, cancel=self.cancel)
        self.records.append(record)
        if self.out is not None:
            append_record(self.out, record)
        if self.on_trial is not None:
            self.on_trial(record)
        if record.outcome != "ok":
            return {"outcome": record.outcome, "message": record.message}
        return {"outcome": "ok", "timing": Timing(record.time_ms, 0, self.device),
                "noise": record.noise}

    def verified(self, config: Mapping) -> dict:
        """What a config's verification found: step_peak_bytes, grad_gap, grad_tolerance (or
        the failure's outcome and message); {} before its first trial."""
        return dict(self._checks.get(config_key(config), {}))

    def candidates(self, result: SearchResult) -> list[dict]:
        """Each measured config's longest-budget trial with its verified peak: samples_per_s,
        median_ms, iqr_ms, peak_bytes, round, budget_s, config."""
        out = []
        for trial in result.final().values():
            checked = self.verified(trial.config)
            out.append({"config": trial.config, "samples_per_s":
                        self.target / (trial.median_ms / 1e3), "median_ms": trial.median_ms,
                        "iqr_ms": trial.timing.iqr_ms, "peak_bytes": checked["step_peak_bytes"],
                        "grad_gap": checked.get("grad_gap"), "round": trial.round,
                        "budget_s": trial.budget_s})
        return out


def describe_candidate(config: Mapping) -> str:
    """"fp32, 64 x 4, checkpointing off, compile off, optimizer fused" (levers at their
    defaults left out, except those two)."""
    text = f"{config['precision']}, {config['batch_size']} x {config['accum_steps']}"
    text += f", checkpointing {'on' if config.get('checkpointing') else 'off'}"
    text += f", compile {config.get('compile', 'off')}"
    text += f", optimizer {config.get('optimizer_impl', 'default')}"
    if config.get("attention", "default") != "default":
        text += f", attention {config['attention']}"
    return text + (", channels_last" if config.get("channels_last") else "")


def _bound_key(spec: TrainSpec) -> str:
    return f"{spec.precision}, checkpointing {'on' if spec.checkpointing else 'off'}"


@dataclass
class TuneOutcome:
    """What tune_train did: the stored entry (reused or new), the search, the frontier."""

    entry: dict
    reused: bool
    search: SearchResult | None = None
    session: TuneSession | None = None
    records: list[Record] = field(default_factory=list)

    @property
    def winner(self) -> dict | None:
        return self.entry.get("best")

    @property
    def within_noise(self) -> int:
        return int(self.entry.get("within_noise", 0))

    @property
    def frontier(self) -> list[dict]:
        return list(self.entry.get("frontier", []))

    @property
    def snippet(self) -> str:
        return self.entry.get("snippet", "")

    def summary(self) -> str:
        """The winner (and its noise), the frontier, what was refused or failed."""
        e = self.entry
        if not e:
            return "no result: " + (self.search.verdict if self.search else "stopped")
        lines = [f"! not stored: the last round ran on a contended CPU ({e['contended']}): "
                 "the ranking may not hold; tune again on a quiet machine"] \
            if e.get("contended") else []
        lines += [f"winner: {describe_candidate(e['best'])}: {e['samples_per_s']:.4g} samples/s, "
                 f"peak {format_bytes(e['peak_bytes'])}" + (
                     f"; within noise of {e['within_noise']} other config(s): either may win "
                     "a re-run" if e["within_noise"] else "; clear of the noise")]
        lines.append("frontier (samples/s vs peak memory, none both faster and smaller), "
                     "micro-batch x accumulation:")
        lines += [f"  {c['samples_per_s']:10.4g} samples/s  {format_bytes(c['peak_bytes']):>10}  "
                  f"{describe_candidate(c['config'])}" for c in e["frontier"]]
        lines.append(f"{e['measured']} configs measured, {e['refused']} refused, {e['failed']} "
                     f"failed verification, in {e['wall_s']:.1f} s")
        if e.get("noisy_trials"):
            lines.append(f"! {e['noisy_trials']} of {e['trials']} trials were noisy (timing "
                         "spread, or the CPU shared with other work): the ranking may not hold; "
                         "tune again on a quieter machine (force=True / --force)")
        if self.search is not None:
            why = list(self.search.failed.values())[:3]
            lines += [f"  failed: {w}" for w in why]
        return "\n".join(lines)


def tune_train(task: Task | None = None, *, model: str = "mlp", size: str | None = None,
               target_batch: int = 256, axes: Mapping | None = None, optimizer: str = "adamw",
               lr: float | None = None, device: str = "auto", limit_bytes: int | None = None,
               margin: float = DEFAULT_MARGIN, budget_s: float = 0.5,
               store: str | os.PathLike | None = None, out: str | os.PathLike | None = None,
               force: bool = False, on_trial: Callable[[Record], None] | None = None,
               on_stage: Callable[[str], None] | None = None,
               cancel: CancelToken | None = None) -> TuneOutcome:
    """Tune `task` (your own; else the preset `model` at `size`) for `target_batch`; see the
    module docstring. `axes`: lever -> values (default: default_axes); `budget_s`: the
    timing budget of the final round per config; `limit_bytes`: the memory to fit in
    (default: the device's free memory, 256 MiB on a CPU)."""
    started = time.perf_counter()
    device = resolve_device(device)
    positive_int("target_batch", target_batch, "256")
    axes = {**default_axes(device), **(axes or {})}
    unknown = set(axes) - set(LEVERS)
    if unknown:
        raise ValueError(f"unknown axes {sorted(unknown)}: tune_train varies {list(LEVERS)}")
    size = size or default_size(device)
    base = TrainSpec(model=model if task is None else task.name, size=size,
                     optimizer=optimizer, lr=lr)
    for levers in [dict(zip(axes, v, strict=True)) for v in itertools.product(*axes.values())]:
        spec = replace(base, **levers)  # a bad value: ValueError naming it, before any run
        check_precision(spec.precision, device)
    task = task or preset(base.model, size)
    if out is not None:
        check_writable(out)
    session = TuneSession(task, base, target_batch, device, axes=axes, limit_bytes=limit_bytes,
                          margin=margin, out=out, on_trial=on_trial, on_stage=on_stage,
                          cancel=cancel)
    tuned = TunedStore(store if store is not None else default_store_path())
    key = TunedStore.key(workload=WORKLOAD, fingerprint=session.env["fingerprint"],
                         model=model_fingerprint(task, device), torch=torch.__version__,
                         target_batch=target_batch, optimizer=optimizer, lr=lr,
                         limit_bytes=limit_bytes, margin=margin)
    levers = session.lever_grid()
    if not force:
        entry = tuned.get(key, levers)
        if entry is not None:
            return TuneOutcome(entry=entry, reused=True)
    outcome = TuneOutcome(entry={}, reused=False, session=session, records=session.records)
    try:
        grid = session.plan()
        session.say(f"searching {len(grid)} configs ({len(session.refused)} refused)")
        outcome.search = search(grid, session.validate, session.evaluate, budget_s=budget_s,
                                should_stop=lambda: cancel is not None and cancel.cancelled)
    except Cancelled:
        return outcome
    result = outcome.search
    if result.best is None or result.cancelled:
        return outcome
    candidates = session.candidates(result)
    best = next(c for c in candidates if c["config"] == result.best)
    lr_used = lr or task.lr
    note = (f"tuned by a800lab on {session.env['device_name']}: {best['samples_per_s']:.4g} "
            f"samples/s, peak {format_bytes(best['peak_bytes'])}")
    facts = dict(
        samples_per_s=best["samples_per_s"],
        peak_bytes=best["peak_bytes"], within_noise=len(result.rivals),
        within_noise_configs=result.rivals,
        frontier=pareto_frontier(candidates), candidates=candidates,
        measured=len(candidates), refused=len(session.refused) + len(result.refused),
        noisy_trials=sum(bool(r.noise.get("noisy")) for r in session.records),
        trials=len(session.records),
        failed=len(result.failed), bounds=session.bounds, target_batch=target_batch,
        device_name=session.env["device_name"], mode=session.env["mode"],
        model=task.description or task.name,
        snippet=training_snippet(result.best, optimizer=optimizer, lr=lr_used, device=device,
                                 note=note),
        wall_s=time.perf_counter() - started)
    if result.contended:  # a contended last round ranks nothing: shown, never stored
        outcome.entry = {"best": result.best, "best_median_ms": result.best_median_ms,
                         "verdict": result.verdict, "contended": result.contended,
                         "stored": False, **facts}
    else:
        outcome.entry = {**tuned.put(key, levers, result, **facts), "stored": True}
    return outcome
