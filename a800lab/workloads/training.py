"""The training-step workload: a validated spec, a trainer with correct gradient accumulation,
and a sweep point function that times it and says where its memory went.

    from a800lab.workloads.training import TrainSpec, Trainer, train_point
    spec = TrainSpec(model="transformer", batch_size=16, accum_steps=4, precision="bf16")
    point = train_point(model="mlp", batch_size=32, accum_steps=2, precision="fp32")
    point["samples_per_s"], point["loss"], point["activation_bytes"], point["skipped_steps"]
    run_sweep(train_point, {"batch_size": [8, 16, 32]}, fixed={"model": "mlp"},
              workload="train")

One optimizer step ("a cycle") over an effective batch of batch_size * accum_steps samples:

    for x, y in micro_batches:                      # accum_steps of them
        with torch.autocast(device_type, dtype, enabled=autocast):
            loss = loss_fn(model(x), y) / accum_steps   # so the gradients sum to the mean
        scaler.scale(loss).backward()               # gradients add up in .grad
    scaler.step(optimizer)                          # once per cycle: unscale, skip on inf/NaN
    scaler.update()                                 # once per cycle: back off or grow the scale
    optimizer.zero_grad(set_to_none=True)           # once per cycle

Precisions: fp32 (IEEE), tf32 (fp32 tensors, TF32 tensor-core matmuls; CUDA only), fp16
(autocast + torch.amp.GradScaler), bf16 (autocast, no scaler needed), bf16_pure (weights,
gradients, optimizer state and activations in bf16; the loss computed in fp32). Autocast
precisions keep fp32 master weights.

A point (train_point): probes fit a memory model (a800lab.workloads.training_memory) at two
smaller micro-batches; a fresh model trains `train_steps` optimizer steps on fresh data (loss,
scale and skipped steps per step: the learning curve); one instrumented cycle counts the
memory breakdown; a held-out batch gives loss and accuracy; then measure() times cycles on a
fixed pool of batches (warm-up excluded, CUDA synchronised). Throughput is samples/s at the
effective batch.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import math
import numbers
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from ..core.backends import resolve_device
from ..core.cancel import CancelToken
from ..core.memory import free_after_oom
from ..core.precision import matmul_precision, unsupported_reason
from ..core.timing import measure
from .training_memory import (
    SavedTensorCounter,
    StepMemory,
    fit_memory_model,
    relative_error,
    tensor_bytes,
)
from .training_models import Task, argmax_accuracy, cross_entropy, preset

TRAIN_PRECISIONS = ("fp32", "tf32", "fp16", "bf16", "bf16_pure")
OPTIMIZERS = ("sgd", "adamw")
_ALIASES = {"float32": "fp32", "float16": "fp16", "half": "fp16", "bfloat16": "bf16",
            "pure_bf16": "bf16_pure", "bf16-pure": "bf16_pure"}
_AUTOCAST = {"fp16": torch.float16, "bf16": torch.bfloat16}
CUSTOM = "custom"
DEFAULT_TRAIN_STEPS = 30
_EVAL_SEED = 10_000  # the held-out batch comes from its own generator
_POOL_BATCHES = 2    # distinct micro-batches the timed cycles reuse (data made outside timing)


def canonical_precision(name: str) -> str:
    """A training precision's canonical name ("half" -> "fp16", "pure_bf16" -> "bf16_pure")."""
    if not isinstance(name, str):
        raise ValueError(f"precision must be a name such as 'bf16', got {name!r}")
    key = name.strip().lower()
    key = _ALIASES.get(key, key)
    if key not in TRAIN_PRECISIONS:
        raise ValueError(f"unknown training precision {name!r}: use one of {TRAIN_PRECISIONS}")
    return key


def _positive_int(name: str, value, example: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name}={value!r} must be a positive int, e.g. {example}")
    return int(value)


def _positive_float(name: str, value, example: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or \
            not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name}={value!r} must be a finite number > 0, e.g. {example}")
    return float(value)


@dataclass(frozen=True)
class TrainSpec:
    """One training configuration; validated at construction (ValueError says what to do).

    batch_size is the micro-batch; one optimizer step sees batch_size * accum_steps samples.
    lr: None takes the task's (presets: 1e-2 tiny ... 3e-4 large). grad_scaler: None means on
    for fp16 only; the scaler fields are GradScaler's arguments.
    """

    model: str = "mlp"
    size: str = "tiny"
    batch_size: int = 32
    accum_steps: int = 1
    precision: str = "fp32"
    optimizer: str = "adamw"
    checkpointing: bool = False
    lr: float | None = None
    grad_scaler: bool | None = None
    init_scale: float = 2.0**16
    growth_factor: float = 2.0
    backoff_factor: float = 0.5
    growth_interval: int = 2000

    def __post_init__(self) -> None:
        set_ = lambda name, value: object.__setattr__(self, name, value)  # noqa: E731
        set_("batch_size", _positive_int("batch_size", self.batch_size, "32"))
        set_("accum_steps", _positive_int("accum_steps", self.accum_steps,
                                          "1 (no accumulation) or 4"))
        set_("precision", canonical_precision(self.precision))
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"unknown optimizer {self.optimizer!r}: use one of {OPTIMIZERS}")
        if not isinstance(self.checkpointing, bool):
            raise ValueError(f"checkpointing={self.checkpointing!r} must be True or False")
        if self.lr is not None:
            set_("lr", _positive_float("lr", self.lr, "1e-3"))
        set_("init_scale", _positive_float("init_scale", self.init_scale, "65536.0"))
        if not (isinstance(self.growth_factor, numbers.Real) and self.growth_factor > 1):
            raise ValueError(f"growth_factor={self.growth_factor!r} must be > 1, e.g. 2.0")
        if not (isinstance(self.backoff_factor, numbers.Real) and 0 < self.backoff_factor < 1):
            raise ValueError(f"backoff_factor={self.backoff_factor!r} must be between 0 and 1, "
                             "e.g. 0.5")
        set_("growth_interval", _positive_int("growth_interval", self.growth_interval, "2000"))
        if self.grad_scaler and self.precision not in _AUTOCAST:
            raise ValueError(f"a GradScaler rescues fp16 gradients from underflow; with "
                             f"precision={self.precision!r} it has nothing to do. Use "
                             "grad_scaler=None, or precision='fp16'")

    @property
    def effective_batch(self) -> int:
        """Samples per optimizer step."""
        return self.batch_size * self.accum_steps

    @property
    def uses_scaler(self) -> bool:
        return self.precision == "fp16" if self.grad_scaler is None else bool(self.grad_scaler)

    @property
    def autocast_dtype(self) -> torch.dtype | None:
        return _AUTOCAST.get(self.precision)

    def to_dict(self) -> dict:
        return asdict(self)


def check_precision(precision: str, device: str) -> None:
    """ValueError (why, and what to use instead) when `device` cannot train in `precision`."""
    precision = canonical_precision(precision)
    core = "bf16" if precision == "bf16_pure" else precision
    reason = unsupported_reason(core, device)
    if reason:
        raise ValueError(reason)


def precisions_for(device: str) -> list[str]:
    """The training precisions `device` can run."""
    return [p for p in TRAIN_PRECISIONS if not unsupported_reason(
        "bf16" if p == "bf16_pure" else p, device)]


# ---- user models ---------------------------------------------------------------------------
def _extras(fn, **available) -> dict:
    """The keyword arguments among `available` that `fn` accepts by name."""
    try:
        names = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return {}
    return {k: v for k, v in available.items() if k in names}


def custom_task(make_model: Callable[[], nn.Module], make_batch: Callable, loss_fn=None,
                accuracy_fn=None, *, name: str = CUSTOM) -> Task:
    """A Task from your own functions.

    make_model() -> nn.Module (the trainer moves it to the device); make_batch(batch_size)
    -> (inputs, targets), also given `device=` and/or `generator=` if it takes them;
    loss_fn(outputs, targets) -> scalar loss (default: cross-entropy); accuracy_fn(outputs,
    targets) -> fraction correct (default: argmax accuracy when the default loss is used).
    """
    for what, fn in (("make_model", make_model), ("make_batch", make_batch)):
        if not callable(fn):
            raise ValueError(f"{what} must be a function, got {fn!r}")
    if loss_fn is not None and not callable(loss_fn):
        raise ValueError(f"loss_fn must be a function of (outputs, targets), got {loss_fn!r}")

    def batch(batch_size: int, generator: torch.Generator):
        device = generator.device
        made = make_batch(batch_size, **_extras(make_batch, device=device, generator=generator))
        return _moved(made, device)

    if accuracy_fn is None and loss_fn is None:
        accuracy_fn = argmax_accuracy
    return Task(name, make_model, batch, loss_fn or cross_entropy, accuracy_fn,
                f"your model ({getattr(make_model, '__name__', 'make_model')})")


def _moved(made, device):
    if isinstance(made, (tuple, list)) and len(made) == 2:
        return tuple(_to(part, device) for part in made)
    return made  # check_batch says what is wrong with it


def _to(part, device):
    if isinstance(part, torch.Tensor):
        return part.to(device)
    if isinstance(part, (tuple, list)):
        return tuple(_to(p, device) for p in part)
    return part


def check_batch(made, batch_size: int) -> tuple:
    """(inputs, targets) from make_batch, each tensor's first dimension the batch size; else a
    ValueError saying what came back and what is expected."""
    if not (isinstance(made, (tuple, list)) and len(made) == 2):
        raise ValueError(f"make_batch({batch_size}) must return (inputs, targets), got "
                         f"{type(made).__name__}")
    inputs, targets = made
    parts = [("inputs", inputs), ("targets", targets)]
    if isinstance(inputs, (tuple, list)):
        parts = [(f"inputs[{i}]", t) for i, t in enumerate(inputs)] + [("targets", targets)]
    for what, t in parts:
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"make_batch({batch_size}) returned {what} of type "
                             f"{type(t).__name__}; return tensors")
        if t.dim() == 0 or t.shape[0] != batch_size:
            raise ValueError(f"make_batch({batch_size}) returned {what} of shape "
                             f"{tuple(t.shape)}: the first dimension must be the batch size "
                             f"{batch_size}")
    return inputs, targets


def check_task(task: Task, device: str = "cpu", batch_size: int = 2) -> None:
    """A dry run of a (user's) task: build the model, make a batch, forward, loss, backward.
    Raises ValueError naming the step that failed, before anything is measured."""
    try:
        model = task.make_model()
    except Exception as exc:
        raise ValueError(f"make_model() raised {type(exc).__name__}: {exc}") from exc
    if not isinstance(model, nn.Module):
        raise ValueError(f"make_model() must return a torch.nn.Module, got "
                         f"{type(model).__name__}")
    if not any(p.requires_grad for p in model.parameters()):
        raise ValueError("the model has no parameters that require gradients: nothing to train")
    model.to(device)
    generator = torch.Generator(device).manual_seed(0)
    try:
        made = task.make_batch(batch_size, generator)
    except Exception as exc:
        raise ValueError(f"make_batch({batch_size}) raised {type(exc).__name__}: {exc}") from exc
    inputs, targets = check_batch(made, batch_size)
    try:
        outputs = _call(model, inputs)
    except Exception as exc:
        raise ValueError(f"the model raised on a batch of {batch_size} from make_batch: "
                         f"{type(exc).__name__}: {exc}") from exc
    try:
        loss = task.loss_fn(outputs, targets)
    except Exception as exc:
        raise ValueError(f"loss_fn(outputs, targets) raised {type(exc).__name__}: {exc}") \
            from exc
    if not (isinstance(loss, torch.Tensor) and loss.dim() == 0 and loss.requires_grad):
        raise ValueError("loss_fn must return a scalar tensor that depends on the model's "
                         f"parameters, got {loss!r:.80}")
    loss.backward()


def _call(model: nn.Module, inputs):
    return model(*inputs) if isinstance(inputs, tuple) else model(inputs)


# ---- activation checkpointing ----------------------------------------------------------------
class Checkpointed(nn.Module):
    """A block whose activations are recomputed in backward instead of kept (non-reentrant
    torch.utils.checkpoint)."""

    def __init__(self, inner: nn.Module):
        super().__init__()
        self.inner = inner

    def forward(self, *args):
        if torch.is_grad_enabled():
            return checkpoint(self.inner, *args, use_reentrant=False)
        return self.inner(*args)


def checkpoint_blocks(model: nn.Module) -> list[Checkpointed]:
    """Wrap each block of `model.blocks` (an nn.ModuleList), or each child of an
    nn.Sequential, in Checkpointed, in place; returns the wrappers."""
    holder = getattr(model, "blocks", None)
    if not isinstance(holder, (nn.ModuleList, nn.Sequential)):
        holder = model if isinstance(model, nn.Sequential) else None
    if holder is None:
        raise ValueError("activation checkpointing needs the model's repeated blocks: give it "
                         "an nn.ModuleList `blocks` that forward() runs through, or make it an "
                         "nn.Sequential")
    wrapped = []
    for i, block in enumerate(holder):
        wrapper = block if isinstance(block, Checkpointed) else Checkpointed(block)
        holder[i] = wrapper
        wrapped.append(wrapper)
    return wrapped


# ---- the trainer -------------------------------------------------------------------------------
class Trainer:
    """A model, its optimizer and GradScaler on one device, trained by `cycle()`.

        trainer = Trainer(spec, preset("mlp"), "cpu")
        history = trainer.train(20)                   # fresh data each step, synced per step
        loss = trainer.cycle(trainer.batches(2))      # one optimizer step, no sync
    """

    def __init__(self, spec: TrainSpec, task: Task, device: str, *, seed: int = 0):
        self.spec, self.task, self.device = spec, task, device
        self.device_type = torch.device(device).type
        self.watch: StepMemory | None = None  # set for one counted_cycle()
        model = task.make_model()
        if not isinstance(model, nn.Module):
            raise ValueError(f"make_model() must return a torch.nn.Module, got "
                             f"{type(model).__name__}")
        dtype = torch.bfloat16 if spec.precision == "bf16_pure" else None
        self.model = model.to(device=device, dtype=dtype)
        self.model.train()
        self._wrappers = checkpoint_blocks(self.model) if spec.checkpointing else []
        params = [p for p in self.model.parameters() if p.requires_grad]
        self.lr = spec.lr or task.lr
        if spec.optimizer == "adamw":
            self.optimizer = torch.optim.AdamW(params, lr=self.lr)
        else:
            self.optimizer = torch.optim.SGD(params, lr=self.lr, momentum=0.9)
        self.scaler = torch.amp.GradScaler(
            self.device_type, init_scale=spec.init_scale, growth_factor=spec.growth_factor,
            backoff_factor=spec.backoff_factor, growth_interval=spec.growth_interval,
            enabled=spec.uses_scaler)
        self.generator = torch.Generator(device).manual_seed(seed)
        self.steps_done = 0

    def batch(self, batch_size: int | None = None, generator: torch.Generator | None = None):
        """One micro-batch (inputs, targets) from the task, checked, cast for pure bf16."""
        batch_size = batch_size or self.spec.batch_size
        made = self.task.make_batch(batch_size, generator or self.generator)
        inputs, targets = check_batch(made, batch_size)
        if self.spec.precision == "bf16_pure":
            inputs = _cast_floats(inputs, torch.bfloat16)
        return inputs, targets

    def batches(self, count: int | None = None) -> list[tuple]:
        """`count` micro-batches (default accum_steps): one effective batch."""
        return [self.batch() for _ in range(count or self.spec.accum_steps)]

    def _autocast(self):
        dtype = self.spec.autocast_dtype
        return torch.autocast(self.device_type, dtype=dtype or torch.float32,
                              enabled=dtype is not None)

    def _loss(self, inputs, targets) -> tuple[torch.Tensor, torch.Tensor]:
        with self._autocast():
            outputs = _call(self.model, inputs)
            if self.spec.precision == "bf16_pure":  # keep the loss in fp32
                outputs = _cast_floats(outputs, torch.float32)
            return outputs, self.task.loss_fn(outputs, targets)

    def cycle(self, micro_batches: Sequence[tuple], *,
              before_step: Callable[[], None] | None = None) -> torch.Tensor:
        """One optimizer step over accum_steps micro-batches (taken in turn from
        `micro_batches`); returns the effective batch's mean loss, detached, without a sync.
        `before_step()` runs between the last backward and the optimizer step."""
        spec, watch = self.spec, self.watch
        total = None
        for i in range(spec.accum_steps):
            inputs, targets = micro_batches[i % len(micro_batches)]
            counting = watch.forward(exclude=_flat(inputs, targets)) if watch else \
                contextlib.nullcontext()
            with counting:
                _, loss = self._loss(inputs, targets)
                loss = loss / spec.accum_steps  # the micro losses sum to the batch mean
            if watch:
                watch.phase("forward")
            self.scaler.scale(loss).backward()
            if watch:
                watch.phase("backward")
            total = loss.detach() if total is None else total + loss.detach()
        if before_step is not None:
            before_step()
        self.scaler.step(self.optimizer)   # skipped when the unscaled grads hold inf/NaN
        self.scaler.update()
        if watch:
            watch.phase("step")
        self.optimizer.zero_grad(set_to_none=True)
        self.steps_done += 1
        return total

    def counted_cycle(self, micro_batches: Sequence[tuple], watch: StepMemory):
        """One cycle watched by `watch` (its data: `micro_batches`); returns the
        MemoryBreakdown it saw."""
        watch.trainer, self.watch = self, watch
        watch.data_bytes = tensor_bytes(_flat(*micro_batches))
        try:
            self.cycle(micro_batches)
        finally:
            self.watch = None
        return watch.breakdown()

    def train(self, steps: int, *, grad_stats: bool = False,
              cancel: CancelToken | None = None) -> list[dict]:
        """`steps` optimizer steps on fresh data; per step: loss, scale, skipped (the scale
        fell at update(): the step was not applied) and, with grad_stats, zero_grad_fraction
        (the share of gradient elements exactly zero before the step). Synchronises every
        step."""
        history = []
        for _ in range(steps):
            if cancel is not None:
                cancel.raise_if_cancelled()
            before, seen = self.scale, {}
            look = functools.partial(self._note_zero_grads, seen) if grad_stats else None
            loss = self.cycle(self.batches(), before_step=look).item()
            scale = self.scale
            history.append({"step": self.steps_done, "loss": loss, "scale": scale,
                            "skipped": scale is not None and scale < before, **seen})
        return history

    def _note_zero_grads(self, into: dict) -> None:
        grads = [p.grad for p in self.model.parameters() if p.grad is not None]
        zeros = sum(int((g == 0).sum()) for g in grads)
        into["zero_grad_fraction"] = zeros / max(1, sum(g.numel() for g in grads))

    @property
    def scale(self) -> float | None:
        """The scaler's current loss scale (synchronises); None without a scaler."""
        return self.scaler.get_scale() if self.scaler.is_enabled() else None

    @torch.no_grad()
    def evaluate(self, batch_size: int = 256, seed: int = _EVAL_SEED) -> dict:
        """Loss and accuracy on a held-out batch (the same for every config)."""
        generator = torch.Generator(self.device).manual_seed(seed)
        inputs, targets = self.batch(batch_size, generator)
        self.model.eval()
        try:
            outputs, loss = self._loss(inputs, targets)
            accuracy = None
            if self.task.accuracy_fn is not None:
                accuracy = float(self.task.accuracy_fn(outputs.float(), targets))
        finally:
            self.model.train()
        return {"eval_loss": float(loss), "accuracy": accuracy}

    def one_block_saved_bytes(self) -> int:
        """Bytes one checkpointed block saves when recomputed in backward: the first block run
        once on an input of the current micro-batch's shape (measured, not estimated)."""
        if not self._wrappers:
            return 0
        captured = {}
        first = self._wrappers[0]
        handle = first.register_forward_pre_hook(lambda _m, args: captured.setdefault("x", args))
        try:
            with torch.no_grad():
                _call(self.model, self.batch(generator=torch.Generator(self.device))[0])
        finally:
            handle.remove()
        args = tuple(a.detach().requires_grad_(a.is_floating_point())
                     if isinstance(a, torch.Tensor) else a for a in captured["x"])
        counter = SavedTensorCounter(self.model.parameters(), exclude=args)
        with counter, self._autocast():
            first.inner(*args)
        return counter.activation_bytes + counter.weight_copy_bytes


def _cast_floats(x, dtype):
    if isinstance(x, torch.Tensor):
        return x.to(dtype) if x.is_floating_point() else x
    if isinstance(x, (tuple, list)):
        return type(x)(_cast_floats(v, dtype) for v in x)
    return x


def _flat(*parts) -> list[torch.Tensor]:
    out = []
    for p in parts:
        out += _flat(*p) if isinstance(p, (tuple, list)) else [p]
    return out


def accumulation_gap(task: Task, batch_size: int, accum_steps: int, *, device: str = "cpu",
                     seed: int = 3) -> float:
    """How far the gradient of accum_steps micro-batches of batch_size is from the gradient of
    the same samples as one batch (fp32): max |difference| / max |gradient|. Rounding alone
    gives ~1e-7; batch norm gives a real gap (each micro-batch has its own statistics)."""
    generator = torch.Generator(device).manual_seed(seed)
    micro = [check_batch(task.make_batch(batch_size, generator), batch_size)
             for _ in range(accum_steps)]
    whole = [tuple(torch.cat(parts) for parts in zip(*micro, strict=True))]
    grads = []
    for b, k, batches in ((batch_size, accum_steps, micro), (batch_size * accum_steps, 1, whole)):
        trainer = Trainer(TrainSpec(batch_size=b, accum_steps=k, optimizer="sgd"), task, device)
        seen = {}
        trainer.cycle(batches, before_step=lambda t=trainer, s=seen: s.update(grad=torch.cat(
            [p.grad.flatten() for p in t.model.parameters() if p.grad is not None])))
        grads.append(seen["grad"])
    return float((grads[0] - grads[1]).abs().max() / grads[1].abs().max())


# ---- memory probes -----------------------------------------------------------------------------
def measure_step_memory(spec: TrainSpec, task: Task, device: str, *, cycles: int = 1,
                        limit_bytes: int | None = None, seed: int = 0):
    """Run `cycles` optimizer steps of a fresh model (the optimizer's first step included) at
    the spec's micro-batch and accumulation, watched; returns the MemoryBreakdown. Raises an
    out-of-memory error (InjectedOOM above `limit_bytes`); the caller frees after its except."""
    watch = StepMemory(device, limit_bytes=limit_bytes)  # before the model: CUDA counts it all
    trainer = Trainer(spec, task, device, seed=seed)
    pool = trainer.batches(min(spec.accum_steps, _POOL_BATCHES))
    for _ in range(cycles):
        breakdown = trainer.counted_cycle(pool, watch)
    return breakdown


def probe_batches(batch_size: int) -> tuple[int, int]:
    """Two micro-batches below `batch_size` to fit a memory model from (b/4 and b/2, at least
    1 and 2)."""
    half = max(2, batch_size // 2)
    return max(1, half // 2), half


PROBE_CYCLES = 2  # the optimizer's first step creates its state; the second runs with it


def fit_from_probes(spec: TrainSpec, task: Task, device: str, batches: Sequence[int],
                    *, limit_bytes: int | None = None):
    """A MemoryModel fitted to probes of a fresh model at each micro-batch in `batches`, each
    PROBE_CYCLES optimizer steps with the spec's accumulation (at most 2: from two micro-batches
    on, the gradients live through the next forward and more steps change nothing)."""
    accum = min(spec.accum_steps, 2)
    probes = [(b, measure_step_memory(replace(spec, batch_size=b, accum_steps=accum), task,
                                      device, cycles=PROBE_CYCLES, limit_bytes=limit_bytes))
              for b in batches]
    return fit_memory_model(probes, grads_in_forward=accum > 1)


# ---- the sweep point -----------------------------------------------------------------------------
def train_point(model: str = "mlp", size: str = "tiny", batch_size: int = 32,
                accum_steps: int = 1, precision: str = "fp32", optimizer: str = "adamw",
                checkpointing: bool = False, *, task: Task | None = None,
                train_steps: int = DEFAULT_TRAIN_STEPS, budget_s: float = 0.3,
                lr: float | None = None,
                grad_scaler: bool | None = None, init_scale: float = 2.0**16,
                growth_factor: float = 2.0, backoff_factor: float = 0.5,
                growth_interval: int = 2000, predict_memory: bool = True,
                device: str = "auto", seed: int = 0,
                cancel: CancelToken | None = None) -> dict:
    """Train, count, then time one configuration; a sweep point function (see the module
    docstring). `task`: your own Task (custom_task); `model`/`size` name a preset otherwise;
    `lr` None takes the task's.

    Returns throughput (samples/s at the effective batch), timing, optimizer_steps_per_s,
    effective_batch, loss (the last training step's), eval_loss and accuracy (held-out batch),
    loss_curve, scale_curve and skipped_steps (steps the scaler skipped), scale, the memory
    breakdown (param_bytes, grad_bytes, optimizer_state_bytes, activation_bytes,
    weight_copy_bytes, recompute_bytes, data_bytes, counted_bytes, step_peak_bytes and
    memory_meter) and predicted_peak_bytes (the memory model fitted to two smaller probes).
    """
    spec = TrainSpec(model=model if task is None else task.name, size=size,
                     batch_size=batch_size, accum_steps=accum_steps, precision=precision,
                     optimizer=optimizer, checkpointing=checkpointing, lr=lr,
                     grad_scaler=grad_scaler, init_scale=init_scale,
                     growth_factor=growth_factor, backoff_factor=backoff_factor,
                     growth_interval=growth_interval)
    _positive_int("train_steps", train_steps, str(DEFAULT_TRAIN_STEPS))
    device = resolve_device(device)
    check_precision(spec.precision, device)
    task = task or preset(spec.model, spec.size)
    if cancel is not None:
        cancel.raise_if_cancelled()
    core = "bf16" if spec.precision == "bf16_pure" else spec.precision
    with matmul_precision(core):
        predicted = None
        if predict_memory:  # before the model below exists: the probes never add to its peak
            memory_model = fit_from_probes(spec, task, device, probe_batches(spec.batch_size))
            predicted = memory_model.predict(spec.batch_size)
            free_after_oom()  # the probes' models are gone: hand their blocks back
        base_bytes = torch.cuda.memory_allocated(device) if device.startswith("cuda") else 0
        trainer = Trainer(spec, task, device, seed=seed)
        history = trainer.train(train_steps, cancel=cancel)
        pool = trainer.batches(min(spec.accum_steps, _POOL_BATCHES))
        breakdown = trainer.counted_cycle(pool, StepMemory(device, base_bytes=base_bytes))
        evaluation = trainer.evaluate()
        timing = measure(lambda: trainer.cycle(pool), device=device, budget_s=budget_s,
                         cancel=cancel)
    step_s = timing.median_ms / 1e3
    out = {"throughput": spec.effective_batch / step_s, "throughput_unit": "samples/s",
           "timing": timing, "optimizer_steps_per_s": 1.0 / step_s,
           "effective_batch": spec.effective_batch,
           "loss": history[-1]["loss"], **evaluation,
           "loss_curve": [h["loss"] for h in history],
           "skipped_steps": sum(h["skipped"] for h in history),
           "scale": history[-1]["scale"],
           "scale_curve": [h["scale"] for h in history] if spec.uses_scaler else [],
           "param_count": sum(p.numel() for p in trainer.model.parameters()),
           **{k: v for k, v in breakdown.to_dict().items() if k not in ("peak_bytes", "meter")},
           "step_peak_bytes": breakdown.peak_bytes, "memory_meter": breakdown.meter,
           "predicted_peak_bytes": predicted,
           "prediction_error": None if predicted is None else
           relative_error(predicted, breakdown.peak_bytes)}
    if not math.isfinite(history[-1]["loss"]):
        out["message"] = ("the loss is not finite after training: this precision diverged "
                          "(try a GradScaler, bf16, or a lower lr)")
    return out

