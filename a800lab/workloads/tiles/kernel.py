"""The lab's Triton tile kernels: C = A @ B tile by tile (pointer or TMA loads, one program per
tile or a persistent one per SM, fp8's accumulation a stated choice). Set TRITON_INTERPRET=1
before importing this module to run them under the Triton interpreter.

    c = launch_tile_matmul(a, b, spec)    # a (m x k), b (k x n) on the GPU; spec: a MatmulSpec
"""

import contextlib
from dataclasses import dataclass

import torch

from ...core.backends import HAS_TRITON

INTERPRETED = False
INTERPRETER_PROGRAMS = 3  # persistent programs under the interpreter: enough to loop
# fp8 "precise": promote the tensor core's partial sums into fp32 after every 32-deep product (one
# wgmma k-step); Triton keeps wgmma for >= 32 and falls back to mma.sync below it
PRECISE_FP8_ACC = 32

if HAS_TRITON:
    import triton
    import triton.language as tl
    from triton.runtime.errors import OutOfResources
    from triton.tools.tensor_descriptor import TensorDescriptor

    @triton.jit
    def _tile_of(tile_id, M, N, BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr,
                 GROUP_SIZE_M: tl.constexpr):
        """tile id -> (tile row, tile column) in grouped order."""
        tiles_m = tl.cdiv(M, BLOCK_SIZE_M)
        tiles_n = tl.cdiv(N, BLOCK_SIZE_N)
        tiles_per_group = GROUP_SIZE_M * tiles_n
        first_m = (tile_id // tiles_per_group) * GROUP_SIZE_M
        group_rows = min(tiles_m - first_m, GROUP_SIZE_M)  # the last group may be shorter
        pid_m = first_m + (tile_id % tiles_per_group) % group_rows
        pid_n = (tile_id % tiles_per_group) // group_rows
        return pid_m, pid_n

    @triton.jit
    def _pointer_tile(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                      stride_cm, stride_cn, scale, tile_id,
                      BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr,
                      BLOCK_SIZE_K: tl.constexpr, GROUP_SIZE_M: tl.constexpr,
                      INPUT_PRECISION: tl.constexpr, WIDEN: tl.constexpr,
                      HAS_SCALE: tl.constexpr, MAX_IMPRECISE_ACC: tl.constexpr):
        pid_m, pid_n = _tile_of(tile_id, M, N, BLOCK_SIZE_M, BLOCK_SIZE_N, GROUP_SIZE_M)
        # rows/columns past the edge wrap onto valid ones: loaded, computed, never stored
        offs_am = (pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)) % M
        offs_bn = (pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)) % N
        offs_k = tl.arange(0, BLOCK_SIZE_K)
        a_ptrs = a_ptr + offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak
        b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn
        acc = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
        for step in range(0, tl.cdiv(K, BLOCK_SIZE_K)):
            k_left = K - step * BLOCK_SIZE_K  # K past the edge loads zeros: adds nothing
            a = tl.load(a_ptrs, mask=offs_k[None, :] < k_left, other=0.0)
            b = tl.load(b_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
            if WIDEN:
                a = a.to(tl.float32)
                b = b.to(tl.float32)
            acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION,
                         max_num_imprecise_acc=MAX_IMPRECISE_ACC)
            a_ptrs += BLOCK_SIZE_K * stride_ak
            b_ptrs += BLOCK_SIZE_K * stride_bk
        if HAS_SCALE:
            acc = acc * scale  # fp8: undo the per-tensor input scales
        offs_cm = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
        offs_cn = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
        c_ptrs = c_ptr + offs_cm[:, None] * stride_cm + offs_cn[None, :] * stride_cn
        c_mask = (offs_cm[:, None] < M) & (offs_cn[None, :] < N)
        tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=c_mask)

    @triton.jit
    def tile_matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                           stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                           scale, num_programs,
                           BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr,
                           BLOCK_SIZE_K: tl.constexpr, GROUP_SIZE_M: tl.constexpr,
                           INPUT_PRECISION: tl.constexpr, WIDEN: tl.constexpr,
                           HAS_SCALE: tl.constexpr, MAX_IMPRECISE_ACC: tl.constexpr,
                           PERSISTENT: tl.constexpr):
        if PERSISTENT:
            tiles = tl.cdiv(M, BLOCK_SIZE_M) * tl.cdiv(N, BLOCK_SIZE_N)
            for tile_id in tl.range(tl.program_id(axis=0), tiles, num_programs, flatten=True):
                _pointer_tile(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk,
                              stride_bn, stride_cm, stride_cn, scale, tile_id, BLOCK_SIZE_M,
                              BLOCK_SIZE_N, BLOCK_SIZE_K, GROUP_SIZE_M, INPUT_PRECISION, WIDEN,
                              HAS_SCALE, MAX_IMPRECISE_ACC)
        else:
            _pointer_tile(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk,
                          stride_bn, stride_cm, stride_cn, scale, tl.program_id(axis=0),
                          BLOCK_SIZE_M, BLOCK_SIZE_N, BLOCK_SIZE_K, GROUP_SIZE_M,
                          INPUT_PRECISION, WIDEN, HAS_SCALE, MAX_IMPRECISE_ACC)

    @triton.jit
    def _tma_tile(a_desc, b_desc, c_desc, M, N, K, scale, tile_id,
                  BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr,
                  BLOCK_SIZE_K: tl.constexpr, GROUP_SIZE_M: tl.constexpr,
                  INPUT_PRECISION: tl.constexpr, WIDEN: tl.constexpr, HAS_SCALE: tl.constexpr,
                  MAX_IMPRECISE_ACC: tl.constexpr, B_COLUMN_MAJOR: tl.constexpr):
        pid_m, pid_n = _tile_of(tile_id, M, N, BLOCK_SIZE_M, BLOCK_SIZE_N, GROUP_SIZE_M)
        acc = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
        for step in range(0, tl.cdiv(K, BLOCK_SIZE_K)):
            a = a_desc.load([pid_m * BLOCK_SIZE_M, step * BLOCK_SIZE_K])  # edges read zeros
            if B_COLUMN_MAJOR:  # fp8: B is stored as its transpose (n x k)
                b = b_desc.load([pid_n * BLOCK_SIZE_N, step * BLOCK_SIZE_K]).T
            else:
                b = b_desc.load([step * BLOCK_SIZE_K, pid_n * BLOCK_SIZE_N])
            if WIDEN:
                a = a.to(tl.float32)
                b = b.to(tl.float32)
            acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION,
                         max_num_imprecise_acc=MAX_IMPRECISE_ACC)
        if HAS_SCALE:
            acc = acc * scale
        c_desc.store([pid_m * BLOCK_SIZE_M, pid_n * BLOCK_SIZE_N], acc.to(c_desc.dtype))

    @triton.jit
    def tma_tile_matmul_kernel(a_desc, b_desc, c_desc, M, N, K, scale, num_programs,
                               BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr,
                               BLOCK_SIZE_K: tl.constexpr, GROUP_SIZE_M: tl.constexpr,
                               INPUT_PRECISION: tl.constexpr, WIDEN: tl.constexpr,
                               HAS_SCALE: tl.constexpr, MAX_IMPRECISE_ACC: tl.constexpr,
                               PERSISTENT: tl.constexpr, B_COLUMN_MAJOR: tl.constexpr):
        if PERSISTENT:
            tiles = tl.cdiv(M, BLOCK_SIZE_M) * tl.cdiv(N, BLOCK_SIZE_N)
            for tile_id in tl.range(tl.program_id(axis=0), tiles, num_programs, flatten=True):
                _tma_tile(a_desc, b_desc, c_desc, M, N, K, scale, tile_id, BLOCK_SIZE_M,
                          BLOCK_SIZE_N, BLOCK_SIZE_K, GROUP_SIZE_M, INPUT_PRECISION, WIDEN,
                          HAS_SCALE, MAX_IMPRECISE_ACC, B_COLUMN_MAJOR)
        else:
            _tma_tile(a_desc, b_desc, c_desc, M, N, K, scale, tl.program_id(axis=0),
                      BLOCK_SIZE_M, BLOCK_SIZE_N, BLOCK_SIZE_K, GROUP_SIZE_M, INPUT_PRECISION,
                      WIDEN, HAS_SCALE, MAX_IMPRECISE_ACC, B_COLUMN_MAJOR)

    INTERPRETED = type(tile_matmul_kernel).__name__ == "InterpretedFunction"


@dataclass(frozen=True)
class KernelCall:
    """One launch as data (a800lab.workloads.tiles.facts compiles exactly this for a target)."""

    kernel: object
    grid: tuple[int]
    args: tuple
    constexprs: dict
    options: dict


def kernel_call(spec, a, b, c, *, scale: float | None, num_programs: int) -> KernelCall:
    """The launch of `spec` on a (m x k), b (k x n; fp8: column-major) and c (m x n), meta tensors
    too; `num_programs`: the persistent schedule's program count (one per SM)."""
    m, k = a.shape
    n = b.shape[1]
    tiles = triton.cdiv(m, spec.block_m) * triton.cdiv(n, spec.block_n)
    persistent = spec.schedule == "persistent"
    grid = (min(tiles, num_programs) if persistent else tiles,)
    constexprs = {
        "BLOCK_SIZE_M": spec.block_m, "BLOCK_SIZE_N": spec.block_n,
        "BLOCK_SIZE_K": spec.block_k, "GROUP_SIZE_M": spec.group_m,
        "INPUT_PRECISION": "ieee" if spec.precision == "fp32" else "tf32",
        # the interpreter multiplies bf16 tiles as raw integers: widen them to fp32 there
        "WIDEN": INTERPRETED and spec.precision == "bf16", "HAS_SCALE": scale is not None,
        "MAX_IMPRECISE_ACC": PRECISE_FP8_ACC if spec.fp8_acc == "precise" else None,
        "PERSISTENT": persistent}
    scale = 1.0 if scale is None else float(scale)
    # FP fusion explicit: Triton 3.9 warns when it is left to its default (3.10 changes it)
    options = {"num_warps": spec.num_warps, "num_stages": spec.num_stages,
               "enable_fp_fusion": True}
    if spec.loads == "tma":
        column_major = b.stride(0) == 1 and n > 1
        a_desc = TensorDescriptor.from_tensor(a, [spec.block_m, spec.block_k])
        b_desc = (TensorDescriptor.from_tensor(b.t(), [spec.block_n, spec.block_k])
                  if column_major else TensorDescriptor.from_tensor(b, [spec.block_k,
                                                                       spec.block_n]))
        c_desc = TensorDescriptor.from_tensor(c, [spec.block_m, spec.block_n])
        return KernelCall(tma_tile_matmul_kernel, grid,
                          (a_desc, b_desc, c_desc, m, n, k, scale, num_programs),
                          {**constexprs, "B_COLUMN_MAJOR": column_major}, options)
    return KernelCall(tile_matmul_kernel, grid,
                      (a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                       c.stride(0), c.stride(1), scale, num_programs), constexprs, options)


def launch_tile_matmul(a: torch.Tensor, b: torch.Tensor, spec, *,
                       scale: float | None = None) -> torch.Tensor:
    """C = A @ B with `spec`'s tile (checked by tiles.config.check_config) on A's device; C is
    bf16 for fp8, else A's dtype. ValueError when Triton refuses the config at compile time."""
    c = torch.empty(a.shape[0], b.shape[1], device=a.device,
                    dtype=torch.bfloat16 if spec.precision == "fp8" else a.dtype)
    on_cuda = a.device.type == "cuda"
    # Triton launches on torch's current device: make A's current (no-op for the interpreter)
    with torch.cuda.device(a.device) if on_cuda else contextlib.nullcontext():
        programs = (torch.cuda.get_device_properties(a.device).multi_processor_count if on_cuda
                    else INTERPRETER_PROGRAMS)
        call = kernel_call(spec, a, b, c, scale=scale, num_programs=programs)
        try:
            call.kernel[call.grid](*call.args, **call.constexprs, **call.options)
        except OutOfResources as exc:
            raise ValueError(f"Triton refused the tile {spec.tile} in {spec.precision} when "
                             f"compiling it: {exc}; lower num_stages or the block sizes") from exc
        except Exception as exc:
            if INTERPRETED and "0-dimensional arrays" in str(exc):
                raise ValueError(
                    f"Triton {triton.__version__}'s interpreter cannot loop over a helper's "
                    "scalar arguments under NumPy 2 (Triton 3.7.1's can), and the lab's kernel "
                    "does; install triton>=3.7 for the interpreter, or use the CPU stand-in "
                    "(backend='cpu_blocked')") from exc
            raise
    return c
