"""A training configuration, validated at construction, and the precisions a device trains in.

    spec = TrainSpec(model="transformer", batch_size=16, accum_steps=4, precision="bf16")
    spec.effective_batch, spec.uses_scaler, spec.autocast_dtype   # 64, False, torch.bfloat16
    check_precision("tf32", "cpu")   # ValueError: why, and what to use instead
"""

import contextlib
import numbers
from dataclasses import asdict, dataclass

import torch

from ...core.checks import positive_float, positive_int
from ...core.precision import (
    HALF_DTYPES,
    check_supported,
    framework_fp32,
    matmul_precision,
    unsupported_reason,
)
from ..models.levers import ATTENTION_BACKENDS, COMPILE_MODES, OPTIMIZER_IMPLS, check_choice

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
    compile: str = "off"
    optimizer_impl: str = "default"
    attention: str = "default"
    channels_last: bool = False

    def __post_init__(self) -> None:
        set_ = lambda name, value: object.__setattr__(self, name, value)  # noqa: E731
        set_("batch_size", positive_int("batch_size", self.batch_size, "32"))
        set_("accum_steps", positive_int("accum_steps", self.accum_steps,
                                          "1 (no accumulation) or 4"))
        set_("precision", canonical_precision(self.precision))
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"unknown optimizer {self.optimizer!r}: use one of {OPTIMIZERS}")
        for name in ("checkpointing", "channels_last"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name}={getattr(self, name)!r} must be True or False")
        check_choice("compile", self.compile, COMPILE_MODES)
        check_choice("optimizer_impl", self.optimizer_impl, OPTIMIZER_IMPLS)
        check_choice("attention", self.attention, ATTENTION_BACKENDS)
        if self.lr is not None:
            set_("lr", positive_float("lr", self.lr, "1e-3"))
        set_("init_scale", positive_float("init_scale", self.init_scale, "65536.0"))
        if not (isinstance(self.growth_factor, numbers.Real) and self.growth_factor > 1):
            raise ValueError(f"growth_factor={self.growth_factor!r} must be > 1, e.g. 2.0")
        if not (isinstance(self.backoff_factor, numbers.Real) and 0 < self.backoff_factor < 1):
            raise ValueError(f"backoff_factor={self.backoff_factor!r} must be between 0 and 1, "
                             "e.g. 0.5")
        set_("growth_interval", positive_int("growth_interval", self.growth_interval, "2000"))
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
