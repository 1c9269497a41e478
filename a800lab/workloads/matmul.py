"""Matmul workload: the validated problem spec every matmul lab shares (torch's cuBLAS, the
Triton tile kernel and its CPU stand-in), and the torch.matmul sweep point.

    spec = MatmulSpec(4096, 4096, 4096, "bf16", backend="triton", block_m=128)  # ValueError
    point = matmul_point(1024, 1024, 1024, "tf32", device="cuda")   # checked vs float64, timed
"""

from dataclasses import MISSING, asdict, dataclass, replace
from pathlib import Path

import torch

from ..core.backends import HAS_TRITON, resolve_device
from ..core.cancel import CancelToken
from ..core.knobs import Knob, check_knobs, knob
from ..core.memory import check_fits
from ..core.operands import make_operands, needed_bytes, operand_bytes
from ..core.precision import (
    FP8_MULTIPLE,
    PRECISIONS,
    check_supported,
    matmul_precision,
    parse_precision,
    unsupported_reason,
)
from ..core.timing import measure

DEFAULT_CPU_SIZES = (64, 128, 256, 512)  # fp32 on a laptop CPU: well under a second per point
DEFAULT_GPU_SIZES = (1024, 2048, 4096, 8192)
DEFAULT_TILES = {
    # Triton's matmul tutorial's middle-of-the-road tile: 96 KiB of shared memory in fp32
    "triton": {"block_m": 128, "block_n": 128, "block_k": 32, "num_warps": 4, "num_stages": 3,
               "group_m": 8, "schedule": "tile", "loads": "pointer"},
    # 128^3 tiles: few enough torch calls that the CPU's own matmul dominates the time
    "cpu_blocked": {"block_m": 128, "block_n": 128, "block_k": 128, "group_m": 1},
}
# the tile fields each back end takes: the CPU stand-in has no warps and no pipeline
TILE_FIELDS = {"torch": (), **{backend: tuple(tile) for backend, tile in DEFAULT_TILES.items()}}
MAX_ACC_REGISTERS = 255  # 32-bit registers one CUDA thread can address (compute capability >= 3.5)
FP8_MIN_BLOCK_K = 32     # 8-bit tensor-core instructions take K in steps of 32


def default_sizes(device: str = "auto") -> tuple[int, ...]:
    """Square sizes worth sweeping on `device`: small on CPU, 1024..8192 on a GPU."""
    return DEFAULT_CPU_SIZES if resolve_device(device) == "cpu" else DEFAULT_GPU_SIZES


def backends_for(device: str) -> tuple[str, ...]:
    """The back ends `device` runs, its tile back end first: the Triton kernel on a GPU with
    Triton, the CPU stand-in on a CPU; then torch."""
    if resolve_device(device) == "cpu":
        return "cpu_blocked", "torch"
    return ("triton", "torch") if HAS_TRITON else ("torch",)


def canonical_precision(name: str) -> str:
    """"half" -> "fp16"; an unknown name: ValueError."""
    return parse_precision(name).name


def tensor_core_precisions(device: str) -> tuple[str, ...]:
    """The precisions `device` multiplies in on tensor cores (the panel's; fp64: torch's)."""
    return tuple(p for p in PRECISIONS if p != "fp64" and not unsupported_reason(p, device))


DIM = Knob(MISSING, "", integer=True, lo=1, example="1024", scale="pow2", panel_lo=16,
           panel_hi=65536)  # the panel's shapes start at one tensor-core tile
# tensor-core tiles are 16 wide
BLOCK = Knob(None, "", integer=True, lo=16, pow2=True, example="32, 64 or 128", scale="pow2",
             panel_hi=256, lever=True, tune=(32, 64, 128, 256), tune_gpu=(64, 128, 256))


@dataclass(frozen=True)
class MatmulSpec:
    """C (m x n) = A (m x k) @ B (k x n) in one precision on one back end, with its tile."""

    m: int = knob(replace(DIM, help="rows of A and C"))
    n: int = knob(replace(DIM, help="columns of B and C"))
    k: int = knob(replace(DIM, help="the shared dimension: columns of A, rows of B"))
    precision: str = knob("fp32", "the matmul's precision", canon=canonical_precision,
                          available=tensor_core_precisions)
    backend: str = knob("torch", "the back end (torch: cuBLAS, no tile fields; triton: the lab's "
                        "tile kernel; cpu_blocked: its CPU stand-in)",
                        choices=("torch", "triton", "cpu_blocked"), available=backends_for)
    # the tile (None: the back end's DEFAULT_TILES); the tuner's grids: Triton's tutorial tiles
    # around 128x128 on a GPU, 32 to 256 on the CPU stand-in (smaller only time Python's calls)
    block_m: int | None = knob(replace(BLOCK, help="rows of C per thread block (the tile's M)"))
    block_n: int | None = knob(replace(BLOCK, help="columns of C per thread block"))
    block_k: int | None = knob(replace(BLOCK, help="depth of each step along k", panel_hi=128,
                                       tune=(64, 128), tune_gpu=(32, 64)))
    num_warps: int | None = knob(None, "warps per thread block", integer=True, lo=1, hi=16,
                                 pow2=True, example="4 or 8", scale="pow2", panel_hi=16,
                                 lever=True, tune_gpu=(4, 8))
    num_stages: int | None = knob(None, "pipeline stages of the loads (software pipelining)",
                                  integer=True, lo=1, hi=8, panel_hi=8, lever=True,
                                  example="3 (deeper pipelines overflow shared memory: try 2-5)",
                                  tune_gpu=(3, 4))
    group_m: int | None = knob(None, "tiles grouped along M for L2 reuse (1: row order)",
                               integer=True, lo=1, example="8 (1 = no grouping)", scale="pow2",
                               panel_hi=8, lever=True, tune=(1,), tune_gpu=(8,))
    # the Triton kernel's two Hopper levers (a800lab.workloads.tiles.kernel)
    schedule: str | None = knob(None, "programs launched (tile: one per tile; persistent: one "
                                "per SM)", choices=("tile", "persistent"), lever=True)
    loads: str | None = knob(None, "how tiles load (tma: tensor descriptors, Hopper sm_90 on)",
                             choices=("pointer", "tma"), lever=True)
    fp8_acc: str | None = knob(None, "fp8 only: its accumulation (precise: every 32-deep "
                               "product into fp32, cuBLAS's default; fast: Triton's default on "
                               "sm_90, cuBLAS's use_fast_accum=True)",
                               choices=("precise", "fast"), lever=True)

    def __post_init__(self) -> None:
        check_knobs(self)  # precision canonical, so "half" and "fp16" specs are equal
        if self.precision == "fp8" and any(d % FP8_MULTIPLE for d in (self.m, self.n, self.k)):
            raise ValueError(f"fp8 needs m, n, k to be multiples of {FP8_MULTIPLE}, got "
                             f"{self.m}x{self.n}x{self.k}; round them up")
        self._check_backend_fields()
        self._check_fp8_acc()
        for name, value in DEFAULT_TILES.get(self.backend, {}).items():
            if getattr(self, name) is None:
                self._set(name, value)
        if self.backend == "triton":
            self._check_kernel_limits()

    def _set(self, name: str, value) -> None:
        object.__setattr__(self, name, value)

    def _check_backend_fields(self) -> None:
        given = [f for f in TILE_FIELDS["triton"] if getattr(self, f) is not None]
        if given and self.backend == "torch":
            raise ValueError(f"tile fields {given} only apply to backend='triton' (or the CPU "
                             "stand-in 'cpu_blocked'); drop them or set backend='triton' (cuBLAS "
                             "picks its own tiles)")
        foreign = [f for f in given if f not in TILE_FIELDS[self.backend]]
        if foreign:
            raise ValueError(f"{foreign} have no meaning for backend='{self.backend}' (the CPU "
                             "stand-in has no warps and no pipeline stages); drop them, or use "
                             "backend='triton' on a GPU")
        if self.backend == "triton" and self.precision == "fp64":
            raise ValueError("backend='triton' multiplies on tensor cores with fp32 accumulation "
                             "and offers no fp64; use backend='torch' for fp64")
        if self.backend == "cpu_blocked" and self.precision in ("tf32", "fp8"):
            raise ValueError(f"backend='cpu_blocked' is a CPU stand-in and {self.precision} is a "
                             "CUDA tensor-core format; use 'fp32', 'fp16' or 'bf16' on CPU, or "
                             "backend='triton' on a GPU")

    def _check_fp8_acc(self) -> None:
        if self.precision != "fp8":
            if self.fp8_acc is not None:
                raise ValueError(f"fp8_acc={self.fp8_acc!r} is fp8's accumulation choice; "
                                 f"drop it for {self.precision}")
            return
        if self.fp8_acc is None:
            self._set("fp8_acc", "precise")  # what cuBLAS does by default
        if self.backend == "cpu_blocked":
            raise ValueError("fp8_acc needs a GPU back end ('triton' or 'torch')")

    def _check_kernel_limits(self) -> None:
        """Limits of the Triton kernel on every card (per card: a800lab.workloads.tiles.config)."""
        if self.precision == "fp8" and self.block_k < FP8_MIN_BLOCK_K:
            raise ValueError(f"block_k={self.block_k} is too small for fp8: 8-bit tensor-core "
                             f"instructions take K in steps of {FP8_MIN_BLOCK_K}; use block_k="
                             f"{FP8_MIN_BLOCK_K} or more")
        largest = max(self.m * self.k, self.k * self.n, self.m * self.n)
        if largest >= 2**31:
            raise ValueError(f"{self.m}x{self.n}x{self.k} has a matrix of {largest} elements; the "
                             "tile kernel indexes with 32-bit offsets, so keep m*k, k*n and m*n "
                             "below 2^31 (split the product, or use backend='torch')")
        # the fp32 accumulator tile is spread over the block's threads, one register per element
        threads = 32 * self.num_warps
        registers = self.block_m * self.block_n // threads
        if registers > MAX_ACC_REGISTERS:
            raise ValueError(
                f"block_m={self.block_m} x block_n={self.block_n} needs {registers} accumulator "
                f"registers per thread with num_warps={self.num_warps} ({threads} threads); a "
                f"thread has at most {MAX_ACC_REGISTERS}: raise num_warps or shrink the tile")

    @property
    def tile(self) -> dict:
        """The tile fields this back end uses, by name ({} for torch)."""
        return {name: getattr(self, name) for name in TILE_FIELDS[self.backend]}

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


def cpu_slowdown_note(precision: str) -> str:
    """Why `precision` is slow on this CPU (no native bf16/fp16 matmul instructions torch can
    use: AVX512-BF16, AMX, AVX512-FP16), or ""."""
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
    """torch.matmul for one shape and precision, checked against float64 ("wrong" results are
    not timed), then timed; WontFit ("oom") before allocating what cannot fit."""
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


CPU_PROBE_SIZE = 128    # a probe this size takes milliseconds in any precision on a CPU
LONG_RUN_S = 60.0       # a CPU run predicted to take longer is announced with its estimate


def cpu_call_s(m: int, n: int, k: int, precision: str, torch_calls: int = 1) -> float:
    """Seconds one m x n x k matmul in `precision` takes on this CPU (roughly): a timed 128^3
    probe scaled by the flops, plus the dispatch cost of `torch_calls` - 1 more torch calls."""
    prec = parse_precision(precision)
    ops = make_operands(CPU_PROBE_SIZE, CPU_PROBE_SIZE, CPU_PROBE_SIZE, prec, "cpu")
    with matmul_precision(prec):
        probe = measure(ops.run, device="cpu", budget_s=0.05, warmup_s=0.01, min_reps=3)
    tile = torch.zeros(16, 16)
    dispatch = measure(lambda: tile.addmm_(tile, tile), device="cpu", budget_s=0.01,
                       warmup_s=0.0, min_reps=3)
    return (probe.median_ms * (m * n * k) / CPU_PROBE_SIZE**3
            + dispatch.median_ms * max(0, torch_calls - 1)) / 1e3


def cpu_duration_note(shapes, precisions, *, points: int, calls_per_point: int = 8,
                      budget_s: float = 0.3) -> str:
    """"" or, when a CPU run would take over a minute, the estimate and what to do. `shapes`:
    (m, n, k) or (m, n, k, torch calls per matmul)."""
    shapes = [(*s, 1) if len(s) == 3 else tuple(s) for s in shapes]
    per_call = max(cpu_call_s(m, n, k, p, calls) for m, n, k, calls in shapes
                   for p in precisions)
    total_s = points * max(calls_per_point * per_call, budget_s + 3 * per_call)
    if total_s < LONG_RUN_S:
        return ""
    m, n, k, _ = max(shapes, key=lambda s: s[0] * s[1] * s[2] * s[3])
    return (f"on this CPU one {m}x{n}x{k} product takes about {per_call:.3g} s, so these "
            f"{points} point(s) take about {total_s / 60:.0f} minutes; a CPU shows the method at "
            "small sizes (e.g. --size 256, fp32), a GPU the real figures")
