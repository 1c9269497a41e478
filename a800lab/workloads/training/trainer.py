"""The trainer: a model, its optimizer and GradScaler on one device, with correct gradient
accumulation; and what is measured with it: accumulation's gradient gaps, one step's memory.

    trainer = Trainer(spec, preset("mlp"), "cpu")
    history = trainer.train(20)                    # fresh data each step, synced per step
"""

import contextlib
import functools
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import replace

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from ...core.cancel import CancelToken
from ..models.levers import (
    CompileWatch,
    attention_backend,
    attention_refusal,
    compile_model,
    lever_unavailable,
    optimizer_flags,
    to_channels_last,
)
from ..models.presets import Task
from ..models.task import call_model, check_batch
from .memory import SavedTensorCounter, StepMemory, tensor_bytes
from .spec import TrainSpec

_EVAL_SEED = 10_000  # the held-out batch comes from its own generator
POOL_BATCHES = 2    # distinct micro-batches the timed cycles reuse (data made outside timing)


@contextlib.contextmanager
def cudnn_benchmark(on: bool):
    """torch.backends.cudnn.benchmark on for the block when `on` (then as it was); when off,
    torch's setting (off unless you set it) is left alone."""
    before = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = before or on
    try:
        yield
    finally:
        torch.backends.cudnn.benchmark = before


class Trainer:
    """A model, its optimizer and GradScaler on one device, trained by `cycle()`."""

    def __init__(self, spec: TrainSpec, task: Task, device: str, *, seed: int = 0):
        self.spec, self.task, self.device = spec, task, device
        self.device_type = torch.device(device).type
        self.watch: StepMemory | None = None  # set for one counted_cycle()
        dtype = torch.bfloat16 if spec.precision == "bf16_pure" else None
        self.model = task.make_model().to(device=device, dtype=dtype)
        if spec.channels_last:
            self.model = self.model.to(memory_format=torch.channels_last)
        self.model.train()
        self._wrappers = checkpoint_blocks(self.model) if spec.checkpointing else []
        # what the training cycles call: the model, or its torch.compile wrapper (evaluation and
        # the memory probes of one block use the eager model, so they never recompile it)
        self.step_model = compile_model(self.model, spec.compile)
        self.compiling = CompileWatch(spec.compile)  # what it did, once the first step is done
        params = [p for p in self.model.parameters() if p.requires_grad]
        self.lr = spec.lr or task.lr
        flags = optimizer_flags(spec.optimizer_impl)
        if spec.optimizer == "adamw":
            self.optimizer = torch.optim.AdamW(params, lr=self.lr, **flags)
        else:
            self.optimizer = torch.optim.SGD(params, lr=self.lr, momentum=0.9, **flags)
        self.scaler = torch.amp.GradScaler(
            self.device_type, init_scale=spec.init_scale, growth_factor=spec.growth_factor,
            backoff_factor=spec.backoff_factor, growth_interval=spec.growth_interval,
            enabled=spec.uses_scaler)
        self.generator = torch.Generator(device).manual_seed(seed)
        self.steps_done = 0

    def batch(self, batch_size: int | None = None, generator: torch.Generator | None = None):
        """One micro-batch (inputs, targets) from the task, checked, cast for pure bf16."""
        batch_size = batch_size or self.spec.batch_size
        return self.prepare(self.task.make_batch(batch_size, generator or self.generator),
                            batch_size)

    def prepare(self, made, batch_size: int) -> tuple:
        """(inputs, targets) of `made` checked, cast for pure bf16, in channels_last if set."""
        inputs, targets = check_batch(made, batch_size)
        if self.spec.precision == "bf16_pure":
            inputs = _cast_floats(inputs, torch.bfloat16)
        if self.spec.channels_last:
            inputs = to_channels_last(inputs)
        return inputs, targets

    def cycle_gradient(self, micro_batches: Sequence[tuple]) -> torch.Tensor:
        """One cycle; the gradient it stepped with, unscaled, as one float32 vector."""
        seen = {}

        def capture():
            seen["grad"] = torch.cat([p.grad.float().flatten() for p in self.model.parameters()
                                      if p.grad is not None]) / (self.scale or 1.0)

        self.cycle(micro_batches, before_step=capture)
        return seen["grad"]

    def batches(self, count: int | None = None) -> list[tuple]:
        """`count` micro-batches (default accum_steps): one effective batch."""
        return [self.batch() for _ in range(count or self.spec.accum_steps)]

    def pool(self) -> list[tuple]:
        """The micro-batches that timed cycles reuse (data made outside the timing)."""
        return self.batches(min(self.spec.accum_steps, POOL_BATCHES))

    def _autocast(self):
        dtype = self.spec.autocast_dtype
        return torch.autocast(self.device_type, dtype=dtype or torch.float32,
                              enabled=dtype is not None)

    def _loss(self, inputs, targets, *, eager: bool = False
              ) -> tuple[torch.Tensor, torch.Tensor]:
        with self._autocast(), attention_backend(self.spec.attention):
            outputs = call_model(self.model if eager else self.step_model, inputs)
            if self.spec.precision == "bf16_pure":  # keep the loss in fp32
                outputs = _cast_floats(outputs, torch.float32)
            return outputs, self.task.loss_fn(outputs, targets)

    def cycle(self, micro_batches: Sequence[tuple], *,
              before_step: Callable[[], None] | None = None) -> torch.Tensor:
        """One optimizer step over accum_steps micro-batches (in turn from `micro_batches`):
        the mean loss, detached, unsynced; `before_step()` runs just before the step."""
        spec, watch = self.spec, self.watch
        total = None
        with cudnn_benchmark(spec.cudnn_benchmark):  # forward and backward pick conv kernels
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
        if self.steps_done == 1:  # the first step compiles, if anything does
            self.compiling.first_step_done()
        return total

    def counted_cycle(self, micro_batches: Sequence[tuple], watch: StepMemory):
        """One cycle watched by `watch`: the MemoryBreakdown it saw."""
        watch.trainer, self.watch = self, watch
        watch.data_bytes = tensor_bytes(_flat(*micro_batches))
        try:
            self.cycle(micro_batches)
        finally:
            self.watch = None
        return watch.breakdown()

    def train(self, steps: int, *, grad_stats: bool = False,
              cancel: CancelToken | None = None) -> list[dict]:
        """`steps` optimizer steps on fresh data, synced; per step: loss, scale, skipped (the
        scaler skipped it), wall_s and, with grad_stats, zero_grad_fraction."""
        history = []
        for _ in range(steps):
            if cancel is not None:
                cancel.raise_if_cancelled()
            before, seen = self.scale, {}
            look = functools.partial(self._note_zero_grads, seen) if grad_stats else None
            started = time.perf_counter()
            loss = self.cycle(self.batches(), before_step=look).item()
            wall_s = time.perf_counter() - started
            scale = self.scale
            history.append({"step": self.steps_done, "loss": loss, "scale": scale,
                            "skipped": scale is not None and scale < before, "wall_s": wall_s,
                            **seen})
        return history

    def check_attention(self) -> None:
        """ValueError with torch's reasons when the forced attention back end refuses 2 samples."""
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                with torch.no_grad():
                    self._loss(*self.batch(2, torch.Generator(self.device).manual_seed(0)),
                               eager=True)
            except RuntimeError as exc:
                raise attention_refusal(self.spec.attention, exc,
                                        [str(w.message) for w in caught]) from None

    def _note_zero_grads(self, into: dict) -> None:
        grads = [p.grad for p in self.model.parameters() if p.grad is not None]
        zeros = sum(int((g == 0).sum()) for g in grads)
        into["zero_grad_fraction"] = zeros / max(1, sum(g.numel() for g in grads))

    @property
    def scale(self) -> float | None:
        """The scaler's loss scale (synchronises); None without a scaler."""
        return self.scaler.get_scale() if self.scaler.is_enabled() else None

    @torch.no_grad()
    def evaluate(self) -> dict:
        """Loss and accuracy on the task's held-out batch (the same for every config)."""
        generator = torch.Generator(self.device).manual_seed(_EVAL_SEED)
        inputs, targets = self.batch(self.task.eval_batch, generator)
        self.model.eval()
        try:
            outputs, loss = self._loss(inputs, targets, eager=True)
            accuracy = None
            if self.task.accuracy_fn is not None:  # it may answer None: no labels to count
                accuracy = self.task.accuracy_fn(outputs.float(), targets)
                accuracy = None if accuracy is None else float(accuracy)
        finally:
            self.model.train()
        return {"eval_loss": float(loss), "accuracy": accuracy}

    def one_block_saved_bytes(self) -> int:
        """Bytes the first checkpointed block saves when recomputed in backward (measured)."""
        if not self._wrappers:
            return 0
        captured = {}
        first = self._wrappers[0]
        handle = first.register_forward_pre_hook(lambda _m, args: captured.setdefault("x", args))
        try:
            with torch.no_grad():
                call_model(self.model, self.batch(generator=torch.Generator(self.device))[0])
        finally:
            handle.remove()
        args = tuple(a.detach().requires_grad_(a.is_floating_point())
                     if isinstance(a, torch.Tensor) else a for a in captured["x"])
        counter = SavedTensorCounter(self.model.parameters(), exclude=args)
        with counter, self._autocast(), attention_backend(self.spec.attention):
            first.inner(*args)
        return counter.activation_bytes + counter.weight_copy_bytes


def check_levers(spec: TrainSpec, task: Task, device: str) -> None:
    """ValueError (why, and what instead) when a lever cannot run on `device` or this model."""
    refusal = lever_unavailable(spec, device)
    if refusal:
        raise ValueError(refusal)
    if spec.attention != "default":
        Trainer(replace(spec, batch_size=2, accum_steps=1, compile="off"), task,
                device).check_attention()


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


def accumulation_gaps(task: Task, batch_size: int, accum_steps: int, *, device: str = "cpu",
                      seed: int = 3) -> dict[str, float]:
    """gradient_gap to one batch (fp32) of the same samples: "accumulation_gap", the lab's loop
    (rounding: ~1e-7; batch norm: a real gap), and "snippet_gap", the guide's TensorFlow snippet
    as written, which keeps only the last micro-batch's gradient / k (a gap near 1)."""
    generator = torch.Generator(device).manual_seed(seed)
    micro = [check_batch(task.make_batch(batch_size, generator), batch_size)
             for _ in range(accum_steps)]
    whole = [tuple(torch.cat(parts) for parts in zip(*micro, strict=True))]
    grads = {}
    # one SGD step's fp32 gradient three ways: name, micro-batch, steps, batches, the factor on
    # the gradient (the snippet's loss / k)
    for name, b, k, batches, scale in (
            ("accumulated", batch_size, accum_steps, micro, 1.0),
            ("last_only", batch_size, 1, micro[-1:], 1.0 / accum_steps),
            ("whole", batch_size * accum_steps, 1, whole, 1.0)):
        trainer = Trainer(TrainSpec(batch_size=b, accum_steps=k, optimizer="sgd"), task, device)
        grads[name] = trainer.cycle_gradient(batches) * scale
    return {f"{name}_gap": gradient_gap(grads[key], grads["whole"])
            for name, key in (("accumulation", "accumulated"), ("snippet", "last_only"))}


def gradient_gap(grad: torch.Tensor, reference: torch.Tensor) -> float:
    """max |grad - reference| / max |reference| (0 for identical gradients)."""
    return float((grad - reference).abs().max() / reference.abs().max())


def measure_step_memory(spec: TrainSpec, task: Task, device: str, *, cycles: int = 1,
                        limit_bytes: int | None = None, seed: int = 0):
    """The MemoryBreakdown of `cycles` steps of a fresh model (OOM raises; InjectedOOM above
    `limit_bytes`): the caller frees after its except block."""
    watch = StepMemory(device, limit_bytes=limit_bytes)  # before the model: CUDA counts it all
    trainer = Trainer(spec, task, device, seed=seed)
    pool = trainer.pool()
    for _ in range(cycles):
        breakdown = trainer.counted_cycle(pool, watch)
    return breakdown


class Checkpointed(nn.Module):
    """A block whose activations are recomputed in backward instead of kept."""

    def __init__(self, inner: nn.Module):
        super().__init__()
        self.inner = inner

    def forward(self, *args):
        if torch.is_grad_enabled():
            return checkpoint(self.inner, *args, use_reentrant=False)
        return self.inner(*args)


def checkpoint_blocks(model: nn.Module) -> list[Checkpointed]:
    """Each of `model.blocks` (or an nn.Sequential's children) wrapped in Checkpointed."""
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
