"""The candidates of a training-config tuning run: micro-batch bounds (the max-batch finder),
the grid, and each candidate verified at its first trial (memory, gradient vs fp32, a finite
loss) and timed.

    session = TuneSession(task, TrainSpec(model="mlp"), 256, "cpu", axes=default_axes("cpu"),
                          limit_bytes=None, margin=0.1)
    session.evaluate(session.plan()[0], 0.5)         # {"outcome", "timing", "noise"}
"""

import functools
import math
from collections.abc import Callable, Mapping
from dataclasses import replace

import torch

from ...core.cancel import CancelToken
from ...core.knobs import levers, tuner_axes
from ...core.memory import free_after_oom, is_oom
from ...core.results import Record
from ...core.search import SearchResult, config_key
from ...core.sweep import first_line
from ...core.timing import measure
from ...core.tuner import TrialLog, lever_grid
from ...core.units import format_bytes
from ..models.levers import lever_unavailable
from ..models.presets import Task
from ..models.task import batch_norm_layers
from .max_batch import default_limit_bytes, find_max_batch_for
from .spec import TrainSpec, precision_context
from .trainer import Trainer, check_levers, gradient_gap, measure_step_memory

WORKLOAD = "tune-train"
LEVERS = ("precision", "checkpointing", *levers(TrainSpec))  # what a candidate may vary
MICRO_CANDIDATES = 4      # micro-batches per (precision, checkpointing): the largest, halvings
WARM_LIMIT_BYTES = 512 * 2**20  # warm CPU trainers kept for later rounds, at most this much
WARMUP_STEPS = 1          # steps before a config's first timing (they compile, if anything
                          # does; measure() warms up once more); later rounds on a CPU reuse it
# |gradient - fp32 reference| / max |reference| allowed per precision (at least; or twice the
# precision's own gap without accumulation, whichever is larger)
GRAD_TOLERANCE = {"fp32": 1e-3, "fp32_default": 1e-2, "tf32": 1e-2, "fp16": 2e-2, "bf16": 2e-2,
                  "bf16_pure": 5e-2}  # fp32_default: torch's defaults (cuDNN convs in TF32)
SCALER_RETRIES = 8        # fp16: first cycles may overflow until GradScaler backs off


def default_axes(device: str) -> dict:
    """The lever axes tune_train searches unless given: the spec fields' `tune` values (without
    precisions the device lacks)."""
    return tuner_axes(TrainSpec, device)


def micro_batches(target_batch: int, bound: int, count: int = MICRO_CANDIDATES) -> list[int]:
    """`count` divisors of the target up to `bound`, each at most half the previous."""
    out, limit = [], min(bound, target_batch)
    while limit >= 1 and len(out) < count:
        micro = next(d for d in range(limit, 0, -1) if target_batch % d == 0)
        out.append(micro)
        limit = micro // 2
    return out


def _split(part, size: int):
    if isinstance(part, torch.Tensor):
        return list(torch.split(part, size))
    return [tuple(p) for p in zip(*(_split(x, size) for x in part), strict=True)]


class TuneSession:
    """One tuning run: bounds, the grid, the reference gradient, each candidate's checks."""

    def __init__(self, task: Task, base: TrainSpec, target_batch: int, device: str, *,
                 axes: Mapping, limit_bytes: int | None, margin: float,
                 out=None, on_trial: Callable[[Record], None] | None = None,
                 on_stage: Callable[[str], None] | None = None,
                 cancel: CancelToken | None = None):
        self.task, self.base, self.target, self.device = task, base, target_batch, device
        self.axes, self.margin, self.cancel = dict(axes), margin, cancel
        self.limit = limit_bytes or default_limit_bytes(device)
        self.injected = self.limit if device == "cpu" else limit_bytes
        self.say = on_stage or (lambda text: None)
        self.log = TrialLog(WORKLOAD, device, out, on_trial, cancel)
        self.refused: dict[str, str] = {}
        self.bounds: dict[str, int] = {}
        self._unbounded: dict[str, str] = {}  # bound key -> why the finder could not run
        self._checks: dict[str, dict] = {}
        self._baselines: dict[str, float] = {}
        self._warm: dict[str, tuple] = {}  # config key -> (trainer, pool), kept on a CPU
        self._samples = self._init = self._reference = None
        self.reference_micro = 0  # the fp32 reference's micro-batch, once computed

    @property
    def budget_bytes(self) -> float:
        return self.limit * (1 - self.margin)

    def spec_of(self, config: Mapping) -> TrainSpec:
        return replace(self.base, **config)

    def plan(self) -> list[dict]:
        """The grid, its micro-batches bounded; refusals land in `refused`."""
        grid = []
        for config in lever_grid(self.axes, LEVERS, "tune_train"):
            spec = self.spec_of({**config, "batch_size": 1, "accum_steps": 1})
            reason = lever_unavailable(spec, self.device) or self._bound(spec)
            if reason:
                self.refused[config_key(config)] = reason
                continue
            bound = self.bounds[_bound_key(spec)]
            for micro in micro_batches(self.target, bound):
                grid.append({"precision": config["precision"], "batch_size": micro,
                             "accum_steps": self.target // micro,
                             **{k: v for k, v in config.items() if k != "precision"}})
        return grid

    def _bound(self, spec: TrainSpec) -> str:
        """Find (once per key) the largest micro-batch; "" or why not."""
        key = _bound_key(spec)
        if key not in self.bounds:
            self.say(f"bounding the micro-batch: {key} ...")
            try:
                found = find_max_batch_for(
                    replace(self.base, precision=spec.precision,
                            checkpointing=spec.checkpointing), self.task, device=self.device,
                    limit_bytes=self.injected, margin=self.margin, target_batch=self.target,
                    max_batch=self.target, cancel=self.cancel)
            except ValueError as exc:  # kept: every config of this bound is refused for it
                self.bounds[key], self._unbounded[key] = 0, str(exc)
                return str(exc)
            self.bounds[key] = found.batch_size
            self.say(f"  {key}: micro-batches up to {found.batch_size} fit "
                     f"({found.runs} trials, {found.wall_s:.1f} s)")
        if not self.bounds[key]:
            return self._unbounded.get(key) or \
                f"{key}: no micro-batch fits in {format_bytes(self.budget_bytes)}"
        return ""

    def validate(self, config: dict) -> None:
        """ValueError when a config cannot run (check_levers, once per lever combination)."""
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

    def _micro(self, trainer: Trainer, micro: int) -> list[tuple]:
        if self._samples is None:
            generator = torch.Generator(self.device).manual_seed(1)
            self._samples = self.task.make_batch(self.target, generator)
        parts = _split(tuple(self._samples), micro)
        return [trainer.prepare(p, micro) for p in parts]

    def _gradient(self, spec: TrainSpec) -> torch.Tensor:
        """The spec's unscaled gradient of the reference samples from the reference weights."""
        if self._init is None:
            self._reference_gradient()
        trainer = Trainer(spec, self.task, self.device)
        with torch.no_grad():
            for p, q in zip(trainer.model.parameters(), self._init, strict=True):
                p.copy_(q)
        batches = self._micro(trainer, spec.batch_size)
        for _ in range(SCALER_RETRIES):
            grad = trainer.cycle_gradient(batches)  # a non-finite one was skipped: same weights
            if bool(torch.isfinite(grad).all()) or not trainer.scaler.is_enabled():
                return grad
        return grad

    def _reference_gradient(self) -> None:
        """The IEEE fp32 reference gradient of one target batch (accumulated if it must be)."""
        fp32 = replace(self.base, precision="fp32", checkpointing=False, batch_size=1,
                       accum_steps=1)
        with precision_context("fp32"):
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
                with precision_context(precision):
                    gap = gradient_gap(self._gradient(spec), self._reference)
            self._baselines[precision] = gap
        return max(GRAD_TOLERANCE[precision], 2 * self._baselines[precision])

    def _verify(self, spec: TrainSpec) -> dict:
        """The metrics seen, with the failure's "outcome" and "message" if any."""
        try:
            peak = measure_step_memory(spec, self.task, self.device, cycles=2,
                                       limit_bytes=self.injected).peak_bytes
            failure = None
        except Exception as exc:
            if not is_oom(exc):
                raise
            failure = first_line(exc)
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
            norm = batch_norm_layers(self.task.make_model())
            return {"outcome": "wrong", "step_peak_bytes": peak, "grad_gap": gap, "message": (
                f"gradient off: {spec.accum_steps} x {spec.batch_size} gives {gap:.2g} from the "
                f"fp32 reference ({self.target // self.reference_micro} x "
                f"{self.reference_micro}), over the {spec.precision} tolerance {tol:.2g}"
                + ("; batch norm makes micro-batches differ from one batch" if norm else ""))}
        return {"step_peak_bytes": peak, "grad_gap": gap, "grad_tolerance": tol}

    def trial(self, *, budget_s: float, cancel: CancelToken | None = None, **config) -> dict:
        """Verify (the first time) and time one config under its precision's TF32 settings: a
        point function (on a CPU its first trial's warm trainer times the later rounds)."""
        with precision_context(config["precision"]):
            config = {k: v for k, v in config.items()
                      if k in (*LEVERS, "batch_size", "accum_steps")}
            spec, key = self.spec_of(config), config_key(config)
            if key not in self._checks:
                self._checks[key] = self._verify(spec)
            checked = self._checks[key]
            if checked.get("outcome"):
                return dict(checked)
            if key in self._warm:  # a later round on a CPU: the same warm trainer times again
                trainer, pool = self._warm[key]
            else:
                trainer = Trainer(spec, self.task, self.device)
                history = trainer.train(WARMUP_STEPS, cancel=cancel)
                checked.update(trainer.compiling.metrics([h["wall_s"] for h in history]))
                pool = trainer.pool()
                held = sum(self._checks[k]["step_peak_bytes"] for k in self._warm)
                if self.device == "cpu" and held + checked["step_peak_bytes"] <= WARM_LIMIT_BYTES:
                    self._warm[key] = (trainer, pool)  # on a GPU its tensors would count in others
            last = {}
            timing = measure(lambda: last.update(loss=trainer.cycle(pool)), device=self.device,
                             budget_s=budget_s, warmup_s=0.0, min_warmup=1, cancel=cancel)
            loss = float(last["loss"])
            if not math.isfinite(loss):
                return {"outcome": "wrong", "message": f"the loss is {loss} after the timed steps "
                                                       "(this precision diverged)"}
            return {"throughput": self.target / (timing.median_ms / 1e3),
                    "throughput_unit": "samples/s", "timing": timing, "loss": loss,
                    "budget_s": budget_s, **checked}

    def evaluate(self, config: dict, budget_s: float, first: bool = True) -> dict:
        """One trial as a record (appended to `out`): the search's evaluate()."""
        point = functools.partial(self.trial, budget_s=budget_s, cancel=self.cancel)
        return self.log.timed(self.log.measure(point, dict(config)))

    def candidates(self, result: SearchResult) -> list[dict]:
        """Each measured config's longest-budget trial with its verified peak."""
        out = []
        for trial in result.final().values():
            checked = self._checks[config_key(trial.config)]  # verified at its first trial
            out.append({"config": trial.config, "samples_per_s":
                        self.target / (trial.median_ms / 1e3), "median_ms": trial.median_ms,
                        "iqr_ms": trial.timing.iqr_ms, "peak_bytes": checked["step_peak_bytes"],
                        "grad_gap": checked.get("grad_gap"), "round": trial.round,
                        "budget_s": trial.budget_s})
        return out


def _bound_key(spec: TrainSpec) -> str:
    return f"{spec.precision}, checkpointing {'on' if spec.checkpointing else 'off'}"
