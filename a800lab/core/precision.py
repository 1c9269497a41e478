"""Matmul precisions: names, input dtypes, error tolerances (`rtol`: ~10x what input rounding
and fp32 accumulation give for N(0, 1) inputs, K <= 65536) and where each can run (tf32 is a
CUDA mode: refused on a CPU, never relabelled).

    prec = parse_precision("bfloat16"); check_supported(prec, "cuda")
    with matmul_precision("tf32"): c = a @ b
"""

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

from .backends import resolve_device

PRECISIONS = ("fp64", "fp32", "tf32", "fp16", "bf16", "fp8")
FP8_MULTIPLE = 16  # torch._scaled_mm needs every dimension to be a multiple of 16
HALF_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}  # autocast's, serving's casts


@dataclass(frozen=True)
class Precision:
    """A matmul precision: input dtype, TF32 mode, size and the accepted error vs float64."""

    name: str
    dtype: torch.dtype
    tf32: bool
    bytes_per_element: int
    rtol: float
    min_compute_capability: tuple[int, int] | None  # None: any CUDA GPU


_TABLE: dict[str, Precision] = {
    # fp64: inputs are the float32 data widened exactly; only fp64 accumulation error remains
    "fp64": Precision("fp64", torch.float64, False, 8, 1e-10, None),
    # fp32 (IEEE, TF32 off): inputs exact, accumulation error u32 * sqrt(K) ~ 1.5e-5 at K = 64k
    "fp32": Precision("fp32", torch.float32, False, 4, 1e-4, None),
    # tf32: 10-bit mantissa inside the tensor core, u = 2^-11 -> ~4e-4 error
    "tf32": Precision("tf32", torch.float32, True, 4, 5e-3, (8, 0)),
    # fp16: u = 2^-11 for inputs and the fp16 output -> ~5e-4
    "fp16": Precision("fp16", torch.float16, False, 2, 5e-3, None),
    # bf16: u = 2^-8 for inputs and output -> ~4e-3
    "bf16": Precision("bf16", torch.bfloat16, False, 2, 3e-2, (8, 0)),
    # fp8 e4m3: u = 2^-4, per-tensor scaled inputs, bf16 output -> ~5e-2
    "fp8": Precision("fp8", torch.float8_e4m3fn, False, 1, 0.2, (8, 9)),
}

_ALIASES = {
    "float64": "fp64", "double": "fp64", "f64": "fp64",
    "float32": "fp32", "float": "fp32", "f32": "fp32", "ieee": "fp32",
    "tensorfloat32": "tf32",
    "float16": "fp16", "half": "fp16", "f16": "fp16",
    "bfloat16": "bf16",
    "float8": "fp8", "float8_e4m3fn": "fp8", "e4m3": "fp8", "fp8_e4m3": "fp8",
}


def parse_precision(name: str | Precision) -> Precision:
    """Precision for a name or alias ("fp32", "float16", "half", "bfloat16", ...), any case."""
    if isinstance(name, Precision):
        return name
    if not isinstance(name, str):
        raise ValueError(f"precision must be a string such as 'bf16', got {name!r} "
                         f"({type(name).__name__}); valid: {', '.join(PRECISIONS)}")
    key = name.strip().lower().removeprefix("torch.")
    key = _ALIASES.get(key, key)
    if key not in _TABLE:
        raise ValueError(f"unknown precision {name!r}: use one of {', '.join(PRECISIONS)} "
                         f"(aliases: {', '.join(sorted(_ALIASES))})")
    return _TABLE[key]


def unsupported_reason(precision: str | Precision, device: str = "auto",
                       capability: tuple[int, int] | None = None) -> str:
    """Why `precision` cannot run on `device` (or a GPU of `capability`), with what to use
    instead; "" when it can."""
    prec = parse_precision(precision)
    if capability is None:
        device = resolve_device(device)
    if device == "cpu":
        if prec.name == "tf32":
            return ("tf32 is a CUDA tensor-core mode; on CPU torch computes plain fp32, so use "
                    "precision 'fp32' on CPU")
        if prec.name == "fp8":
            return ("fp8 matmul (torch._scaled_mm) needs a CUDA GPU with compute capability "
                    ">= 8.9 (Ada, Hopper); on CPU use 'fp32' or 'bf16'")
        return ""
    capability = capability or torch.cuda.get_device_capability(device)
    need = prec.min_compute_capability
    if need is not None and tuple(capability) < need:
        instead = "'fp16'" if prec.name in ("bf16", "fp8") else "'fp32'"
        return (f"{prec.name} needs compute capability >= {need[0]}.{need[1]}, this GPU has "
                f"{capability[0]}.{capability[1]}; use {instead} instead")
    if prec.name == "fp8" and not hasattr(torch, "_scaled_mm"):
        return (f"fp8 needs torch._scaled_mm, which torch {torch.__version__} lacks; "
                "upgrade torch (>= 2.4) or use 'bf16'")
    return ""


def check_supported(precision: str | Precision, device: str = "auto",
                    capability: tuple[int, int] | None = None) -> None:
    """Raise ValueError (why, and what to use instead) if `precision` cannot run on `device`."""
    reason = unsupported_reason(precision, device, capability)
    if reason:
        raise ValueError(reason)


# torch's fp32_precision settings (torch.backends.cuda.matmul / cudnn.conv); older torch has only
# the allow_tf32 flags and torch.set_float32_matmul_precision.
_FP32_PRECISION_API = hasattr(torch.backends.cuda.matmul, "fp32_precision")


def tf32_settings() -> dict[str, str]:
    """What float32 matmuls and cuDNN convolutions on CUDA use now ("tf32" or "ieee") and the
    API this torch offers; never raises (the legacy getters raise once the fp32_precision API
    holds a value they cannot express, so it reads that API where it exists)."""
    if _FP32_PRECISION_API:  # "none" (nothing set up torch's chain of settings) is IEEE fp32
        matmul = torch.backends.cuda.matmul.fp32_precision == "tf32"
        conv = torch.backends.cudnn.conv.fp32_precision == "tf32"
    else:
        matmul, conv = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    return {"matmul_fp32_precision": "tf32" if matmul else "ieee",
            "conv_fp32_precision": "tf32" if conv else "ieee",
            "tf32_api": "fp32_precision" if _FP32_PRECISION_API else "allow_tf32"}


def _own_fp32_precision(setting: object, parent: object, parent_own: str) -> str:
    """What `setting.fp32_precision` holds itself: "none" when it inherits from `parent`.
    torch reports a setting left at "none" with its parent's value. When the two agree, move the
    parent for a moment and see whether the setting follows; then put back `parent_own` (what
    the parent holds itself), so nothing changes."""
    value = setting.fp32_precision
    if value == "none" or value != parent.fp32_precision:
        return value
    parent.fp32_precision = "ieee" if value == "tf32" else "tf32"
    follows = setting.fp32_precision != value
    parent.fp32_precision = parent_own
    return "none" if follows else value


def _set_fp32_precision(matmul_tf32: bool, conv_tf32: bool) -> Callable[[], None]:
    """Set matmul and conv fp32_precision to "tf32" or "ieee" where they differ; returns the
    function that puts back exactly what was there."""
    # torch's chain of settings: generic (torch.backends) <- "cuda"/"all" (torch.backends.cudnn)
    # <- matmul / conv. Writing back an inherited value would pin it, so that a later change of
    # the parent no longer reached it: write back what each setting held itself.
    generic, cuda_all = torch.backends, torch.backends.cudnn
    cuda_all_own = _own_fp32_precision(cuda_all, generic, generic.fp32_precision)
    undo = []
    for setting, tf32 in ((torch.backends.cuda.matmul, matmul_tf32),
                          (torch.backends.cudnn.conv, conv_tf32)):
        if (setting.fp32_precision == "tf32") == tf32:
            continue  # already computes this way: leave it untouched
        undo.append((setting, _own_fp32_precision(setting, cuda_all, cuda_all_own)))
        setting.fp32_precision = "tf32" if tf32 else "ieee"

    def restore() -> None:
        for setting, value in reversed(undo):
            setting.fp32_precision = value

    return restore


def _set_allow_tf32(matmul_tf32: bool, conv_tf32: bool) -> Callable[[], None]:
    """The same through the legacy flags (torch without fp32_precision)."""
    matmul_before = torch.get_float32_matmul_precision()  # "highest", "high" or "medium"
    cudnn_before = torch.backends.cudnn.allow_tf32
    if (matmul_before != "highest") != matmul_tf32:
        torch.backends.cuda.matmul.allow_tf32 = matmul_tf32
    if cudnn_before != conv_tf32:
        torch.backends.cudnn.allow_tf32 = conv_tf32

    def restore() -> None:
        torch.backends.cudnn.allow_tf32 = cudnn_before
        torch.set_float32_matmul_precision(matmul_before)  # keeps "medium" as "medium"

    return restore


@contextlib.contextmanager
def matmul_precision(precision: str | Precision) -> Iterator[Precision]:
    """TF32 for fp32 matmuls and convolutions only when `precision` is tf32; afterwards every
    setting is what it was, through whichever API (fp32_precision or allow_tf32) set it."""
    prec = parse_precision(precision)
    with _fp32_modes(prec.tf32, prec.tf32):
        yield prec


def framework_fp32() -> contextlib.AbstractContextManager[None]:
    """PyTorch's own float32 defaults, whatever was set before: matmuls IEEE fp32, cuDNN
    convolutions TF32 (the "fp32" a user gets without touching a flag); restored after."""
    return _fp32_modes(False, True)


@contextlib.contextmanager
def _fp32_modes(matmul_tf32: bool, conv_tf32: bool) -> Iterator[None]:
    setter = _set_fp32_precision if _FP32_PRECISION_API else _set_allow_tf32
    restore = setter(matmul_tf32, conv_tf32)
    try:
        yield
    finally:
        restore()
