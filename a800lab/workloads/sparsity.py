"""2:4 structured sparsity: dense vs semi-structured sparse matmul on the same pruned A, checked
against float64, then timed; where it cannot run, ValueError says what it needs.

    sparsity_unsupported_reason(4096, 4096, "fp16", "cuda")   # "" when it can run
    sparse_point(4096, 4096, 4096, "fp16", device="cuda")     # speedup, both TFLOP/s
"""

import torch

from ..core.backends import resolve_device
from ..core.cancel import CancelToken
from ..core.memory import check_fits
from ..core.operands import relative_error
from ..core.precision import check_supported, parse_precision
from ..core.timing import measure

SPARSE_PRECISIONS = ("fp16", "bf16")  # the float types both back ends take
MIN_CAPABILITY = (8, 0)               # sparse tensor cores: Ampere (A100/A800) and newer
CUTLASS_MAJOR = 8                     # PyTorch builds its CUTLASS 2:4 kernels for sm_8x only


def prune_2to4(a: torch.Tensor) -> torch.Tensor:
    """A copy of `a` (rows x K, K a multiple of 4) keeping the 2 largest |values| of every
    group of 4 consecutive values along each row, the rest zero."""
    rows, cols = a.shape
    if cols % 4:
        raise ValueError(f"2:4 pruning needs the row length to be a multiple of 4, got {cols}")
    groups = a.reshape(rows, cols // 4, 4)
    keep = groups.abs().topk(2, dim=-1).indices
    mask = torch.zeros_like(groups, dtype=torch.bool).scatter_(-1, keep, True)
    return (groups * mask).reshape(rows, cols)


def backend_name() -> str:
    """The back end to_sparse_semi_structured will use: "cutlass" when _FORCE_CUTLASS is set,
    else "cusparselt"."""
    from torch.sparse import SparseSemiStructuredTensor

    return "cutlass" if SparseSemiStructuredTensor._FORCE_CUTLASS else "cusparselt"


def shape_minimums(backend: str | None = None) -> dict[str, tuple[int, int]]:
    """(min rows, min columns) of the sparse operand per precision, as torch enforces them."""
    from torch.sparse import SparseSemiStructuredTensorCUSPARSELT, SparseSemiStructuredTensorCUTLASS

    cls = {"cutlass": SparseSemiStructuredTensorCUTLASS,
           "cusparselt": SparseSemiStructuredTensorCUSPARSELT}[backend or backend_name()]
    names = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32",
             torch.int8: "int8", torch.float8_e4m3fn: "fp8"}
    return {names[dtype]: (c.sparse_min_rows, c.sparse_min_cols)
            for dtype, c in cls._DTYPE_SHAPE_CONSTRAINTS.items() if dtype in names}


def sparsity_unsupported_reason(m: int, k: int, precision: str, device: str = "auto",
                                capability: tuple[int, int] | None = None) -> str:
    """Why an (m x k) 2:4-sparse A in `precision` cannot be multiplied here; "" when it can."""
    prec = parse_precision(precision)
    device = resolve_device(device) if capability is None else device
    if capability is None and device == "cpu":
        return ("2:4 sparse matmul needs sparse tensor cores: an NVIDIA GPU with compute "
                "capability >= 8.0 (A100/A800, H100/H800/H200, L40S ...); torch runs "
                "to_sparse_semi_structured on CUDA only")
    capability = capability or torch.cuda.get_device_capability(device)
    if tuple(capability) < MIN_CAPABILITY:
        return (f"2:4 sparse matmul needs compute capability >= 8.0 (sparse tensor cores), this "
                f"GPU has {capability[0]}.{capability[1]}")
    backend = backend_name()
    if backend == "cusparselt" and not torch.backends.cusparselt.is_available():
        return ("torch's default 2:4 back end, cuSPARSELt, is not in this torch build "
                "(torch.backends.cusparselt.is_available() is False); install a CUDA build of "
                "torch that ships it, or set torch.sparse.SparseSemiStructuredTensor."
                "_FORCE_CUTLASS = True on an sm_8x card")
    if backend == "cutlass" and capability[0] != CUTLASS_MAJOR:
        return (f"PyTorch's CUTLASS 2:4 kernels are built for sm_8x (Ampere/Ada) only and this "
                f"GPU is {capability[0]}.{capability[1]}, so the CUTLASS path cannot be tested "
                "here; unset torch.sparse.SparseSemiStructuredTensor._FORCE_CUTLASS to use "
                "cuSPARSELt")
    minimums = shape_minimums(backend)
    if prec.name not in SPARSE_PRECISIONS or prec.name not in minimums:
        return (f"2:4 sparsity here ({backend}) takes {', '.join(SPARSE_PRECISIONS)} "
                f"inputs, not {prec.name}")
    rows, cols = minimums[prec.name]
    if m % rows or k % cols:
        return (f"the {backend} back end needs A's rows (m={m}) to be a multiple of {rows} and "
                f"its columns (k={k}) a multiple of {cols} for {prec.name}; round them up")
    return ""


def sparse_operands(m: int, n: int, k: int, precision: str, device: str, seed: int = 0):
    """(pruned A, its 2:4-compressed copy, B, {"dense", "sparse"} relative errors vs float64);
    ValueError where 2:4 sparsity cannot run, WontFit where it cannot fit."""
    prec = parse_precision(precision)
    check_supported(prec, device)
    reason = sparsity_unsupported_reason(m, k, prec.name, device)
    if reason:
        raise ValueError(reason)
    # A, pruned A, its compressed copy, B and C, and the float64 check of B and C's rows
    check_fits((2 * m * k + k * n + m * n) * prec.bytes_per_element + 8 * (k * n + 2 * m * n),
               device, what=f"a {m}x{n}x{k} {prec.name} 2:4 sparse matmul")
    gen = torch.Generator(device=device).manual_seed(seed)
    a = prune_2to4(torch.randn(m, k, generator=gen, device=device)).to(prec.dtype)
    b = torch.randn(k, n, generator=gen, device=device).to(prec.dtype)
    reference = a.to(torch.float64) @ b.to(torch.float64)
    a_sparse = torch.sparse.to_sparse_semi_structured(a)
    errors = {"dense": relative_error(a @ b, reference),
              "sparse": relative_error(a_sparse @ b, reference)}
    return a, a_sparse, b, errors


def sparse_point(m: int, n: int, k: int, precision: str = "fp16", *, device: str = "auto",
                 budget_s: float = 0.3, seed: int = 0, cancel: CancelToken | None = None) -> dict:
    """Dense and 2:4-sparse C = A @ B on the same pruned A, checked vs float64, then timed
    (throughput: the sparse effective TFLOP/s)."""
    prec = parse_precision(precision)
    device = resolve_device(device)
    a, a_sparse, b, errors = sparse_operands(m, n, k, prec.name, device, seed)
    if not all(err <= prec.rtol for err in errors.values()):
        return {"outcome": "wrong", "rel_error": errors["sparse"],
                "dense_rel_error": errors["dense"], "backend": backend_name(),
                "message": (f"{m}x{n}x{k} {prec.name}: relative error vs float64 dense "
                            f"{errors['dense']:.3g}, sparse {errors['sparse']:.3g} exceeds "
                            f"{prec.rtol:g}; not timed")}
    dense = measure(lambda: a @ b, device=device, budget_s=budget_s, cancel=cancel)
    sparse = measure(lambda: a_sparse @ b, device=device, budget_s=budget_s, cancel=cancel)
    flop = 2 * m * n * k
    dense_tflops = flop / (dense.median_ms * 1e-3) / 1e12
    sparse_tflops = flop / (sparse.median_ms * 1e-3) / 1e12
    return {"throughput": sparse_tflops, "throughput_unit": "TFLOP/s", "timing": sparse,
            "dense_tflops": dense_tflops, "sparse_tflops": sparse_tflops,
            "speedup": dense.median_ms / sparse.median_ms, "rel_error": errors["sparse"],
            "dense_rel_error": errors["dense"], "dense_median_ms": dense.median_ms,
            "backend": backend_name()}
