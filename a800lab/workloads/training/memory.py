"""Where a training step's memory goes (counted from its tensors; the peak: CUDA's allocator on
a GPU, the components summed at each phase boundary on a CPU), and a model of the peak fitted to
a few probes.

    breakdown = trainer.counted_cycle(batches, StepMemory("cpu", limit_bytes=64 * 2**20))
    fit_memory_model([(4, breakdown4), (8, breakdown8)], grads_in_forward=False).predict(64)
"""

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, replace

import torch

from ...core.units import format_bytes

# autograd nodes that pass one input through as a view or a cast: following them from a saved
# tensor to a parameter's AccumulateGrad shows the tensor is a copy of that weight
_VIEW_OR_CAST = frozenset({
    "TBackward0", "ToCopyBackward0", "ViewBackward0", "PermuteBackward0", "ExpandBackward0",
    "UnsqueezeBackward0", "SqueezeBackward0", "SqueezeBackward1", "TransposeBackward0",
    "UnsafeViewBackward0", "AliasBackward0", "SliceBackward0", "SelectBackward0",
    "ReshapeAliasBackward0",
})


class InjectedOOM(MemoryError):
    """A step that went over an injected memory limit (a smaller card, or a CPU test)."""


def tensor_bytes(tensors: Iterable) -> int:
    """Bytes of the distinct storages among `tensors` (non-tensors ignored)."""
    seen: dict[int, int] = {}
    for t in tensors:
        if isinstance(t, torch.Tensor):
            storage = t.untyped_storage()
            seen[storage.data_ptr()] = storage.nbytes()
    return sum(seen.values())


def _copies_a_parameter(t: torch.Tensor) -> bool:
    """True when `t` is a view or cast of a leaf parameter (autocast's 16-bit weight copy)."""
    node = t.grad_fn
    for _ in range(8):
        if node is None:
            return False
        name = type(node).__name__
        if name == "AccumulateGrad":
            return True
        inputs = [n for n, _ in node.next_functions if n is not None]
        if name not in _VIEW_OR_CAST or len(inputs) != 1:
            return False
        node = inputs[0]
    return False


class SavedTensorCounter(torch.autograd.graph.saved_tensors_hooks):
    """Counts the tensors autograd saves for backward in a `with` block (not `exclude`)."""

    def __init__(self, parameters: Iterable[torch.Tensor], exclude: Iterable = ()):
        self._skip = {t.untyped_storage().data_ptr() for t in (*parameters, *exclude)
                      if isinstance(t, torch.Tensor)}
        self._saved: dict[int, tuple[int, bool]] = {}  # storage -> (bytes, is a weight copy)
        super().__init__(self._pack, lambda t: t)

    def _pack(self, t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        ptr = storage.data_ptr()
        if ptr not in self._skip and ptr not in self._saved:
            self._saved[ptr] = (storage.nbytes(), _copies_a_parameter(t))
        return t  # kept as is: counting changes nothing about the step

    def __enter__(self) -> "SavedTensorCounter":
        super().__enter__()
        return self

    @property
    def activation_bytes(self) -> int:
        return sum(n for n, copy in self._saved.values() if not copy)

    @property
    def weight_copy_bytes(self) -> int:
        return sum(n for n, copy in self._saved.values() if copy)


@dataclass(frozen=True)
class MemoryBreakdown:
    """Bytes of one training cycle by what they hold, each the largest seen (activations: one
    micro-batch's forward; recompute: one checkpointed block; meter "allocated": CUDA's
    allocator, "counted": the components summed at phase boundaries)."""

    param_bytes: int
    grad_bytes: int
    optimizer_state_bytes: int
    activation_bytes: int
    weight_copy_bytes: int
    recompute_bytes: int
    data_bytes: int
    peak_bytes: int
    meter: str

    @property
    def static_bytes(self) -> int:
        """Parameters, gradients and optimizer state: what does not depend on the batch."""
        return self.param_bytes + self.grad_bytes + self.optimizer_state_bytes

    @property
    def counted_bytes(self) -> int:
        """Every component together (an upper bound of what is live at one time)."""
        return (self.static_bytes + self.activation_bytes + self.weight_copy_bytes +
                self.recompute_bytes + self.data_bytes)

    def to_dict(self) -> dict:
        return {**asdict(self), "static_bytes": self.static_bytes,
                "counted_bytes": self.counted_bytes}


class StepMemory:
    """Watches a Trainer's cycles: components, peak, and InjectedOOM above `limit_bytes` (as
    a smaller card would run out). Made before the model, so CUDA's peak counts it all (or
    given `base_bytes`, what was allocated before the model)."""

    def __init__(self, device: str, *, limit_bytes: int | None = None,
                 base_bytes: int | None = None):
        if limit_bytes is not None and not (isinstance(limit_bytes, int) and limit_bytes > 0):
            raise ValueError(f"limit_bytes={limit_bytes!r} must be a positive int of bytes")
        self.device, self.limit_bytes = device, limit_bytes
        self.on_cuda = device.startswith("cuda")
        self.meter = "allocated" if self.on_cuda else "counted"
        self.trainer = None          # set by the Trainer it watches
        self.data_bytes = 0          # set by the Trainer: the batches it holds
        self._parts = dict.fromkeys(("param_bytes", "grad_bytes", "optimizer_state_bytes",
                                     "activation_bytes", "weight_copy_bytes", "recompute_bytes"), 0)
        self._counter: SavedTensorCounter | None = None
        self._counted_peak = self._base = 0
        if self.on_cuda:
            torch.cuda.synchronize(device)
            torch.cuda.reset_peak_memory_stats(device)
            self._base = torch.cuda.memory_allocated(device) if base_bytes is None \
                else base_bytes

    def forward(self, exclude: Sequence) -> SavedTensorCounter:
        """The context that wraps one micro-batch's forward and loss."""
        self._counter = SavedTensorCounter(self.trainer.model.parameters(), exclude=exclude)
        return self._counter

    def phase(self, name: str) -> None:
        """Read the components after a phase ("forward", "backward", "step"); check the limit."""
        model, optimizer = self.trainer.model, self.trainer.optimizer
        live = {"param_bytes": tensor_bytes([*model.parameters(), *model.buffers()]),
                "grad_bytes": tensor_bytes(p.grad for p in model.parameters()),
                "optimizer_state_bytes": _state_bytes(optimizer, next(model.parameters()).device)}
        if name == "forward" and self._counter is not None:
            live["activation_bytes"] = self._counter.activation_bytes
            live["weight_copy_bytes"] = self._counter.weight_copy_bytes
            if self.trainer.spec.checkpointing and not self._parts["recompute_bytes"]:
                self._parts["recompute_bytes"] = self.trainer.one_block_saved_bytes()
        if name == "backward":
            live["recompute_bytes"] = self._parts["recompute_bytes"]
        for key, value in live.items():
            self._parts[key] = max(self._parts[key], value)
        self._counted_peak = max(self._counted_peak, sum(live.values()) + self.data_bytes)
        if self.limit_bytes is not None and self.peak_bytes > self.limit_bytes:
            raise InjectedOOM(f"out of memory (injected limit): after {name} the step holds "
                              f"{format_bytes(self.peak_bytes)} ({self.meter}), the limit is "
                              f"{format_bytes(self.limit_bytes)}")

    @property
    def peak_bytes(self) -> int:
        if self.on_cuda:
            return torch.cuda.max_memory_allocated(self.device) - self._base
        return self._counted_peak

    def breakdown(self) -> MemoryBreakdown:
        return MemoryBreakdown(**self._parts, data_bytes=self.data_bytes,
                               peak_bytes=self.peak_bytes, meter=self.meter)


def _state_bytes(optimizer: torch.optim.Optimizer, device: torch.device) -> int:
    """Bytes of the optimizer's state on `device` (not Adam's CPU step counters)."""
    return tensor_bytes(v for state in optimizer.state.values() for v in state.values()
                        if isinstance(v, torch.Tensor) and v.device == device)


# Bytes per parameter that do not grow with the batch, by precision and optimizer: the weights,
# their gradients and the optimizer's state (SGD with momentum keeps one buffer, AdamW two).
# Autocast precisions keep fp32 weights, grads and state ("master weights"); 16-bit copies of
# the weights (2 bytes) come on top while the step runs. Pure bf16 keeps everything in bf16.
_WEIGHT_BYTES = {"fp32": 4, "tf32": 4, "fp16": 4, "bf16": 4, "bf16_pure": 2}
_STATE_BUFFERS = {"sgd": 1, "adamw": 2}


def static_bytes_per_param(precision: str, optimizer: str) -> int:
    """Weights + grads + optimizer state per parameter: 16 for AdamW with fp32 master weights,
    8 for pure bf16 AdamW, 12 for SGD with momentum."""
    if precision not in _WEIGHT_BYTES or optimizer not in _STATE_BUFFERS:
        raise ValueError(f"no rule for precision={precision!r}, optimizer={optimizer!r}: "
                         f"precisions {list(_WEIGHT_BYTES)}, optimizers {list(_STATE_BUFFERS)}")
    weight = _WEIGHT_BYTES[precision]
    return weight * (2 + _STATE_BUFFERS[optimizer])


def _line(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """(intercept, slope) of the least-squares line through the points (xs, ys)."""
    slope, intercept = statistics.linear_regression(xs, ys)
    return intercept, slope


@dataclass(frozen=True)
class MemoryModel:
    """Peak bytes of a training step vs its micro-batch b: params, grads and optimizer state
    counted; lines in b fitted for the saved tensors, a recomputed block, the data, and the
    residual (measured less counted: CUDA's transients; 0 on a CPU). The counted peak is

        forward:  params + state + saved(b) + data(b)  (+ grads when accumulating)
        backward: params + state + grads + recompute(b) + data(b)
    """

    param_bytes: int
    grad_bytes: int
    optimizer_state_bytes: int
    grads_in_forward: bool
    saved: tuple[float, float]       # (bytes at b = 0, bytes per sample): activations + copies
    recompute: tuple[float, float]
    data: tuple[float, float]
    residual: tuple[float, float]
    probes: tuple[tuple[int, int], ...]  # (micro-batch, measured peak bytes)
    meter: str

    @property
    def static_bytes(self) -> int:
        return self.param_bytes + self.grad_bytes + self.optimizer_state_bytes

    @property
    def per_sample_bytes(self) -> float:
        """Bytes each extra sample adds at large micro-batches."""
        return self.saved[1] + self.data[1] + self.residual[1]

    def counted(self, batch_size: float) -> float:
        at = lambda line: line[0] + line[1] * batch_size  # noqa: E731
        forward = at(self.saved) + (self.grad_bytes if self.grads_in_forward else 0)
        backward = self.grad_bytes + at(self.recompute)
        return self.param_bytes + self.optimizer_state_bytes + at(self.data) + \
            max(forward, backward)

    def predict(self, batch_size: float) -> float:
        return self.counted(batch_size) + self.residual[0] + self.residual[1] * batch_size

    def largest_batch(self, limit_bytes: float, cap: int = 2**31 - 1) -> int:
        """The largest micro-batch predicted within `limit_bytes` (0: none; `cap`: all)."""
        if self.predict(1) > limit_bytes:
            return 0
        if self.predict(cap) <= limit_bytes:
            return cap
        lo, hi = 1, cap  # predict() only grows with the batch: bisect it
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if self.predict(mid) <= limit_bytes else (lo, mid)
        return lo

    def to_dict(self) -> dict:
        lines = {k: list(getattr(self, k)) for k in ("saved", "recompute", "data", "residual")}
        return {**asdict(self), **lines, "per_sample_bytes": self.per_sample_bytes,
                "probes": [list(p) for p in self.probes]}


def fit_memory_model(probes: Sequence[tuple[int, MemoryBreakdown]], *,
                     grads_in_forward: bool) -> MemoryModel:
    """A MemoryModel from (micro-batch, MemoryBreakdown) probes at two or more batch sizes."""
    batches, seen = [b for b, _ in probes], [d for _, d in probes]
    if len({int(b) for b in batches}) < 2:
        raise ValueError(f"the memory model needs probes at two or more micro-batch sizes, got "
                         f"{batches}; probe e.g. at 2 and 4")
    last = seen[-1]
    model = MemoryModel(
        param_bytes=last.param_bytes, grad_bytes=last.grad_bytes,
        optimizer_state_bytes=last.optimizer_state_bytes, grads_in_forward=grads_in_forward,
        saved=_line(batches, [d.activation_bytes + d.weight_copy_bytes for d in seen]),
        recompute=_line(batches, [d.recompute_bytes for d in seen]),
        data=_line(batches, [d.data_bytes for d in seen]), residual=(0.0, 0.0),
        probes=tuple((int(b), int(d.peak_bytes)) for b, d in probes), meter=last.meter)
    intercept, slope = _line(batches, [d.peak_bytes - model.counted(b) for b, d in probes])
    return replace(model, residual=(intercept, max(slope, -model.saved[1])))


def prediction_error(predicted: float, measured: float) -> float:
    """(predicted - measured) / measured; NaN when nothing was measured."""
    return (predicted - measured) / measured if measured else math.nan
