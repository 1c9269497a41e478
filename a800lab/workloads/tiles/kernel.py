"""The lab's Triton tile kernel: C = A @ B, one block_m x block_n tile of C per program.

    from a800lab.workloads.tiles.kernel import launch_tile_matmul
    c = launch_tile_matmul(a, b, spec)    # a (m x k), b (k x n) on the GPU; spec: a MatmulSpec
    c = launch_tile_matmul(a8, b8, spec, scale=1 / (scale_a * scale_b))   # fp8 e4m3 -> bf16 C

Each program walks K in block_k steps, loading an A tile (block_m x block_k) and a B tile
(block_k x block_n) and accumulating their tl.dot in fp32 (input_precision "ieee" for fp32,
"tf32" for tf32; 16- and 8-bit inputs use the tensor cores directly). Programs are numbered in
Triton's grouped order (group_m rows of tiles column by column; group_m=1 is row-major) so that
tiles running together share A rows and B columns in L2. Edges are masked, so any M, N, K works:
rows and columns past the edge re-read valid data (index modulo M, N) and are never stored; K past
the edge loads zeros. num_warps and num_stages go to the launch. Triton caches each compiled
variant (per constexpr tile, dtype, num_warps and num_stages) in memory and on disk, so a config
compiles once per process and a sweep pays compilation on its first (checking) run only.

Set TRITON_INTERPRET=1 before this module is imported to run the kernel under the Triton
interpreter (numpy on the CPU, for correctness at small sizes; INTERPRETED is then True). The
interpreter multiplies bf16 tiles as raw 16-bit integers, so in interpreter mode bf16 tiles are
widened to fp32 before tl.dot (same inputs, fp32 products; bf16 tensor-core tl.dot is checked on
a GPU only). The module imports without Triton; the kernel then does not exist and callers check
a800lab.core.backends.HAS_TRITON first.
"""

from __future__ import annotations

import torch

from ...core.backends import HAS_TRITON

INTERPRETED = False

if HAS_TRITON:
    import triton
    import triton.language as tl
    from triton.runtime.errors import OutOfResources

    @triton.jit
    def tile_matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                           stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                           scale,
                           BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr,
                           BLOCK_SIZE_K: tl.constexpr, GROUP_SIZE_M: tl.constexpr,
                           INPUT_PRECISION: tl.constexpr, WIDEN: tl.constexpr,
                           HAS_SCALE: tl.constexpr):
        # program id -> (tile row, tile column) in grouped order
        pid = tl.program_id(axis=0)
        tiles_m = tl.cdiv(M, BLOCK_SIZE_M)
        tiles_n = tl.cdiv(N, BLOCK_SIZE_N)
        tiles_per_group = GROUP_SIZE_M * tiles_n
        first_m = (pid // tiles_per_group) * GROUP_SIZE_M
        group_rows = min(tiles_m - first_m, GROUP_SIZE_M)  # the last group may be shorter
        pid_m = first_m + (pid % tiles_per_group) % group_rows
        pid_n = (pid % tiles_per_group) // group_rows

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
            acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION)
            a_ptrs += BLOCK_SIZE_K * stride_ak
            b_ptrs += BLOCK_SIZE_K * stride_bk
        if HAS_SCALE:
            acc = acc * scale  # fp8: undo the per-tensor input scales

        offs_cm = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
        offs_cn = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
        c_ptrs = c_ptr + offs_cm[:, None] * stride_cm + offs_cn[None, :] * stride_cn
        c_mask = (offs_cm[:, None] < M) & (offs_cn[None, :] < N)
        tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=c_mask)

    INTERPRETED = type(tile_matmul_kernel).__name__ == "InterpretedFunction"


def launch_tile_matmul(a: torch.Tensor, b: torch.Tensor, spec, *,
                       scale: float | None = None) -> torch.Tensor:
    """C = A @ B with the tile of `spec` (a backend="triton" MatmulSpec, checked by
    a800lab.workloads.tiles.config.check_config). C is fp32 for fp32/tf32, bf16 for fp8,
    else the input dtype.

    ValueError when Triton refuses the config at compile time (e.g. more shared memory than the
    card has): the kernel is then not launched.
    """
    m, k = a.shape
    n = b.shape[1]
    out_dtype = torch.bfloat16 if spec.precision == "fp8" else a.dtype
    c = torch.empty(m, n, dtype=out_dtype, device=a.device)
    grid = (triton.cdiv(m, spec.block_m) * triton.cdiv(n, spec.block_n),)
    try:
        tile_matmul_kernel[grid](
            a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
            c.stride(0), c.stride(1), 1.0 if scale is None else scale,
            BLOCK_SIZE_M=spec.block_m, BLOCK_SIZE_N=spec.block_n, BLOCK_SIZE_K=spec.block_k,
            GROUP_SIZE_M=spec.group_m,
            INPUT_PRECISION="ieee" if spec.precision == "fp32" else "tf32",
            WIDEN=INTERPRETED and spec.precision == "bf16", HAS_SCALE=scale is not None,
            num_warps=spec.num_warps, num_stages=spec.num_stages)
    except OutOfResources as exc:
        raise ValueError(f"Triton refused the tile {spec.tile} in {spec.precision} when "
                         f"compiling it: {exc}; lower num_stages or the block sizes") from exc
    return c
