"""Tiled matmul: the Triton kernel under the interpreter, config refusals, the CPU stand-in, the
point function in a sweep, per-point figures and the triton.Config export."""

import json
import os
import re
import subprocess
import sys
import textwrap

import pytest
import torch

from a800lab.core import memory as memory_mod
from a800lab.core.cancel import Cancelled, CancelToken
from a800lab.core.operands import make_operands
from a800lab.core.precision import parse_precision
from a800lab.core.specs import ARCH_LIMITS
from a800lab.core.sweep import run_sweep
from a800lab.workloads.matmul import MatmulSpec
from a800lab.workloads.tiles import kernel as tile_kernel
from a800lab.workloads.tiles import point as tiled_matmul
from a800lab.workloads.tiles.config import check_config, export_config, smem_limit
from a800lab.workloads.tiles.point import (
    CPU_STAND_IN,
    blocked_matmul,
    default_tile_backend,
    peak_figures,
    tile_order,
    tiled_matmul_point,
)

# ---- the Triton kernel under the interpreter (a fresh process: TRITON_INTERPRET is read when
# ---- the kernel module is imported) --------------------------------------------------------

INTERPRETER_SCRIPT = textwrap.dedent("""
    import json
    import torch
    from a800lab.core.operands import make_operands
    from a800lab.workloads.tiles import kernel as tile_kernel
    from a800lab.workloads.matmul import MatmulSpec
    from a800lab.workloads.tiles.config import check_config
    from a800lab.workloads.tiles.point import tiled_matmul_point

    # edges: ragged tiles on every axis, a single element, K not a multiple of block_k, and 5
    # tile rows so that a group of 2 or 3 rows leaves a shorter last group
    SHAPES = [(33, 47, 29), (1, 1, 1), (64, 48, 100), (80, 48, 40)]
    TILES = [(16, 16, 16, 1), (32, 16, 32, 4), (16, 32, 16, 2), (64, 64, 32, 8)]
    out = {"interpreted": tile_kernel.INTERPRETED, "cases": [], "grouping": []}

    def run(ops, shape, precision, bm, bn, bk, group_m):
        spec = MatmulSpec(*shape, precision, "triton", block_m=bm, block_n=bn, block_k=bk,
                          group_m=group_m)
        return tile_kernel.launch_tile_matmul(ops.a, ops.b, spec)

    for precision, shapes, tiles in (("fp32", SHAPES, TILES), ("fp16", SHAPES, TILES),
                                     ("bf16", SHAPES[::2], TILES[:2])):
        for shape in shapes:
            ops = make_operands(*shape, precision, "cpu", seed=1)
            for tile in tiles:
                c = run(ops, shape, precision, *tile)
                out["cases"].append({"precision": precision, "shape": shape, "tile": tile,
                                     "rel_error": ops.rel_error(c), "dtype": str(c.dtype),
                                     "out_shape": list(c.shape)})
            if precision != "bf16":
                first = run(ops, shape, precision, 16, 16, 16, 1)  # row-major order
                for group_m in (2, 3, 8):
                    same = torch.equal(first, run(ops, shape, precision, 16, 16, 16, group_m))
                    out["grouping"].append({"shape": shape, "group_m": group_m, "equal": same})

    # the Hopper levers: a persistent loop (3 programs over 6 tiles) and TMA descriptor loads,
    # at shapes ragged against the tile (16-byte rows, as TMA needs); fp8's column-major B too
    out["variants"] = []
    for precision in ("fp32", "fp16"):
        ops = make_operands(40, 56, 24, precision, "cpu", seed=3)
        for schedule, loads in (("persistent", "pointer"), ("tile", "tma"),
                                ("persistent", "tma")):
            spec = MatmulSpec(40, 56, 24, precision, "triton", block_m=16, block_n=32,
                              block_k=16, group_m=2, schedule=schedule, loads=loads)
            c = tile_kernel.launch_tile_matmul(ops.a, ops.b, spec)
            out["variants"].append({"precision": precision, "schedule": schedule,
                                    "loads": loads, "rel_error": ops.rel_error(c)})
    column = make_operands(32, 48, 64, "fp16", "cpu", seed=4)
    b_column_major = column.b.t().contiguous().t()
    spec = MatmulSpec(32, 48, 64, "fp16", "triton", block_m=16, block_n=16, block_k=32,
                      loads="tma")
    c = tile_kernel.launch_tile_matmul(column.a, b_column_major, spec)
    out["variants"].append({"precision": "fp16", "schedule": "tile", "loads": "tma",
                            "b": "column-major", "rel_error": column.rel_error(c)})

    # bf16 without widening: the interpreter multiplies the raw 16-bit patterns
    ops = make_operands(33, 47, 29, "bf16", "cpu", seed=1)
    tile_kernel.INTERPRETED = False
    out["bf16_unwidened_error"] = ops.rel_error(run(ops, (33, 47, 29), "bf16", 16, 16, 16, 1))
    tile_kernel.INTERPRETED = True

    point = tiled_matmul_point(33, 47, 29, "fp16", "triton", block_m=16, block_n=16,
                               block_k=16, device="cpu", budget_s=0.0)
    out["point"] = {k: point[k] for k in ("rel_error", "backend_label", "smem_limit_source",
                                          "tile_config", "tiles_launched")}
    out["point"]["timed"] = point["timing"].device
    try:
        check_config(MatmulSpec(64, 64, 64, "tf32", "triton"), "cpu")
    except ValueError as exc:
        out["tf32_refusal"] = str(exc)
    print(json.dumps(out))
""")


@pytest.fixture(scope="module")
def interpreted():
    import numpy
    import triton

    if triton.__version__.startswith("3.6.") and int(numpy.__version__.split(".")[1]) >= 4:
        pytest.skip(f"Triton {triton.__version__}'s interpreter cannot take a runtime loop bound"
                    f" on NumPy {numpy.__version__} (int() of a 1-element array; Triton 3.7 "
                    "squeezes it): the compiled kernel is unaffected")
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run([sys.executable, "-c", INTERPRETER_SCRIPT], capture_output=True,
                          text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_kernel_really_ran_under_the_interpreter(interpreted):
    assert interpreted["interpreted"] is True
    assert {c["precision"] for c in interpreted["cases"]} == {"fp32", "fp16", "bf16"}
    assert len(interpreted["cases"]) == 2 * 4 * 4 + 2 * 2


@pytest.mark.parametrize("precision, bound", [("fp32", 1e-6), ("fp16", 1e-3), ("bf16", 1e-2)])
def test_kernel_matches_float64_on_edge_shapes_and_configs(interpreted, precision, bound):
    cases = [c for c in interpreted["cases"] if c["precision"] == precision]
    rtol = parse_precision(precision).rtol
    dtype = str(parse_precision(precision).dtype)
    for case in cases:
        assert case["rel_error"] <= min(bound, rtol), case  # rounding only: far below tolerance
        assert case["dtype"] == dtype and case["out_shape"] == case["shape"][:2], case


def test_persistent_and_tma_variants_match_float64_under_the_interpreter(interpreted):
    variants = interpreted["variants"]
    assert len(variants) == 7
    for case in variants:
        assert case["rel_error"] <= (1e-6 if case["precision"] == "fp32" else 1e-3), case


def test_grouped_order_only_reorders_tiles(interpreted):
    # each tile's sum runs in the same K order whatever the launch order: bitwise equal
    assert len(interpreted["grouping"]) == 2 * 4 * 3
    assert all(g["equal"] for g in interpreted["grouping"]), interpreted["grouping"]


def test_bf16_is_widened_in_the_interpreter_because_its_dot_is_garbage(interpreted):
    assert interpreted["bf16_unwidened_error"] > 1.0


def test_point_under_the_interpreter_is_labelled_not_a_gpu_time(interpreted):
    point = interpreted["point"]
    assert point["rel_error"] < 1e-3 and point["timed"] == "cpu"
    assert "Triton interpreter" in point["backend_label"] and "not a GPU time" in \
        point["backend_label"]
    assert point["smem_limit_source"].startswith("Triton interpreter")
    assert point["tile_config"] == "16x16x16, group_m=8, 4 warps, 3 stages"
    assert point["tiles_launched"] == 3 * 3
    assert "interpreter" in interpreted["tf32_refusal"] and "'fp32'" in \
        interpreted["tf32_refusal"]


# ---- refusals --------------------------------------------------------------------------------

def _triton(precision="fp16", **tile):
    return MatmulSpec(4096, 4096, 4096, precision, "triton", **tile)


def test_shared_memory_over_the_limit_names_the_numbers_and_what_to_try():
    # the compiler's figure: 4 of 5 stages buffered on mma.sync = 4 x 256 x 64 x 2 B = 128 KiB
    spec = _triton(block_m=128, block_n=128, block_k=64, num_stages=5)
    facts = check_config(spec, capability=(8, 0))  # A800/A100: 163 KiB per block
    assert facts["smem_bytes"] == 131072 and facts["smem_limit_bytes"] == 166912
    assert facts["mma"] == "mma.sync" and facts["pipeline"] == "cp.async"
    assert "sm_80" in facts["smem_limit_source"] and "Triton" in facts["facts_source"]
    with pytest.raises(ValueError) as refused:
        check_config(spec, capability=(8, 6))  # A10 / RTX 30xx: 99 KiB
    message = str(refused.value)
    assert message.startswith("refused for sm_86 (Triton ")
    assert ("compiler for sm_86): shared memory: 131,072 B (128 KiB) exceeds the sm_86 limit "
            "of 101,376 B (99 KiB) per thread block") in message
    assert message.endswith("use num_stages=4 or fewer, or a smaller block_k")
    with pytest.raises(ValueError, match=r"131,072 B .* exceeds this device's limit of 65,536 B"):
        check_config(spec, capability=(8, 0), smem_limit_bytes=65536)


def test_a800_and_h100_limits_come_from_the_table():
    assert smem_limit(capability=(8, 0))[0] == 163 * 1024 == \
        ARCH_LIMITS[(8, 0)].smem_per_block_optin_bytes
    assert smem_limit(capability=(9, 0))[0] == 232448
    with pytest.raises(ValueError, match=r"compute capability 6\.1 .*pass smem_limit_bytes="):
        smem_limit(capability=(6, 1))
    with pytest.raises(ValueError, match="a CPU has no GPU shared memory"):
        smem_limit("cpu")


def test_fp8_is_refused_on_the_a800_with_the_reason():
    with pytest.raises(ValueError) as refused:
        check_config(_triton("fp8", block_k=64), capability=(8, 0))
    message = str(refused.value)
    assert "fp8 needs compute capability >= 8.9, this GPU has 8.0" in message
    assert "Ampere cards such as the A800 and A100 (8.0) have none" in message
    assert "agrees: CompilationError" in message and "fp8e4nv not supported" in message


def test_precisions_a_card_lacks_are_refused_for_every_back_end():
    with pytest.raises(ValueError, match="tf32 needs compute capability >= 8.0, this GPU has "
                                         "7.5; use 'fp32' instead"):
        check_config(_triton("tf32"), capability=(7, 5))
    with pytest.raises(ValueError, match="bf16 needs compute capability >= 8.0"):
        check_config(MatmulSpec(64, 64, 64, "bf16"), capability=(7, 0))


def test_triton_without_a_gpu_says_so_and_what_to_use():
    if tile_kernel.INTERPRETED:
        pytest.skip("TRITON_INTERPRET=1 in this process: the interpreter runs the kernel")
    with pytest.raises(ValueError) as refused:
        check_config(_triton(), "cpu")
    message = str(refused.value)
    assert message.startswith("backend='triton' runs the tile kernel on a CUDA GPU, but ")
    assert "backend='cpu_blocked'" in message and "TRITON_INTERPRET=1" in message


def test_the_cpu_stand_in_refuses_a_gpu():
    with pytest.raises(ValueError, match="runs on the CPU only; on a GPU use backend='triton'"):
        check_config(MatmulSpec(64, 64, 64, backend="cpu_blocked"), capability=(8, 0))


@pytest.mark.parametrize("kwargs, fragment", [
    ({"backend": "cutlass"}, "backend='cutlass' is not a choice"),
    ({"backend": "torch", "block_m": 64}, "only apply to backend='triton'"),
    ({"backend": "triton", "block_m": 96}, "block_m=96 must be a power of two >= 16"),
    ({"backend": "cpu_blocked", "block_k": 8}, "block_k=8 must be a power of two >= 16"),
    ({"backend": "triton"}, "backend='triton' runs the tile kernel on a CUDA GPU"),
])
def test_a_refused_config_never_launches(monkeypatch, kwargs, fragment):
    if tile_kernel.INTERPRETED:
        pytest.skip("TRITON_INTERPRET=1 in this process: the interpreter runs the kernel")
    launched = []
    monkeypatch.setattr(tile_kernel, "launch_tile_matmul", lambda *a, **k: launched.append(a))
    monkeypatch.setattr(tiled_matmul, "blocked_matmul", lambda *a: launched.append(a))
    with pytest.raises(ValueError, match=re.escape(fragment)):
        tiled_matmul_point(64, 64, 64, "fp16", device="cpu", **kwargs)
    assert launched == []


def test_triton_refusing_a_config_at_compile_time_is_a_value_error(monkeypatch):
    from triton.runtime.errors import OutOfResources

    class Refusing:
        def __getitem__(self, grid):
            def launch(*args, **kwargs):
                raise OutOfResources(200000, 166912, "shared memory")
            return launch

    monkeypatch.setattr(tile_kernel, "tile_matmul_kernel", Refusing())
    spec = MatmulSpec(64, 64, 64, "fp16", "triton")
    a = torch.zeros(64, 64, dtype=torch.float16)
    with pytest.raises(ValueError, match=r"Triton refused the tile .*'block_m': 128.* when "
                                         r"compiling it: out of resource: shared memory"):
        tile_kernel.launch_tile_matmul(a, a, spec)


# ---- the CPU stand-in ------------------------------------------------------------------------

def test_tile_order_visits_every_tile_once_in_grouped_order():
    assert tile_order(64, 48, 16, 16, 1) == tuple((i, j) for i in range(4) for j in range(3))
    grouped = tile_order(64, 48, 16, 16, 2)  # 4 x 3 tiles, 2 rows per group
    assert grouped[:6] == ((0, 0), (1, 0), (0, 1), (1, 1), (0, 2), (1, 2))
    assert tile_order(48, 48, 16, 16, 2)[6:] == ((2, 0), (2, 1), (2, 2))  # short last group
    for group_m in (1, 2, 3, 8):
        order = tile_order(80, 47, 16, 16, group_m)
        assert sorted(order) == [(i, j) for i in range(5) for j in range(3)]


@pytest.mark.parametrize("precision", ["fp32", "fp16", "bf16", "fp64"])
@pytest.mark.parametrize("shape", [(33, 47, 29), (1, 1, 1), (64, 48, 100)])
def test_cpu_stand_in_matches_float64(precision, shape):
    ops = make_operands(*shape, precision, "cpu", seed=2)
    prec = parse_precision(precision)
    for tile in ((16, 16, 16, 1), (32, 16, 64, 2), (128, 128, 128, 1)):
        c = blocked_matmul(ops.a, ops.b, *tile)
        assert c.dtype == prec.dtype and c.shape == shape[:2]
        assert ops.rel_error(c) <= prec.rtol / 10  # rounding only


def test_cpu_stand_in_computes_over_its_tiles(monkeypatch):
    ops = make_operands(64, 48, 100, "fp32", "cpu")
    products = []
    real_addmm = torch.Tensor.addmm_

    def counting(acc, a, b):
        products.append((tuple(a.shape), tuple(b.shape)))
        return real_addmm(acc, a, b)

    monkeypatch.setattr(torch.Tensor, "addmm_", counting)
    c16 = blocked_matmul(ops.a, ops.b, 16, 16, 32, 1)
    assert len(products) == 4 * 3 * 4  # tiles x K steps (100 = 3 x 32 + 4)
    assert products[0] == ((16, 32), (32, 16)) and products[3] == ((16, 4), (4, 16))
    products.clear()
    c64 = blocked_matmul(ops.a, ops.b, 64, 64, 128, 1)
    assert products == [((64, 100), (100, 48))]
    assert torch.allclose(c16, c64, rtol=1e-5, atol=1e-5)  # same product, other sums


def test_tile_choice_changes_the_measured_cpu_time():
    common = {"m": 256, "n": 256, "k": 256, "backend": "cpu_blocked", "device": "cpu",
              "budget_s": 0.02}
    saved = torch.get_num_threads()
    torch.set_num_threads(1)  # a busy 2-core machine stalls multi-threaded BLAS calls
    try:
        small = tiled_matmul_point(**common, block_m=16, block_n=16, block_k=16)
        large = tiled_matmul_point(**common, block_m=128, block_n=128, block_k=128)
    finally:
        torch.set_num_threads(saved)
    # 4096 tile products of 16^3 against 8 of 128^3: per-call overhead dominates the first
    # (about 50x here); the fastest call is the figure least disturbed by other work
    assert small["timing"].min_ms > 3 * large["timing"].min_ms
    assert small["rel_error"] < 1e-5 and large["rel_error"] < 1e-5


# ---- the point function ----------------------------------------------------------------------

def test_point_on_cpu_defaults_to_the_labelled_stand_in():
    assert default_tile_backend("cpu") == "cpu_blocked"
    point = tiled_matmul_point(96, 80, 64, device="cpu", budget_s=0.01)
    assert point["throughput"] == point["tflops"] > 0 and point["throughput_unit"] == "TFLOP/s"
    assert point["backend_label"] == CPU_STAND_IN and "not a TensorCore kernel" in CPU_STAND_IN
    assert point["tile_config"] == "128x128x128, group_m=1" and point["tiles_launched"] == 1
    assert point["flop_count"] == 2 * 96 * 80 * 64
    assert point["operand_bytes"] == (96 * 64 + 64 * 80 + 96 * 80) * 4
    assert point["arithmetic_intensity"] == pytest.approx(point["flop_count"]
                                                          / point["bytes_moved"])
    assert point["pct_of_datasheet_peak"] is None and point["datasheet_peak_tflops"] is None
    assert "smem_bytes" not in point and "registers" not in point


def test_torch_back_end_through_the_same_point():
    point = tiled_matmul_point(64, 64, 64, backend="torch", device="cpu", budget_s=0.01)
    assert point["backend_label"] == "torch.matmul (CPU BLAS)" and point["tiles_launched"] is None
    assert point["rel_error"] < 1e-5


def test_sweep_records_ok_wrong_and_oom(monkeypatch):
    axes = {"block_m": [16, 64], "precision": ["fp32", "bf16"]}
    fixed = {"m": 64, "n": 48, "k": 40, "backend": "cpu_blocked", "budget_s": 0.005}
    res = run_sweep(tiled_matmul_point, axes, fixed=fixed, workload="tiles", device="cpu")
    assert [r.outcome for r in res.records] == ["ok"] * 4
    assert all(r.metrics["backend_label"] == CPU_STAND_IN for r in res.records)
    assert res.records[0].metrics["tile_config"] == "16x128x128, group_m=1"

    timed = []
    monkeypatch.setattr(tiled_matmul, "measure", lambda *a, **k: timed.append(a))
    monkeypatch.setattr(tiled_matmul, "blocked_matmul",
                        lambda a, b, *tile: torch.full((a.shape[0], b.shape[1]), 3.0))
    wrong = run_sweep(tiled_matmul_point, {"block_m": [16]}, fixed=fixed, device="cpu")
    record = wrong.records[0]
    assert record.outcome == "wrong" and record.throughput is None and timed == []
    assert record.metrics["rel_error"] > 0.5 and "not timed" in record.message
    assert "16x128x128, group_m=1" in record.message

    allocated = []
    monkeypatch.setattr(memory_mod, "available_bytes", lambda device: 2**30)
    monkeypatch.setattr(tiled_matmul, "make_operands", lambda *a, **k: allocated.append(a))
    oom = run_sweep(tiled_matmul_point, {"m": [40000]}, fixed={"n": 40000, "k": 40000},
                    device="cpu")
    assert oom.records[0].outcome == "oom" and allocated == []
    assert "a 40000x40000x40000 fp32 matmul needs" in oom.records[0].message


def test_a_refused_config_is_an_error_record_with_its_message():
    res = run_sweep(tiled_matmul_point, {"num_warps": [4]},
                    fixed={"m": 64, "n": 64, "k": 64, "backend": "cpu_blocked"}, device="cpu")
    record = res.records[0]
    assert record.outcome == "error" and "have no meaning for backend='cpu_blocked'" in \
        record.message


def test_cancelled_point_raises():
    token = CancelToken()
    token.cancel()
    with pytest.raises(Cancelled):
        tiled_matmul_point(64, 64, 64, device="cpu", cancel=token)


def test_peak_figures_place_the_point_on_the_card_and_its_roofline():
    a800 = "NVIDIA A800-SXM4-80GB"  # 312 TFLOP/s bf16 dense, 2039 GB/s
    big = MatmulSpec(4096, 4096, 4096, "bf16", "triton")
    figures = peak_figures(156.0, big, a800)
    assert figures["datasheet_peak_tflops"] == 312.0
    assert figures["pct_of_datasheet_peak"] == pytest.approx(50.0)
    assert figures["roofline_bound"] == "compute" and figures["roofline_tflops"] == 312.0
    skinny = MatmulSpec(4096, 4096, 16, "bf16", "triton")  # ~7.9 FLOP per byte
    memory_bound = peak_figures(10.0, skinny, a800)
    assert memory_bound["roofline_bound"] == "memory"
    assert memory_bound["roofline_tflops"] == pytest.approx(
        skinny.arithmetic_intensity * 2039.0 / 1e3)
    assert peak_figures(1.0, big, None)["pct_of_datasheet_peak"] is None
    assert peak_figures(1.0, big, "Some Unknown GPU")["datasheet_peak_tflops"] is None
    fp8 = peak_figures(1.0, MatmulSpec(64, 64, 64, "fp8", "triton", block_k=32), a800)
    assert fp8["datasheet_peak_tflops"] is None  # the A800 has no fp8


# ---- export ----------------------------------------------------------------------------------

def test_export_gives_the_dict_and_pasteable_triton_config():
    import triton

    spec = MatmulSpec(4096, 4096, 4096, "bf16", "triton", block_m=128, block_n=256, block_k=64,
                      group_m=8, num_warps=8, num_stages=3)
    config, source = export_config(spec)
    assert config == {"BLOCK_SIZE_M": 128, "BLOCK_SIZE_N": 256, "BLOCK_SIZE_K": 64,
                      "GROUP_SIZE_M": 8, "num_warps": 8, "num_stages": 3}
    assert source == ("triton.Config({'BLOCK_SIZE_M': 128, 'BLOCK_SIZE_N': 256, "
                      "'BLOCK_SIZE_K': 64, 'GROUP_SIZE_M': 8}, num_warps=8, num_stages=3)")
    pasted = eval(source, {"triton": triton})  # what the user's @triton.autotune list gets
    assert pasted.kwargs == {"BLOCK_SIZE_M": 128, "BLOCK_SIZE_N": 256, "BLOCK_SIZE_K": 64,
                             "GROUP_SIZE_M": 8}
    assert (pasted.num_warps, pasted.num_stages) == (8, 3)
    with pytest.raises(ValueError, match="is not a Triton config"):
        export_config(MatmulSpec(64, 64, 64, backend="cpu_blocked"))


# ---- on a GPU --------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["fp32", "tf32", "fp16", "bf16", "fp8"])
def test_kernel_on_the_gpu_matches_float64(precision):
    capability = torch.cuda.get_device_capability()
    if precision == "fp8" and capability < (8, 9):
        pytest.skip(f"fp8 needs compute capability 8.9+, this GPU has {capability}")
    shape = (1024, 1024, 1024) if precision == "fp8" else (333, 477, 291)  # ragged edges
    point = tiled_matmul_point(*shape, precision, "triton", block_m=64, block_n=64,
                               block_k=32, device="cuda", budget_s=0.02)
    assert "outcome" not in point, point.get("message")  # checked within the tolerance
    assert point["tflops"] > 0 and point["smem_bytes"] <= point["smem_limit_bytes"]
    if precision == "fp32":
        assert point["rel_error"] < 1e-5  # input_precision="ieee": no TF32 rounding
    if precision == "tf32":
        assert point["rel_error"] > 1e-5  # input_precision="tf32" really engaged


@pytest.mark.gpu
def test_the_device_limit_matches_the_table():
    capability = torch.cuda.get_device_capability()
    limit, source = smem_limit("cuda")
    if capability in ARCH_LIMITS:
        assert limit == ARCH_LIMITS[capability].smem_per_block_optin_bytes, source
    # over every card's limit (294,912 B in wgmma's 6 buffers on sm_90, 245,760 B in
    # mma.sync's 5 on sm_80) yet quick to compile (0.4-0.6 s compile-only here, against 13 s
    # for the 256x256x128 fp32 16-warp config this test refused before: ~29 s of the lease)
    too_big = MatmulSpec(4096, 4096, 4096, "fp16", "triton", block_m=128, block_n=256,
                         block_k=64, num_warps=8, num_stages=6)
    with pytest.raises(ValueError, match="shared memory: .* exceeds"):
        check_config(too_big, "cuda")
