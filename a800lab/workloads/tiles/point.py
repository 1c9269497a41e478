"""Tiled matmul: one point function over three back ends (the Triton kernel, cuBLAS, the CPU
stand-in walking the same tiles), the config checked first, then C against float64.

    point = tiled_matmul_point(4096, 4096, 4096, "bf16", "triton", block_m=128, device="cuda")
"""

import functools
import math

import torch

from ...core.backends import resolve_device
from ...core.cancel import CancelToken
from ...core.environment import environment
from ...core.memory import check_fits
from ...core.operands import MatmulOperands, fp8_inputs, make_operands, needed_bytes, operand_bytes
from ...core.precision import matmul_precision, parse_precision
from ...core.specs import match
from ...core.timing import measure
from ..matmul import MatmulSpec, backends_for
from ..peak import measured_peak
from .config import check_config

CPU_STAND_IN = "CPU stand-in: cache-blocked torch product over the tiles, not a TensorCore kernel"
INTERPRETER_LABEL = ("Triton tile kernel under the Triton interpreter (numpy on the CPU): "
                     "correctness only, not a GPU time")


def default_tile_backend(device: str = "auto") -> str:
    """The tile back end for `device`: "triton" on a GPU with Triton, "cpu_blocked" on CPU."""
    return backends_for(device)[0]


def backend_label(backend: str, device: str) -> str:
    if backend == "cpu_blocked":
        return CPU_STAND_IN
    if backend == "torch":
        return "torch.matmul (CPU BLAS)" if device == "cpu" else "torch.matmul (cuBLAS)"
    return INTERPRETER_LABEL if device == "cpu" else "Triton tile kernel (a800lab)"


@functools.lru_cache(maxsize=16)  # measure() repeats a call; 16 shapes cover a sweep
def tile_order(m: int, n: int, block_m: int, block_n: int,
               group_m: int) -> tuple[tuple[int, int], ...]:
    """(tile row, tile column) of each program id in the kernel's grouped launch order."""
    tiles_m, tiles_n = math.ceil(m / block_m), math.ceil(n / block_n)
    per_group = group_m * tiles_n
    order = []
    for pid in range(tiles_m * tiles_n):
        first_m = (pid // per_group) * group_m
        rows = min(tiles_m - first_m, group_m)  # the last group may be shorter
        order.append((first_m + (pid % per_group) % rows, (pid % per_group) // rows))
    return tuple(order)


def blocked_matmul(a: torch.Tensor, b: torch.Tensor, block_m: int, block_n: int, block_k: int,
                   group_m: int) -> torch.Tensor:
    """The CPU stand-in: C = A @ B tile by tile in the kernel's order, accumulating in fp32."""
    m, k = a.shape
    n = b.shape[1]
    acc_dtype = torch.float64 if a.dtype == torch.float64 else torch.float32
    c = torch.empty(m, n, dtype=a.dtype, device=a.device)
    for tile_m, tile_n in tile_order(m, n, block_m, block_n, group_m):
        rows = slice(tile_m * block_m, (tile_m + 1) * block_m)
        cols = slice(tile_n * block_n, (tile_n + 1) * block_n)
        a_rows, b_cols = a[rows], b[:, cols]
        acc = torch.zeros(a_rows.shape[0], b_cols.shape[1], dtype=acc_dtype, device=a.device)
        for k0 in range(0, k, block_k):
            # widen each tile as the kernel's registers would (a no-op for fp32)
            acc.addmm_(a_rows[:, k0:k0 + block_k].to(acc_dtype),
                       b_cols[k0:k0 + block_k].to(acc_dtype))
        c[rows, cols] = acc
    return c


def tiled_matmul_point(m: int, n: int, k: int, precision: str = "fp32", backend: str = "auto",
                       block_m: int | None = None, block_n: int | None = None,
                       block_k: int | None = None, group_m: int | None = None,
                       num_warps: int | None = None, num_stages: int | None = None,
                       schedule: str | None = None, loads: str | None = None,
                       fp8_acc: str | None = None, *,
                       device: str = "auto", budget_s: float = 0.3, warmup_s: float = 0.1,
                       seed: int = 0, check: bool = True,
                       cancel: CancelToken | None = None) -> dict:
    """Check the config, then the result against float64, then time one tiled matmul; with
    its work, % of datasheet and measured peak, roofline and (triton) the compiler's facts.
    Tile fields left None take the back end's defaults (fp8: "precise" accumulation on both GPU
    back ends, so they compare like with like). `check=False` skips the float64 comparison
    (a config already checked at this shape, e.g. a tuner's later rounds)."""
    device = resolve_device(device)
    spec = MatmulSpec(m, n, k, precision, default_tile_backend(device) if backend == "auto"
                      else backend, block_m=block_m, block_n=block_n, block_k=block_k,
                      group_m=group_m, num_warps=num_warps, num_stages=num_stages,
                      schedule=schedule, loads=loads, fp8_acc=fp8_acc)
    facts = check_config(spec, device)
    if cancel is not None:
        cancel.raise_if_cancelled()
    prec = parse_precision(spec.precision)
    m, n, k = spec.m, spec.n, spec.k
    check_fits(needed_bytes(m, n, k, prec), device, what=f"a {m}x{n}x{k} {prec.name} matmul")
    metrics = {**_work_figures(spec), **facts,
               "backend_label": backend_label(spec.backend, device)}
    ops = _operands(spec, device, seed)
    with matmul_precision(prec):
        c = ops.run()  # compiles a Triton config
        rel_error = ops.rel_error(c) if check else None  # the check is freed on return
        del c
        if check and not rel_error <= prec.rtol:  # also catches NaN
            return {"outcome": "wrong", "rel_error": rel_error, **metrics,
                    "message": (f"{m}x{n}x{k} {prec.name} {spec.backend} {metrics['tile_config']}"
                                f" on {device}: relative error {rel_error:.3g} vs float64 exceeds "
                                f"the tolerance {prec.rtol:g}; not timed")}
        timing = measure(ops.run, device=device, budget_s=budget_s, warmup_s=warmup_s,
                         cancel=cancel)
    tflops = spec.flop_count / (timing.median_ms * 1e-3) / 1e12
    measured = measured_peak(environment(device), spec.precision)
    return {"throughput": tflops, "throughput_unit": "TFLOP/s", "timing": timing,
            "tflops": tflops, "rel_error": rel_error, **metrics,
            **peak_figures(tflops, spec, None if device == "cpu" else
                           torch.cuda.get_device_name(device)),
            "measured_peak_tflops": measured,
            "pct_of_measured_peak": None if not measured else 100 * tflops / measured}


def _work_figures(spec: MatmulSpec) -> dict:
    if spec.tile:
        tile_text = f"{spec.block_m}x{spec.block_n}x{spec.block_k}, group_m={spec.group_m}"
        if spec.backend == "triton":
            tile_text += f", {spec.num_warps} warps, {spec.num_stages} stages"
            if spec.schedule != "tile" or spec.loads != "pointer":
                tile_text += f", {spec.schedule} schedule, {spec.loads} loads"
        tiles = math.ceil(spec.m / spec.block_m) * math.ceil(spec.n / spec.block_n)
    else:
        tile_text, tiles = "chosen by torch's BLAS library", None
    if spec.fp8_acc is not None:
        tile_text += f", fp8 {spec.fp8_acc} accumulation"
    return {"flop_count": spec.flop_count, "bytes_moved": spec.bytes_moved,
            "arithmetic_intensity": spec.arithmetic_intensity,
            "operand_bytes": operand_bytes(spec.m, spec.n, spec.k, spec.precision),
            "tiles_launched": tiles, "tile_config": tile_text}


def peak_figures(tflops: float, spec: MatmulSpec, device_name: str | None) -> dict:
    """% of the card's datasheet peak, and the roofline at the spec's arithmetic intensity:
    min(peak, intensity x bandwidth), "memory" or "compute" bound; None where unknown."""
    row = match(device_name) if device_name else None
    peak = row.peak_tflops[spec.precision] if row is not None else None
    if peak is None:
        return {"datasheet_peak_tflops": None, "pct_of_datasheet_peak": None,
                "roofline_tflops": None, "roofline_bound": None}
    memory_tflops = spec.arithmetic_intensity * row.mem_bw_gbs / 1e3  # FLOP/B x GB/s -> TFLOP/s
    return {"datasheet_peak_tflops": peak, "pct_of_datasheet_peak": 100 * tflops / peak,
            "roofline_tflops": min(peak, memory_tflops),
            "roofline_bound": "memory" if memory_tflops < peak else "compute"}


def _operands(spec: MatmulSpec, device: str, seed: int) -> MatmulOperands:
    if spec.precision == "fp8" and (spec.backend == "triton" or spec.fp8_acc == "fast"):
        return _fp8_operands(spec, device, seed)
    ops = make_operands(spec.m, spec.n, spec.k, spec.precision, device, seed=seed)
    if spec.backend == "torch":
        return ops
    if spec.backend == "cpu_blocked":
        run = functools.partial(blocked_matmul, ops.a, ops.b, spec.block_m, spec.block_n,
                                spec.block_k, spec.group_m)
    else:
        from .kernel import launch_tile_matmul

        run = functools.partial(launch_tile_matmul, ops.a, ops.b, spec)
    return MatmulOperands(ops.precision, ops.a, ops.b, run, seed)


def _fp8_operands(spec: MatmulSpec, device: str, seed: int) -> MatmulOperands:
    data = make_operands(spec.m, spec.n, spec.k, "fp32", device, seed=seed)  # seeded fp32 data
    a, b, inv_a, inv_b = fp8_inputs(data.a, data.b)
    del data
    if spec.backend == "torch":
        run = functools.partial(torch._scaled_mm, a, b, scale_a=inv_a, scale_b=inv_b,
                                out_dtype=torch.bfloat16, use_fast_accum=spec.fp8_acc == "fast")
    else:
        from .kernel import launch_tile_matmul

        run = functools.partial(launch_tile_matmul, a, b, spec, scale=(inv_a * inv_b).item())
    return MatmulOperands(parse_precision("fp8"), a, b, run, seed)
