"""Matmul operands in one precision, the call that multiplies them, and the float64 check
(the reference is rebuilt from the seed inside rel_error and freed on return, so nothing of the
check stays alive while the product is timed).

    ops = make_operands(1024, 1024, 1024, "bf16", "cuda")
    with matmul_precision(ops.precision): err = ops.rel_error(ops.run())
    check_fits(needed_bytes(m, n, k, "fp32"), "cpu", what=...)   # before allocating
"""

from collections.abc import Callable
from dataclasses import dataclass

import torch

from .precision import FP8_MULTIPLE, Precision, parse_precision

FP8_MAX = 448.0           # largest finite float8_e4m3fn
MAX_CHECK_ROWS = 512      # rows of C compared with float64 (all rows of smaller problems)


@dataclass(frozen=True)
class MatmulOperands:
    """Inputs of C = A @ B in one precision and the call that computes C."""

    precision: Precision
    a: torch.Tensor
    b: torch.Tensor
    run: Callable[[], torch.Tensor]
    seed: int

    def rel_error(self, c: torch.Tensor) -> float:
        """Relative Frobenius error of `c` (the m x n product) against the float64 product of
        the original float32 data, on up to MAX_CHECK_ROWS evenly spaced rows (edges included)."""
        m, k = self.a.shape
        n = self.b.shape[1]
        rows = check_rows(m, self.a.device)
        a32, b32 = _fp32_inputs(m, n, k, self.a.device, self.seed)
        reference = a32[rows].to(torch.float64) @ b32.to(torch.float64)
        del a32, b32
        return relative_error(c[rows], reference)


def check_rows(m: int, device) -> torch.Tensor:
    """Evenly spaced rows of an m-row product, first and last included (kernels fail at edges)."""
    return torch.linspace(0, m - 1, min(m, MAX_CHECK_ROWS), device=device).round().long()


def relative_error(c: torch.Tensor, reference: torch.Tensor) -> float:
    """||c - reference||_F / ||reference||_F computed in float64 (inf if c is not finite)."""
    c64 = c.to(torch.float64)
    if not torch.isfinite(c64).all():
        return float("inf")
    denom = torch.linalg.norm(reference).item()
    return torch.linalg.norm(c64 - reference).item() / (denom or 1.0)


def _fp32_inputs(m: int, n: int, k: int, device, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator(device=device).manual_seed(seed)
    return (torch.randn(m, k, generator=gen, device=device),
            torch.randn(k, n, generator=gen, device=device))


def operand_bytes(m: int, n: int, k: int, precision: str | Precision) -> int:
    """Bytes of A and B in the precision plus the product C: what the workload itself holds."""
    prec = parse_precision(precision)
    c_bytes = 2 if prec.name == "fp8" else prec.bytes_per_element  # fp8 writes a bf16 C
    return (m * k + k * n) * prec.bytes_per_element + m * n * c_bytes


def needed_bytes(m: int, n: int, k: int, precision: str | Precision) -> int:
    """Peak bytes of building and checking one product: the operands and C, the float32 data
    they are made from, the float64 copy of B and the float64 rows of the check."""
    rows = min(m, MAX_CHECK_ROWS)
    return (operand_bytes(m, n, k, precision) + 4 * (m * k + k * n) + 8 * k * n
            + 8 * rows * (k + 3 * n))


def make_operands(m: int, n: int, k: int, precision: str | Precision, device, *,
                  seed: int = 0) -> MatmulOperands:
    """Seeded N(0, 1) inputs A (m x k) and B (k x n) in `precision` on `device`, multiplied by
    torch.matmul (fp8: scaled per tensor, B column-major, by torch._scaled_mm to bf16); run it
    under `matmul_precision(precision)`."""
    prec = parse_precision(precision)
    if prec.name == "fp8" and any(d % FP8_MULTIPLE for d in (m, n, k)):
        raise ValueError(f"fp8 needs m, n, k to be multiples of {FP8_MULTIPLE} "
                         f"(torch._scaled_mm), got {m}x{n}x{k}; round them up")
    a32, b32 = _fp32_inputs(m, n, k, device, seed)
    if prec.name == "fp8":
        a, b, inv_a, inv_b = fp8_inputs(a32, b32)

        def run() -> torch.Tensor:
            return torch._scaled_mm(a, b, scale_a=inv_a, scale_b=inv_b, out_dtype=torch.bfloat16)
    else:
        a, b = a32.to(prec.dtype), b32.to(prec.dtype)

        def run() -> torch.Tensor:
            return torch.matmul(a, b)

    return MatmulOperands(prec, a, b, run, seed)


def fp8_inputs(a32: torch.Tensor, b32: torch.Tensor):
    """fp8 e4m3 copies of float32 A and B scaled per tensor so |x| max maps to FP8_MAX (B
    column-major, as torch._scaled_mm wants it), and the float32 scales that undo it:
    (a8, b8, inv_scale_a, inv_scale_b), with A @ B ~ (a8 @ b8) * inv_scale_a * inv_scale_b."""
    scale_a = FP8_MAX / a32.abs().max().clamp(min=1e-12)
    scale_b = FP8_MAX / b32.abs().max().clamp(min=1e-12)
    a = (a32 * scale_a).to(torch.float8_e4m3fn)
    b = (b32 * scale_b).to(torch.float8_e4m3fn).t().contiguous().t()  # column-major
    return a, b, (1.0 / scale_a).float(), (1.0 / scale_b).float()
