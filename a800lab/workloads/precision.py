"""The precision chapter's measurements: formats side by side, rounding error as K grows, and
fp8 with and without fast accumulation.

    formats()                                   # DataFrame: bits, max, smallest normal, eps
    error_vs_k([64, 256, 1024], ["fp32", "bf16"], device="cpu")   # rel. error vs float64
    fp8_point(4096, 4096, 4096, fast_accum=True, device="cuda")   # needs compute capability 8.9
"""

import functools

import pandas as pd
import torch

from ..core.backends import resolve_device
from ..core.cancel import CancelToken
from ..core.environment import environment
from ..core.memory import check_fits
from ..core.operands import fp8_inputs, make_operands, needed_bytes
from ..core.precision import check_supported, matmul_precision, parse_precision, unsupported_reason
from ..core.timing import measure


def formats() -> pd.DataFrame:
    """Bits, largest value, smallest normal and epsilon of fp32, tf32, fp16, bf16 and fp8 e4m3."""
    rows = []
    # tf32: fp32's exponent (so its range) with fp16's mantissa; a tensor-core format, no dtype
    for name, dtype, exponent, mantissa in (
            ("fp32", torch.float32, 8, 23), ("tf32", torch.float32, 8, 10),
            ("fp16", torch.float16, 5, 10), ("bf16", torch.bfloat16, 8, 7),
            ("fp8 e4m3", torch.float8_e4m3fn, 4, 3)):
        info = torch.finfo(dtype)
        rows.append({"format": name, "exponent_bits": exponent, "mantissa_bits": mantissa,
                     "max": info.max, "smallest_normal": info.tiny, "eps": 2.0 ** -mantissa})
    return pd.DataFrame(rows)


def error_vs_k(ks, precisions, *, device: str = "auto", m: int = 64, n: int = 64,
               seed: int = 0) -> pd.DataFrame:
    """Relative error vs float64 of an m x n x k product per k and precision ("unsupported"
    with the reason where it cannot run)."""
    device = resolve_device(device)
    env = environment(device)
    rows = []
    for name in precisions:
        prec = parse_precision(name)
        reason = unsupported_reason(prec, device)
        for k in ks:
            row = {"precision": prec.name, "k": k, "device_name": env["device_name"],
                   "mode": env["mode"]}
            if reason:
                rows.append({**row, "rel_error": float("nan"), "unsupported": reason})
                continue
            ops = make_operands(m, n, k, prec, device, seed=seed)
            with matmul_precision(prec):
                rows.append({**row, "rel_error": ops.rel_error(ops.run()), "unsupported": ""})
    return pd.DataFrame(rows)


def fp8_point(m: int, n: int, k: int, fast_accum: bool = False, *, device: str = "auto",
              budget_s: float = 0.3, seed: int = 0, cancel: CancelToken | None = None) -> dict:
    """fp8 e4m3 C = A @ B with torch._scaled_mm, fast accumulation on or off: checked against
    float64, then timed. ValueError (what it needs) where fp8 cannot run."""
    device = resolve_device(device)
    check_supported("fp8", device)
    if any(d % 16 for d in (m, n, k)):
        raise ValueError(f"fp8 needs m, n, k to be multiples of 16, got {m}x{n}x{k}")
    check_fits(needed_bytes(m, n, k, "fp8"), device, what=f"a {m}x{n}x{k} fp8 matmul")
    data = make_operands(m, n, k, "fp32", device, seed=seed)
    a, b, inv_a, inv_b = fp8_inputs(data.a, data.b)
    run = functools.partial(torch._scaled_mm, a, b, scale_a=inv_a, scale_b=inv_b,
                            out_dtype=torch.bfloat16, use_fast_accum=fast_accum)
    rel_error = data.rel_error(run())
    del data
    rtol = parse_precision("fp8").rtol
    if not rel_error <= rtol:
        return {"outcome": "wrong", "rel_error": rel_error,
                "message": f"fp8 (fast_accum={fast_accum}) relative error {rel_error:.3g} "
                           f"exceeds {rtol:g}; not timed"}
    timing = measure(run, device=device, budget_s=budget_s, cancel=cancel)
    tflops = 2 * m * n * k / (timing.median_ms * 1e-3) / 1e12
    return {"throughput": tflops, "throughput_unit": "TFLOP/s", "timing": timing,
            "tflops": tflops, "rel_error": rel_error}

