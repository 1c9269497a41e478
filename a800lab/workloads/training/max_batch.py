"""The largest micro-batch that fits, found without crashing: a memory model fitted to probes
guides growing and bisecting, full steps of a fresh model verify the answer; and a target
effective batch split into micro-batch x accumulation.

    found = find_max_batch_for(TrainSpec(model="transformer"), device="cuda", target_batch=1024)
    found.batch_size, found.plan, found.summary()
"""

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from ...core.backends import resolve_device
from ...core.cancel import CancelToken
from ...core.checks import positive_int
from ...core.memory import available_bytes, free_after_oom, is_oom
from ...core.sweep import first_line
from ...core.units import MIB, format_bytes
from ..models.presets import preset
from ..models.task import batch_norm_layers
from .memory import MemoryModel, fit_memory_model, prediction_error
from .spec import TrainSpec, check_precision
from .trainer import Task, measure_step_memory

CPU_DEFAULT_LIMIT_BYTES = 256 * MIB  # a pretend budget: the CPU search runs in seconds
DEFAULT_MARGIN = 0.10                # keep 10% of the limit free (fragmentation, other work)
MODEL_TOLERANCE = 0.10               # a candidate predicted this far over the budget is hopeless
MIN_TOLERANCE = 0.002                # ... or twice the model's worst error so far, if smaller
VERIFY_STEPS = 3
RESOLUTION = 1 / 64                  # stop bisecting when the gap is this share of the answer
MAX_BATCH = 2**20

# trial(batch_size, accum_steps, cycles) -> a MemoryBreakdown (peak_bytes, static_bytes, meter)
Trial = Callable[[int, int, int], object]


@dataclass(frozen=True)
class TrialRecord:
    """One candidate: "ok", "oom", "over" (peaked above the budget) or "skipped" (hopeless)."""

    stage: str
    batch_size: int
    accum_steps: int
    outcome: str
    peak_bytes: int | None = None
    predicted_bytes: float | None = None
    wall_s: float = 0.0
    message: str = ""

    @property
    def fits(self) -> bool:
        return self.outcome == "ok"


@dataclass(frozen=True)
class BatchPlan:
    """An effective batch as micro-batch x accumulation steps (never a smaller one)."""

    target_batch: int
    batch_size: int
    accum_steps: int
    note: str = ""
    warning: str = ""  # when accumulating changes what is learnt (batch norm)

    @property
    def effective_batch(self) -> int:
        return self.batch_size * self.accum_steps


def plan_effective_batch(target_batch: int, max_batch_size: int) -> BatchPlan:
    """The fewest accumulation steps of equal micro-batches (<= max_batch_size) that make
    exactly `target_batch`; a note when a nearby target would split better."""
    positive_int("target_batch", target_batch, "1024")
    if max_batch_size < 1:
        raise ValueError("not even a micro-batch of 1 fits: use a smaller model, activation "
                         "checkpointing, bf16, or a device with more memory")
    steps = accum = math.ceil(target_batch / max_batch_size)  # steps: the fewest at all
    while target_batch % accum:
        accum += 1
    micro = target_batch // accum
    note = ""
    if accum > 1 and 2 * micro <= max_batch_size:
        note = (f"{target_batch} splits evenly only as {accum} x {micro} (micro-batches up to "
                f"{max_batch_size} fit): small micro-batches run slower; a target of "
                f"{steps * max_batch_size} would be {steps} x {max_batch_size}")
    return BatchPlan(target_batch, micro, accum, note)


@dataclass
class MaxBatchResult:
    """What the search found: the answer, every trial, the fitted model and the verification."""

    batch_size: int
    limit_bytes: int
    margin: float
    trials: list[TrialRecord] = field(default_factory=list)
    model: MemoryModel | None = None
    plan: BatchPlan | None = None
    verified: TrialRecord | None = None
    wall_s: float = 0.0
    device: str = ""
    message: str = ""

    @property
    def budget_bytes(self) -> float:
        return self.limit_bytes * (1 - self.margin)

    @property
    def runs(self) -> int:
        """Trials actually run (skipped ones cost nothing)."""
        return sum(t.outcome != "skipped" for t in self.trials)

    @property
    def predicted_bytes(self) -> float | None:
        """The model's prediction for the answer before it first ran, else None."""
        return next((t.predicted_bytes for t in self.trials if t.batch_size == self.batch_size
                     and t.outcome != "skipped"), None)

    @property
    def measured_bytes(self) -> int | None:
        return None if self.verified is None else self.verified.peak_bytes

    def summary(self) -> str:
        """One paragraph: the answer, predicted vs measured, the trials it took."""
        if not self.batch_size:
            return f"No micro-batch fits in {format_bytes(self.limit_bytes)}. {self.message}"
        text = (f"Largest micro-batch: {self.batch_size} (budget {format_bytes(self.budget_bytes)}"
                f" = limit {format_bytes(self.limit_bytes)} less a {self.margin:.0%} margin)")
        if self.measured_bytes is not None:
            text += f"; verified peak {format_bytes(self.measured_bytes)}"
            if self.predicted_bytes is not None:
                error = prediction_error(self.predicted_bytes, self.measured_bytes)
                text += f", predicted {format_bytes(self.predicted_bytes)} ({error:+.1%})"
        if self.plan is not None:
            text += (f". Target {self.plan.target_batch} = {self.plan.batch_size} x "
                     f"{self.plan.accum_steps} accumulation steps")
            if self.plan.note:
                text += f" ({self.plan.note})"
            if self.plan.warning:
                text += f". ! {self.plan.warning}"
        skipped = len(self.trials) - self.runs
        text += (f". {self.runs} trials run, {skipped} skipped by the model, "
                 f"{self.wall_s:.1f} s.")
        return text + (f" {self.message}" if self.message else "")

    def to_dict(self) -> dict:
        return {"batch_size": self.batch_size, "limit_bytes": self.limit_bytes,
                "margin": self.margin, "budget_bytes": self.budget_bytes, "runs": self.runs,
                "trials": [t.__dict__ for t in self.trials], "wall_s": self.wall_s,
                "model": None if self.model is None else self.model.to_dict(),
                "plan": None if self.plan is None else {**self.plan.__dict__},
                "predicted_bytes": self.predicted_bytes, "measured_bytes": self.measured_bytes,
                "device": self.device, "message": self.message}


class _Search:
    """State of one search: runs trials, records them, frees memory after each OOM."""

    def __init__(self, trial: Trial, result: MaxBatchResult, *, accum_steps: int,
                 use_model: bool, on_trial, cancel: CancelToken | None):
        self.trial, self.result, self.accum_steps = trial, result, accum_steps
        self.use_model, self.on_trial, self.cancel = use_model, on_trial, cancel
        self.lo, self.hi = 0, None  # largest success, smallest failure (verification aside)
        self.probes: list = []      # (batch_size, MemoryBreakdown) of every run but verifications

    def attempt(self, stage: str, batch_size: int, accum_steps: int | None = None,
                cycles: int = 2) -> bool:
        """Run (or skip, when the model calls it hopeless) one candidate; True if it fits. Two
        cycles: the optimizer's first step (its state appears) and one step with that state."""
        if self.cancel is not None:
            self.cancel.raise_if_cancelled()
        accum_steps = accum_steps or self.accum_steps
        model = self.result.model  # fitted only when use_model
        predicted = None if model is None else model.predict(batch_size)
        budget = self.result.budget_bytes
        if predicted is not None and stage != "verify" and \
                predicted > budget * (1 + self.tolerance):
            return self._record(TrialRecord(stage, batch_size, accum_steps, "skipped",
                                            predicted_bytes=predicted,
                                            message="predicted over the budget: not run"))
        started, failure, breakdown = time.perf_counter(), None, None
        try:
            breakdown = self.trial(batch_size, accum_steps, cycles)
        except Exception as exc:
            if not is_oom(exc):
                raise
            failure = first_line(exc)
        wall_s = time.perf_counter() - started
        if failure is not None:
            # out of the except block the traceback, and the trial's tensors with it, are gone
            free_after_oom()
            return self._record(TrialRecord(stage, batch_size, accum_steps, "oom",
                                            predicted_bytes=predicted, wall_s=wall_s,
                                            message=failure))
        peak = int(breakdown.peak_bytes)
        fits = peak <= budget
        if stage != "verify":  # every run refines the model, the ones near the limit most
            self.probes.append((batch_size, breakdown))
            if self.use_model and len({b for b, _ in self.probes}) >= 2:
                self.result.model = fit_memory_model(self.probes, grads_in_forward=accum_steps > 1)
        return self._record(TrialRecord(
            stage, batch_size, accum_steps, "ok" if fits else "over", peak_bytes=peak,
            predicted_bytes=predicted, wall_s=wall_s,
            message="" if fits else f"peaked at {format_bytes(peak)}, over the "
                                    f"{format_bytes(budget)} budget"))

    @property
    def tolerance(self) -> float:
        """How far over the budget a prediction may be and still be tried (MIN_TOLERANCE..)."""
        errors = [abs(t.predicted_bytes - t.peak_bytes) / t.peak_bytes for t in self.result.trials
                  if t.predicted_bytes is not None and t.peak_bytes]
        return min(MODEL_TOLERANCE, max(MIN_TOLERANCE, 2 * max(errors))) if errors \
            else MODEL_TOLERANCE

    def _record(self, record: TrialRecord) -> bool:
        self.result.trials.append(record)
        if self.on_trial is not None:
            self.on_trial(record)
        if record.stage != "verify":
            if record.fits:
                self.lo = max(self.lo, record.batch_size)
            elif self.hi is None or record.batch_size < self.hi:
                self.hi = record.batch_size
        return record.fits

    def grow(self, max_batch: int) -> None:
        """Double (or jump to the model's guess) until a candidate fails."""
        result = self.result
        while self.hi is None and self.lo:
            candidate = 2 * self.lo
            if result.model is not None:
                guess = result.model.largest_batch(result.budget_bytes)
                candidate = max(candidate, min(guess, max_batch))
            if candidate > max_batch:
                result.message = f"stopped growing at the max_batch cap of {max_batch}"
                self.hi = max_batch + 1
                return
            self.attempt("grow", candidate)

    def bisect(self, resolution: float) -> None:
        """Halve the gap between the largest success and the smallest failure."""
        while self.hi is not None and self.lo and \
                self.hi - self.lo > max(1, int(self.lo * resolution)):
            self.attempt("bisect", (self.lo + self.hi) // 2)

    def fail_verification(self, batch_size: int) -> None:
        """A verification failed at `batch_size`: it and everything above is too big."""
        self.hi = batch_size
        self.lo = max((t.batch_size for t in self.result.trials
                       if t.fits and t.stage != "verify" and t.batch_size < batch_size),
                      default=0)


def find_max_batch(trial: Trial, *, limit_bytes: int, margin: float = DEFAULT_MARGIN,
                   accum_steps: int = 1, target_batch: int | None = None,
                   use_model: bool = True, max_batch: int = MAX_BATCH,
                   resolution: float = RESOLUTION,
                   on_trial: Callable[[TrialRecord], None] | None = None,
                   cancel: CancelToken | None = None) -> MaxBatchResult:
    """The largest micro-batch whose `trial(batch_size, accum_steps, cycles)` (a MemoryBreakdown
    of `cycles` steps of a fresh model, or an out-of-memory error) peaks within the budget; with
    `target_batch` also the plan, verified. `on_trial` sees every TrialRecord."""
    if isinstance(limit_bytes, bool) or not isinstance(limit_bytes, int) or limit_bytes < 1:
        raise ValueError(f"limit_bytes={limit_bytes!r} must be a positive int of bytes")
    if not 0 <= margin < 1:
        raise ValueError(f"margin={margin!r} must be in [0, 1), e.g. 0.1 for 10% kept free")
    if target_batch is not None:
        plan_effective_batch(target_batch, 1)  # a bad target fails before anything runs
    started = time.perf_counter()
    result = MaxBatchResult(0, limit_bytes, margin)
    search = _Search(trial, result, accum_steps=accum_steps, use_model=use_model,
                     on_trial=on_trial, cancel=cancel)
    if not use_model:
        search.attempt("grow", 1)
    elif search.attempt("probe", 1):
        search.attempt("probe", 2)
    while True:
        search.grow(max_batch)
        search.bisect(resolution)
        if search.lo == 0:
            result.message = ("even a micro-batch of 1 does not fit: use activation "
                              "checkpointing, bf16, a smaller model or more memory")
            break
        plan = None if target_batch is None else plan_effective_batch(target_batch, search.lo)
        checks = [(search.lo, accum_steps)]
        if plan is not None and (plan.batch_size, plan.accum_steps) != checks[0]:
            checks.append((plan.batch_size, plan.accum_steps))
        failed = next((micro for micro, accum in checks
                       if not search.attempt("verify", micro, accum, VERIFY_STEPS)), None)
        if failed is None:
            result.batch_size, result.plan = search.lo, plan
            result.verified = next(t for t in result.trials if t.stage == "verify" and
                                   t.batch_size == search.lo and t.fits)
            break
        search.fail_verification(failed)
    result.wall_s = time.perf_counter() - started
    return result


def default_limit_bytes(device: str) -> int:
    """CPU_DEFAULT_LIMIT_BYTES on a CPU, the memory available now on a GPU."""
    if device == "cpu":
        return CPU_DEFAULT_LIMIT_BYTES
    free_after_oom()
    available = available_bytes(device)
    if not available:
        raise ValueError(f"cannot read the free memory of {device}; give limit_bytes")
    return int(available)


def find_max_batch_for(spec: TrainSpec, task: Task | None = None, *, device: str = "auto",
                       limit_bytes: int | None = None, target_batch: int | None = None,
                       **options) -> MaxBatchResult:
    """find_max_batch (`options`: its margin, use_model, resolution, max_batch, on_trial,
    cancel) for `spec` (its batch_size ignored) on your `task`, else its preset.
    `limit_bytes` given on a GPU is injected (as on a smaller card)."""
    device = resolve_device(device)
    check_precision(spec.precision, device)
    task = task or preset(spec.model, spec.size)
    limit = limit_bytes or default_limit_bytes(device)
    injected = limit if device == "cpu" else limit_bytes
    # planning a target that may need accumulation: search as accumulation will run (>= 2)
    accum = spec.accum_steps if target_batch is None else 2

    def trial(batch_size: int, accum_steps: int, cycles: int):
        return measure_step_memory(replace(spec, batch_size=batch_size, accum_steps=accum_steps),
                                   task, device, cycles=cycles, limit_bytes=injected)

    result = find_max_batch(trial, limit_bytes=limit, accum_steps=accum,
                            target_batch=target_batch, **options)
    result.device = device
    plan = result.plan
    if plan is not None and plan.accum_steps > 1:
        norms = batch_norm_layers(task.make_model())
        if norms:
            result.plan = replace(plan, warning=(
                f"accumulation changes the result: the model's {norms} batch-norm layer(s) "
                f"normalise each micro-batch of {plan.batch_size} on its own, so {plan.accum_steps}"
                f" x {plan.batch_size} is not one batch of {plan.target_batch} (the tuner's "
                "gradient check fails it); accept statistics over the micro-batch, or use "
                "GroupNorm/LayerNorm, or a smaller target"))
    return result


def max_batch_point(model: str, size: str, precision: str, limit_mib: float | None = None, *,
                    device: str = "cpu", cancel: CancelToken | None = None) -> dict:
    """The largest micro-batch of a preset, and the memory model's prediction of its peak."""
    limit = None if limit_mib is None else int(limit_mib * 2**20)
    result = find_max_batch_for(TrainSpec(model=model, size=size, precision=precision),
                                device=device, limit_bytes=limit, cancel=cancel)
    facts = {"limit_bytes": result.limit_bytes, "trials_run": result.runs,
             "search_s": result.wall_s, "summary": result.summary(),
             "predicted_bytes": result.predicted_bytes, "measured_bytes": result.measured_bytes}
    if not result.batch_size:
        return {**facts, "outcome": "oom", "message": result.summary()}
    known = result.predicted_bytes is not None and result.measured_bytes
    return {**facts, "throughput": result.batch_size, "throughput_unit": "samples per micro-batch",
            "prediction_error": prediction_error(result.predicted_bytes, result.measured_bytes)
            if known else None}
