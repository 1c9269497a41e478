"""Matmul workload: a validated problem spec and a sweep point function (torch / cuBLAS).

    from a800lab.workloads.matmul import MatmulSpec, matmul_point
    spec = MatmulSpec(4096, 4096, 4096, precision="bf16")      # ValueError if malformed
    point = matmul_point(1024, 1024, 1024, "tf32", device="cuda")
    point["tflops"], point["rel_error"], point["timing"].median_ms
    run_sweep(matmul_point, {"m": [256, 512], "precision": ["fp32"]}, fixed={"n": 512, "k": 512},
              workload="matmul")

Correct before fast: every point first computes C once and compares it with a float64 reference
(relative Frobenius error, see `a800lab.core.operands`); a result above the precision's
tolerance is returned as outcome "wrong" with no throughput. Only then is torch.matmul timed with
`measure()`; TFLOP/s = 2*m*n*k / median time. The check is done and freed before timing, so a
sweep's peak memory is the product's own (A, B, C). A point that cannot fit in the memory the
device has available is refused before anything is allocated (an "oom" result, not attempted).

The tile fields of MatmulSpec (block_m, ..., group_m) belong to the Triton back end; the torch back
end lets cuBLAS choose its own tiles and rejects them.
"""

from __future__ import annotations

import numbers
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from ..core.backends import resolve_device
from ..core.cancel import CancelToken
from ..core.memory import check_fits
from ..core.operands import make_operands, needed_bytes, operand_bytes
from ..core.precision import FP8_MULTIPLE, check_supported, matmul_precision, parse_precision
from ..core.timing import measure

BACKENDS = ("torch", "triton")
DEFAULT_CPU_SIZES = (64, 128, 256, 512)  # fp32 on a laptop CPU: well under a second per point
DEFAULT_GPU_SIZES = (1024, 2048, 4096, 8192)
NUM_WARPS = (1, 2, 4, 8, 16)
MAX_NUM_STAGES = 8
_TILE_FIELDS = ("block_m", "block_n", "block_k", "num_warps", "num_stages", "group_m")


def default_sizes(device: str = "auto") -> tuple[int, ...]:
    """Square sizes worth sweeping on `device`: small on CPU, 1024..8192 on a GPU."""
    return DEFAULT_CPU_SIZES if resolve_device(device) == "cpu" else DEFAULT_GPU_SIZES


@dataclass(frozen=True)
class MatmulSpec:
    """C (m x n) = A (m x k) @ B (k x n) in one precision; tile fields for the Triton back end."""

    m: int
    n: int
    k: int
    precision: str = "fp32"
    backend: str = "torch"
    block_m: int | None = None
    block_n: int | None = None
    block_k: int | None = None
    num_warps: int | None = None
    num_stages: int | None = None
    group_m: int | None = None

    def __post_init__(self) -> None:
        for name in ("m", "n", "k"):
            _require_int(name, getattr(self, name), "a positive matrix dimension such as 1024")
            object.__setattr__(self, name, int(getattr(self, name)))  # numpy ints -> int
        # store the canonical name so "half" and "fp16" specs are equal and hash alike
        object.__setattr__(self, "precision", parse_precision(self.precision).name)
        if self.backend not in BACKENDS:
            raise ValueError(f"unknown backend {self.backend!r}: use one of {BACKENDS}")
        if self.precision == "fp8" and any(d % FP8_MULTIPLE for d in (self.m, self.n, self.k)):
            raise ValueError(f"fp8 needs m, n, k to be multiples of {FP8_MULTIPLE}, got "
                             f"{self.m}x{self.n}x{self.k}; round them up")
        given = [f for f in _TILE_FIELDS if getattr(self, f) is not None]
        if given and self.backend != "triton":
            raise ValueError(f"tile fields {given} only apply to backend='triton'; drop them or "
                             "set backend='triton' (cuBLAS picks its own tiles)")
        self._validate_tiles()

    def _validate_tiles(self) -> None:
        for name in ("block_m", "block_n", "block_k"):
            value = getattr(self, name)
            if value is None:
                continue
            _require_int(name, value, "a power of two >= 16 such as 64 or 128")
            value = int(value)
            object.__setattr__(self, name, value)
            if value < 16 or value & (value - 1):
                raise ValueError(f"{name}={value} must be a power of two >= 16 (tensor-core "
                                 "tiles are 16 wide); try 32, 64 or 128")
        if self.num_warps is not None and (isinstance(self.num_warps, bool)
                                           or self.num_warps not in NUM_WARPS):
            raise ValueError(f"num_warps={self.num_warps!r} must be one of {NUM_WARPS}; "
                             "4 or 8 suit most tiles")
        if self.num_stages is not None:
            _require_int("num_stages", self.num_stages, "a pipeline depth such as 3")
            if self.num_stages > MAX_NUM_STAGES:
                raise ValueError(f"num_stages={self.num_stages} exceeds {MAX_NUM_STAGES}; deeper "
                                 "pipelines overflow shared memory, try 2-5")
        if self.group_m is not None:
            _require_int("group_m", self.group_m, "a row-group size such as 8 (1 = no grouping)")

    @property
    def flop_count(self) -> int:
        """2*m*n*k: one multiply and one add per inner-product term."""
        return 2 * self.m * self.n * self.k

    @property
    def bytes_moved(self) -> int:
        """Minimum DRAM traffic: read A and B once, write C once (fp8 writes a bf16 C)."""
        in_bytes = parse_precision(self.precision).bytes_per_element
        out_bytes = 2 if self.precision == "fp8" else in_bytes
        return (self.m * self.k + self.k * self.n) * in_bytes + self.m * self.n * out_bytes

    @property
    def arithmetic_intensity(self) -> float:
        """FLOP per byte of minimum DRAM traffic (compare with peak FLOP/s / bandwidth)."""
        return self.flop_count / self.bytes_moved

    def to_dict(self) -> dict:
        return asdict(self)


def _require_int(name: str, value, example: str) -> None:
    """A positive integer of any integer type (int, numpy int); bools refused."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name}={value!r} must be a positive int, e.g. {example}")


def cpu_slowdown_note(precision: str) -> str:
    """Why `precision` is slow on this CPU, or "" when it is not: fp32/fp64, or a CPU whose
    flags list native bf16/fp16 matmul instructions (AVX512-BF16, AMX, AVX512-FP16) that torch
    can use (its CPU capability is AVX512 or better, i.e. the OS enables them)."""
    name = parse_precision(precision).name
    native = {"bf16": ("avx512_bf16", "amx_bf16"), "fp16": ("avx512_fp16", "amx_fp16")}
    if name not in native:
        return ""
    capability = torch.backends.cpu.get_cpu_capability()
    try:
        flags = set(Path("/proc/cpuinfo").read_text().split())
    except OSError:
        flags = set()
    if capability.startswith("AVX512") and flags & set(native[name]):
        return ""
    return (f"{name} on this CPU (torch capability {capability}, no usable "
            f"{'/'.join(native[name])}) has no native {name} matmul: expect it to run tens of "
            f"times slower than fp32; use fp32 for CPU sweeps and {name} on a GPU")


def matmul_point(m: int, n: int, k: int, precision: str = "fp32", *, device: str = "auto",
                 budget_s: float = 0.3, seed: int = 0,
                 cancel: CancelToken | None = None) -> dict:
    """Check, then time, torch.matmul for one shape and precision; a sweep point function.

    Returns {"throughput", "throughput_unit", "timing", "tflops", "rel_error", "flop_count",
    "bytes_moved", "arithmetic_intensity", "operand_bytes"}, or {"outcome": "wrong", "message",
    "rel_error", ...} without a throughput when the result is off. Raises ValueError for a
    precision the device cannot run and WontFit (recorded as "oom") for a problem larger than
    the memory available, before allocating it.
    """
    spec = MatmulSpec(m, n, k, precision)
    m, n, k = spec.m, spec.n, spec.k
    prec = parse_precision(spec.precision)
    device = resolve_device(device)
    check_supported(prec, device)
    if cancel is not None:
        cancel.raise_if_cancelled()
    check_fits(needed_bytes(m, n, k, prec), device, what=f"a {m}x{n}x{k} {prec.name} matmul")
    metrics = {"flop_count": spec.flop_count, "bytes_moved": spec.bytes_moved,
               "arithmetic_intensity": spec.arithmetic_intensity,
               "operand_bytes": operand_bytes(m, n, k, prec)}
    ops = make_operands(m, n, k, prec, device, seed=seed)
    with matmul_precision(prec):
        rel_error = ops.rel_error(ops.run())  # the check's tensors are freed on return
        if not rel_error <= prec.rtol:  # also catches NaN
            return {"outcome": "wrong", "rel_error": rel_error, **metrics,
                    "message": (f"{m}x{n}x{k} {prec.name} on {device}: relative error "
                                f"{rel_error:.3g} vs float64 exceeds the tolerance {prec.rtol:g}; "
                                "not timed")}
        timing = measure(ops.run, device=device, budget_s=budget_s, cancel=cancel)
    tflops = spec.flop_count / (timing.median_ms * 1e-3) / 1e12
    return {"throughput": tflops, "throughput_unit": "TFLOP/s", "timing": timing,
            "tflops": tflops, "rel_error": rel_error, **metrics}
