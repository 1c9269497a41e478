"""A training configuration, validated at construction, and the precisions a device trains in.

    spec = TrainSpec(model="transformer", batch_size=16, accum_steps=4, precision="bf16")
    spec.effective_batch, spec.uses_scaler, spec.autocast_dtype   # 64, False, torch.bfloat16
    check_precision("tf32", "cpu")   # ValueError: why, and what to use instead
"""

import contextlib
import numbers
from dataclasses import asdict, dataclass, replace

import torch

from ...core.knobs import check_knobs, knob
from ...core.precision import (
    HALF_DTYPES,
    check_supported,
    framework_fp32,
    matmul_precision,
    unsupported_reason,
)
from ..models.levers import ATTENTION, CHANNELS_LAST, COMPILE, OPTIMIZER_IMPL
from ..models.presets import MODELS, SIZES

# fp32: IEEE, no TF32 anywhere; fp32_default: torch's defaults (IEEE matmuls, TF32 cuDNN convs:
# the "fp32" baseline of NVIDIA's and torch's AMP figures); tf32: TF32 matmuls and convs (CUDA);
# fp16: autocast + GradScaler; bf16: autocast; bf16_pure: weights, gradients, optimizer state and
# activations in bf16, the loss in fp32. Autocast precisions keep fp32 master weights.
TRAIN_PRECISIONS = ("fp32", "fp32_default", "tf32", "fp16", "bf16", "bf16_pure")
OPTIMIZERS = ("sgd", "adamw")
_ALIASES = {"float32": "fp32", "float16": "fp16", "half": "fp16", "bfloat16": "bf16",
            "pure_bf16": "bf16_pure", "bf16-pure": "bf16_pure", "default": "fp32_default",
            "fp32-default": "fp32_default"}


def canonical_precision(name: str) -> str:
    """A training precision's canonical name ("half" -> "fp16", "pure_bf16" -> "bf16_pure")."""
    if not isinstance(name, str):
        raise ValueError(f"precision must be a name such as 'bf16', got {name!r}")
    key = name.strip().lower()
    key = _ALIASES.get(key, key)
    if key not in TRAIN_PRECISIONS:
        raise ValueError(f"unknown training precision {name!r}: use one of {TRAIN_PRECISIONS}")
    return key


@dataclass(frozen=True)
class TrainSpec:
    """One training configuration (a bad field: ValueError saying what to give instead).
    batch_size is the micro-batch (a step sees batch_size * accum_steps samples); lr None: the
    task's; grad_scaler None: on for fp16 only; compile .. channels_last: levers.py's levers."""

    model: str = knob("mlp", "the preset model", choices=MODELS, named=True)
    size: str = knob("tiny", "the preset's size", choices=SIZES, gpu="medium", cli="model_size",
                     named=True)
    batch_size: int = knob(32, "micro-batch", unit="samples", integer=True, lo=1, example="32",
                           gpu=64, scale="pow2", panel_hi=65536)
    accum_steps: int = knob(1, "micro-batches per optimizer step", integer=True, lo=1,
                            example="1 (no accumulation) or 4", scale="pow2", panel_hi=64)
    precision: str = knob("fp32", "fp32, fp32_default (torch's TF32 convs), tf32, fp16 (+ "
                          "GradScaler), bf16 or bf16_pure", canon=canonical_precision,
                          available=lambda device: precisions_for(device),
                          tune=("fp32",), tune_gpu=("bf16", "fp16", "tf32"))
    optimizer: str = knob("adamw", "the optimizer", choices=OPTIMIZERS)
    checkpointing: bool = knob(False, "activation checkpointing", choices=(False, True),
                               tune=(False, True))
    lr: float | None = knob(None, "learning rate (default: the preset's)", lo=0,
                            example="1e-3")
    grad_scaler: bool | None = None
    init_scale: float = knob(2.0**16, "GradScaler's first scale", lo=0, example="65536.0")
    growth_factor: float = 2.0
    backoff_factor: float = 0.5
    growth_interval: int = knob(2000, "GradScaler's steps without overflow before it grows",
                                integer=True, lo=1, example="2000")
    compile: str = knob(replace(COMPILE, tune=("off",), tune_gpu=("off", "default")))
    optimizer_impl: str = knob(replace(OPTIMIZER_IMPL, tune=("for-loop", "foreach", "fused"),
                                       tune_gpu=("foreach", "fused")))
    attention: str = knob(ATTENTION)
    channels_last: bool = knob(CHANNELS_LAST)
    cudnn_benchmark: bool = knob(False, "cuDNN times each convolution algorithm at a new input "
                                 "shape and keeps the fastest (convolutions on a GPU; no effect "
                                 "on a CPU)", choices=(False, True), lever=True,
                                 code="torch.backends.cudnn.benchmark = True   # the fastest "
                                      "convolution algorithm per input shape")

    def __post_init__(self) -> None:
        check_knobs(self)
        if not (isinstance(self.growth_factor, numbers.Real) and self.growth_factor > 1):
            raise ValueError(f"growth_factor={self.growth_factor!r} must be > 1, e.g. 2.0")
        if not (isinstance(self.backoff_factor, numbers.Real) and 0 < self.backoff_factor < 1):
            raise ValueError(f"backoff_factor={self.backoff_factor!r} must be between 0 and 1, "
                             "e.g. 0.5")
        if self.grad_scaler and self.precision not in HALF_DTYPES:
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
        return HALF_DTYPES.get(self.precision)

    def to_dict(self) -> dict:
        return asdict(self)


def matmul_precision_of(precision: str) -> str:
    """The matmul precision a training precision multiplies in (bf16_pure: bf16)."""
    precision = canonical_precision(precision)
    return {"bf16_pure": "bf16", "fp32_default": "fp32"}.get(precision, precision)


def precision_context(precision: str) -> contextlib.AbstractContextManager:
    """The TF32 settings a training precision runs under (TF32 on for tf32 only)."""
    if canonical_precision(precision) == "fp32_default":
        return framework_fp32()
    return matmul_precision(matmul_precision_of(precision))


def check_precision(precision: str, device: str) -> None:
    """ValueError (why, and what to use instead) when `device` cannot train in `precision`."""
    check_supported(matmul_precision_of(precision), device)


def precisions_for(device: str) -> list[str]:
    return [p for p in TRAIN_PRECISIONS if not unsupported_reason(matmul_precision_of(p), device)]
