"""The loss-scaling lab: gradients against fp16's range (2^-24 to 65504; bf16 has fp32's),
GradScaler's dynamics, the layers autocast keeps in fp32.

    sample = gradient_sample(regression_task(), steps=20)   # |grad| values, fp32 backward
    fp16_fractions(sample.values("activations"), scale=2**16)   # underflow / subnormal / overflow
    runs = compare_scaling(regression_task(), steps=60)  # fp32 / fp16 no scaler / fp16 + scaler
"""

import contextlib
import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from ...core.backends import resolve_device
from ...core.precision import HALF_DTYPES, unsupported_reason
from ..models.presets import Task, seeded
from ..models.task import custom_task
from .spec import TrainSpec, check_precision
from .trainer import Trainer

FP16_MAX = 65504.0
FP16_INF_FROM = 65520.0   # 65504 + half an ulp (16): a tie that rounds to inf
FP16_MIN_NORMAL = 2.0**-14
FP16_MIN_SUBNORMAL = 2.0**-24
_MAX_VALUES_PER_TENSOR = 2**18  # a strided sample of bigger tensors keeps the histogram cheap


@dataclass
class GradientSample:
    """|gradient| values of one fp32 backward: per parameter and per module output."""

    params: dict[str, torch.Tensor] = field(default_factory=dict)
    activations: dict[str, torch.Tensor] = field(default_factory=dict)

    def values(self, kind: str = "all") -> torch.Tensor:
        """All values of "params", "activations" or "all", as one CPU float64 tensor."""
        if kind not in ("params", "activations", "all"):
            raise ValueError(f"kind={kind!r}: use 'params', 'activations' or 'all'")
        chosen = [*(self.params.values() if kind != "activations" else ()),
                  *(self.activations.values() if kind != "params" else ())]
        return torch.cat(chosen) if chosen else torch.zeros(0, dtype=torch.float64)


def _sampled(t: torch.Tensor) -> torch.Tensor:
    flat = t.detach().flatten()
    step = max(1, math.ceil(flat.numel() / _MAX_VALUES_PER_TENSOR))
    return flat[::step].abs().to("cpu", torch.float64)


def gradient_sample(task: Task, *, steps: int = 0, batch_size: int = 32, lr: float | None = None,
                    device: str = "auto", seed: int = 0) -> GradientSample:
    """|gradients| of every parameter and module output in an fp32 backward after `steps`."""
    device = resolve_device(device)
    trainer = Trainer(TrainSpec(precision="fp32", batch_size=batch_size, lr=lr), task, device,
                      seed=seed)
    trainer.train(steps)
    sample = GradientSample()

    def on_output(name):
        def hook(_module, _inputs, output):
            if isinstance(output, torch.Tensor) and output.requires_grad:
                output.register_hook(lambda g: sample.activations.__setitem__(name, _sampled(g)))
        return hook

    with _leaf_hooks(trainer.model, on_output):
        _, loss = trainer._loss(*trainer.batch())
        loss.backward()
    sample.params = {name: _sampled(p.grad) for name, p in trainer.model.named_parameters()
                     if p.grad is not None}
    return sample


def fp16_fractions(values: torch.Tensor, scale: float = 1.0) -> dict:
    """Shares of the non-zero |values| * scale that fp16 flushes to zero, keeps subnormal or
    turns inf; and the share exactly zero already (dead ReLUs), which no scale changes."""
    values = values.to(torch.float64)
    nonzero = values[values > 0] * scale
    n = max(1, nonzero.numel())
    return {"scale": float(scale),
            "underflow": float((nonzero <= FP16_MIN_SUBNORMAL / 2).sum()) / n,
            "subnormal": float(((nonzero > FP16_MIN_SUBNORMAL / 2) &
                                (nonzero < FP16_MIN_NORMAL)).sum()) / n,
            "overflow": float((nonzero >= FP16_INF_FROM).sum()) / n,
            "zero": float((values == 0).sum()) / max(1, values.numel()),
            "count": int(values.numel())}


def log2_histogram(values: torch.Tensor, lo: int = -40, hi: int = 20) -> tuple[list, list]:
    """(bin edges in log2 units, counts) of the non-zero |values|, clamped to [2^lo, 2^hi)."""
    values = values[values > 0].to(torch.float64)
    exponents = torch.log2(values).clamp(lo, hi - 1e-9)
    counts = torch.histc(exponents, bins=hi - lo, min=lo, max=hi)
    return list(range(lo, hi + 1)), [int(c) for c in counts]


def regression_task(*, in_dim: int = 64, hidden: int = 256, out_dim: int = 512,
                    target_scale: float = 1e-2) -> Task:
    """An MLP regressing small targets (|y| <= target_scale) from an output layer near zero (a
    denoiser late in training): MSE gradients ~1e-7, where loss scaling matters."""
    teacher = torch.randn(in_dim, out_dim, generator=torch.Generator().manual_seed(1))
    teacher /= in_dim**0.5

    def make_model() -> nn.Module:
        model = seeded(lambda: nn.Sequential(nn.Linear(in_dim, hidden), nn.GELU(),
                                             nn.Linear(hidden, hidden), nn.GELU(),
                                             nn.Linear(hidden, out_dim)))
        with torch.no_grad():  # start near zero, as a model late in training is near its target
            model[-1].weight.mul_(1e-3)
            model[-1].bias.zero_()
        return model

    def make_batch(batch_size: int, generator: torch.Generator):
        x = torch.randn(batch_size, in_dim, generator=generator, device=generator.device)
        return x, target_scale * torch.tanh(x @ teacher.to(x.device))

    return custom_task(make_model, make_batch, F.mse_loss, name="regression")


SCALING_RUNS = (("fp32", "fp32", False), ("fp16, no scaler", "fp16", False),
                ("fp16 + GradScaler", "fp16", True))


def compare_scaling(task: Task, *, steps: int = 60, batch_size: int = 64,
                    lr: float | None = None, init_scale: float = 2.0**16,
                    growth_factor: float = 2.0, backoff_factor: float = 0.5,
                    growth_interval: int = 2000, runs=SCALING_RUNS, device: str = "auto",
                    seed: int = 0) -> dict[str, list]:
    """name -> Trainer.train's history (with grad_stats) of each run (name, precision, scaler)."""
    device = resolve_device(device)
    out = {}
    for name, precision, scaler in runs:
        check_precision(precision, device)
        spec = TrainSpec(precision=precision, grad_scaler=scaler, batch_size=batch_size,
                         lr=lr, init_scale=init_scale, growth_factor=growth_factor,
                         backoff_factor=backoff_factor, growth_interval=growth_interval)
        trainer = Trainer(spec, task, device, seed=seed)
        out[name] = trainer.train(steps, grad_stats=True)
    return out


def autocast_dtypes(model: nn.Module, inputs, precision: str = "fp16", *, loss_fn=None,
                    targets=None, device: str = "auto") -> list[dict]:
    """Each leaf module's output dtype (and the loss's) under autocast on `device`: what it
    computes in 16 bits and keeps in fp32 *here* (CPU and CUDA autocast differ)."""
    device = resolve_device(device)
    check_precision(precision, device)
    dtype = HALF_DTYPES.get(precision)
    if dtype is None:
        raise ValueError(f"precision={precision!r}: autocast runs in 'fp16' or 'bf16'")
    model = model.to(device)
    rows = []

    def record(name):
        def hook(module, _inputs, output):
            if isinstance(output, torch.Tensor):
                rows.append({"module": name, "type": type(module).__name__,
                             "output_dtype": str(output.dtype).removeprefix("torch.")})
        return hook

    with _leaf_hooks(model, record), torch.no_grad(), \
            torch.autocast(torch.device(device).type, dtype=dtype):
        outputs = model(inputs.to(device))
        if loss_fn is not None:
            loss = loss_fn(outputs, targets.to(device))
            rows.append({"module": "(loss)", "type": getattr(loss_fn, "__name__", "loss"),
                         "output_dtype": str(loss.dtype).removeprefix("torch.")})
    return rows


@contextlib.contextmanager
def _leaf_hooks(model: nn.Module, make_hook):
    """make_hook(name) as the forward hook of each leaf module (Linear, GELU, ...) in the block."""
    handles = [module.register_forward_hook(make_hook(name))
               for name, module in model.named_modules() if name and not list(module.children())]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def _rms_norm(x: torch.Tensor) -> torch.Tensor:
    """RMSNorm as often hand-written: x / sqrt(mean(x^2) + eps), in x's own dtype."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)


def norm_overflow(magnitude: float = 300.0, *, device: str = "auto") -> list[dict]:
    """A hand-written RMSNorm of activations ~`magnitude` in several ways: (variant, finite,
    rel_error vs float64). Above 256, x^2 overflows fp16 unless the norm is kept in fp32."""
    device = resolve_device(device)
    x = torch.randn(8, 256, generator=torch.Generator().manual_seed(0)) * magnitude
    reference = _rms_norm(x.double())

    def autocast_fp16():  # a Linear first: 16-bit activations, as inside a network
        with torch.autocast(torch.device(device).type, dtype=torch.float16):
            return _rms_norm(F.linear(x.to(device), torch.eye(x.shape[-1], device=device)))

    variants = {
        "pure fp16": lambda: _rms_norm(x.to(device, torch.float16)),
        "fp16 autocast": autocast_fp16,
        "fp16, norm kept in fp32": lambda: _rms_norm(x.to(device, torch.float16).float()),
        "pure bf16": lambda: _rms_norm(x.to(device, torch.bfloat16)),
    }
    rows = []
    for name, run in variants.items():
        if "bf16" in name and unsupported_reason("bf16", device):
            continue  # a GPU older than Ampere has no bf16
        y = run().double().cpu()
        finite = bool(torch.isfinite(y).all())
        error = float((y - reference).norm() / reference.norm()) if finite else math.inf
        rows.append({"variant": name, "magnitude": magnitude, "finite": finite, "rel_error": error})
    return rows
