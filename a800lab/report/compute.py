"""The compute claims, each defined once with its judge: tiles and the share of peak, the
precisions' rates and the compute units' utilisation, 2:4 sparsity, power. A winner among
candidates (the best tile, the better guide tile) is judged from its confirmation run."""

import statistics

from ..core.results import Record
from .claims import (
    FAILED,
    INCONCLUSIVE,
    METHOD_ON_CPU,
    UNTESTABLE,
    Reading,
    beyond_range,
    combine,
    figure,
    measured,
    rel_spread,
    three_way,
    within_noise,
)
from .claims import with_spread as ws
from .judge import Context, Finding, cut_pct, noisy

TC, ENERGY = "tensor cores", "GPU power"
DATASHEETS = "NVIDIA's datasheets (beside the guide)"
NEAREST = " (32x8's nearest: tl.dot needs >= 16 per dimension)"


def _tile(r: Record) -> str:
    p = r.params
    return f"{p['block_m']}x{p['block_n']}x{p['block_k']}" if "block_m" in p else "cuBLAS"


def _shape(r: Record) -> str:
    return f"{r.params['m']}^3 {r.params['precision']}"


def _pct(r: Record, key: str = "pct_of_datasheet_peak") -> tuple[float, float] | None:
    value = r.metrics.get(key)
    return None if value is None else (value, value * rel_spread(r.time_ms))


@measured(
    cites=("G.1.6",), chapter="02", figure="92%", low=92.0, unit="%", about=TC,
    stated="TensorCore optimization … Matrix block (tiled) computation/instruction pipeline "
           "orchestration … Peak compute utilization reaches 92%",
    readings=(
        Reading("share of peak", "utilization of peak compute: the best tile of the lab's Triton "
                "tile kernel (software-pipelined loads, num_stages >= 3) on a 4096^3 bf16 "
                "matmul, timed again in a confirmation run, as % of the card's dense datasheet "
                "peak; cuBLAS at the same shape beside", literal=True),
        Reading("peak of utilization", "the peak over time of the GPU's utilisation",
                unmeasured="NVML's utilisation is the share of time some kernel ran, 100% for "
                "any long matmul whatever its tiles: it says nothing about them")),
    decides="the confirmed best tile's share of the dense peak against 92%",
    steps=("tiles", "tiles_confirm", "guide_tiles", "peak"), needs=("triton",))
def tc_peak(ctx: Context, claim) -> Finding | None:
    tiles = ctx.ok("tiles")
    best, again = ctx.winner("tiles", tiles)
    if not again:
        return None
    picked = f"best of {len(tiles)} tiles {_tile(best)} ({_shape(best)}), picked at " \
             f"{best.throughput:.4g} TFLOP/s and timed again: {again.throughput:.4g} TFLOP/s"
    share = _pct(again)
    if share is None:
        peak = ctx.one("peak", precision=again.params["precision"])
        if ctx.on_gpu or peak is None:
            return Finding(UNTESTABLE, picked, reason="the lab's specs table has no datasheet "
                           "peak for this device and precision")
        pct = 100 * again.throughput / peak.throughput
        return Finding(METHOD_ON_CPU, f"{picked} = {pct:.0f}% of this CPU's measured matmul rate "
                       f"({peak.throughput:.4g} TFLOP/s; CPUs have no datasheet peak)",
                       {"pct_of_measured": figure("best tile, % of measured", pct, "%")},
                       noisy(again, peak))
    pct, spread = share
    text = f"{picked} = {ws(pct, spread, '%')} of the datasheet's " \
           f"{again.metrics.get('datasheet_peak_tflops'):.4g}"
    figures = {"pct_of_peak": figure("confirmed best tile, % of datasheet", pct, "%")}
    cublas = ctx.one("guide_tiles", backend="torch", precision=again.params["precision"])
    if cublas is not None and cublas.metrics.get("pct_of_datasheet_peak") is not None:
        text += f"; cuBLAS at the same shape {cublas.metrics['pct_of_datasheet_peak']:.1f}%"
        figures["cublas_pct"] = figure("cuBLAS, % of datasheet",
                                       cublas.metrics["pct_of_datasheet_peak"], "%")
    return ctx.finding(claim, pct, spread, text, figures, noisy(again))


@measured(
    cites=("G.3.2",), chapter="02", figure="2.5x", low=2.5, about=TC,
    stated="when the matrix block (tile) size is set to 16×16 or 32×8, the measured "
           "computational throughput can be increased 2.5x",
    readings=(
        Reading("to 2.5x the other tiles", "the better of the guide's tiles (16x16x16, and "
                "32x16x16 for 32x8: Triton's tl.dot needs >= 16 per dimension), timed again in "
                "a confirmation run, over the median of the kernel's other tiles at the same "
                "precision and shape: the sentence compares tile sizes, so the other tiles are "
                "the baseline", literal=True),
        Reading("by 2.5x", "the same ratio read as increased by 2.5x, i.e. to 3.5x"),
        Reading("over no tensor cores", "the better guide tile over the same product without "
                "tensor cores (IEEE fp32 cuBLAS): shown beside, never deciding"),
        Reading("as fragment shapes", "16x16x16 and 32x8x16 as CUDA WMMA fragments",
                unmeasured="Triton picks the mma instruction itself (m16n8k16 on Ampere): no "
                "knob for it")),
    decides="the confirmed better guide tile over the other tiles' median against 2.5x",
    steps=("guide_tiles", "guide_tiles_confirm", "tiles"), needs=("triton",))
def tile_shape(ctx: Context, claim) -> Finding | None:
    guide = [r for r in ctx.ok("guide_tiles") if r.params.get("backend") != "torch"]
    others = sorted(ctx.ok("tiles"), key=lambda r: r.throughput)
    _, again = ctx.winner("guide_tiles", guide)
    if not again or not others:
        return None
    middle = others[len(others) // 2]
    median = statistics.median(r.throughput for r in others)
    ratio = again.throughput / median
    spread = ratio * (rel_spread(again.time_ms) + rel_spread(middle.time_ms))
    parts = [f"{_shape(again)}: " + ", ".join(
        f"guide tile {_tile(r)}{NEAREST if r.params['block_n'] < r.params['block_m'] else ''} "
        f"{r.throughput:.4g} TFLOP/s" for r in guide),
        f"the better one timed again {again.throughput:.4g}; the other {len(others)} tiles' "
        f"median {median:.4g} (best {_tile(others[-1])} {others[-1].throughput:.4g}): "
        f"{ws(ratio, spread)}"]
    figures = {"ratio": figure("guide tile / other tiles' median", ratio, "x")}
    readings = {"by 2.5x": (three_way(ratio, spread, 3.5), f"{ws(ratio, spread)} against 3.5x")}
    fp32 = ctx.one("guide_tiles", backend="torch", precision="fp32")
    if fp32 is not None:
        vs32, s32 = ctx.rate_ratio(again, fp32)
        readings["over no tensor cores"] = (
            three_way(vs32, s32, 2.5), f"{ws(vs32, s32)} over IEEE fp32 "
            f"{'cuBLAS' if ctx.on_gpu else 'CPU BLAS'} ({fp32.throughput:.4g} TFLOP/s)")
        figures["over_fp32"] = figure("guide tile / fp32 (no tensor cores)", vs32, "x")
    return ctx.finding(claim, ratio, spread, "; ".join(parts), figures, noisy(again, middle),
                       readings)


KERNEL_NOT_STEP = ("92% is a single kernel's share of the peak; a whole training step also "
                   "runs normalisation, elementwise kernels, the optimizer and launch gaps, and "
                   "40-60% MFU is a good training figure")


@measured(
    cites=("G.7.3",), chapter="12", figure="92%", low=92.0, unit="%", about=TC,
    stated="through an automatic mixed precision (AMP) framework, while maintaining model "
           "convergence, the combined utilization of the FP16 and FP32 computing units is "
           "raised to 92%",
    readings=(
        Reading("a training step's", "model FLOPs utilisation of the GPT-2-small-shaped "
                "Transformer's AMP training step: its forward and backward FLOPs (counted by "
                "torch's FlopCounterMode) x samples/s, as % of the card's dense fp16 datasheet "
                "peak (the sentence is about AMP training)", literal=True),
        Reading("each unit's matmul", "cuBLAS at 8192^3 in fp16 and in IEEE fp32, each as % of "
                "its own datasheet peak: both must reach 92%")),
    decides="the AMP step's MFU against 92%", steps=("amp", "peak"))
def unit_util(ctx: Context, claim) -> Finding | None:
    amp = ctx.one("amp", model="transformer", precision="fp16")
    if amp is None or amp.metrics.get("achieved_tflops") is None:
        return None
    m = amp.metrics
    text = (f"Transformer ({amp.params['size']}) AMP step: {m['model_flops_per_sample'] / 1e9:.3g}"
            f" GFLOP per sample x {amp.throughput:.4g} samples/s = {m['achieved_tflops']:.3g} "
            "TFLOP/s")
    figures = {"step_tflops": figure("AMP step: achieved TFLOP/s", m["achieved_tflops"],
                                     "TFLOP/s")}
    readings = {}
    units = {p: ctx.one("peak", precision=p) for p in ("fp16", "fp32")}
    shares = {p: _pct(r, "ratio_of_datasheet") for p, r in units.items() if r is not None}
    if all(shares.values()) and len(shares) == 2:
        shares = {p: (100 * v, 100 * s) for p, (v, s) in shares.items()}
        readings["each unit's matmul"] = (
            combine(three_way(v, s, 92.0) for v, s in shares.values()),
            ", ".join(f"{p} {ws(v, s, '%')} of its datasheet peak"
                      for p, (v, s) in shares.items()))
    core = ctx.one("peak", precision="fp32" if not ctx.on_gpu else "fp16")
    if core is not None:
        text += (f" ({100 * m['achieved_tflops'] / core.throughput:.1f}% of the "
                 f"{core.params['precision']} matmul rate measured here, {core.throughput:.4g})")
    pct = m.get("mfu_pct_of_datasheet_peak")
    if not ctx.on_gpu:
        return Finding(METHOD_ON_CPU, text + " (a CPU has no datasheet peak: MFU needs a GPU)",
                       figures, noisy(amp), readings=readings)
    if pct is None:
        return Finding(UNTESTABLE, text, figures, reason="the lab's specs table has no fp16 "
                       "datasheet peak for this card", readings=readings)
    spread = pct * rel_spread(amp.time_ms)
    figures["mfu_pct"] = figure("AMP step, MFU % of datasheet", pct, "%")
    return ctx.finding(claim, pct, spread, f"{text} = {ws(pct, spread, '%')} MFU; "
                       f"{KERNEL_NOT_STEP}", figures, noisy(amp), readings)


def _rate_ratio(ctx: Context, claim, top: list[str], base: str) -> Finding | None:
    base_rec = ctx.one("peak", precision=base)
    tops = [(p, ctx.one("peak", precision=p)) for p in top]
    if base_rec is None or any(r is None for _, r in tops):
        return None
    ratios = {p: ctx.rate_ratio(r, base_rec) for p, r in tops}
    text = f"{base_rec.params['size']}^3 matmul: " + ", ".join(
        f"{p} {r.throughput:.4g}" for p, r in [*tops, (base, base_rec)]) + " TFLOP/s; " + \
        ", ".join(f"{p}/{base} {ws(v, s)}" for p, (v, s) in ratios.items())
    figures = {f"{p}_over_{base}": figure(f"{p} / {base} matmul rate", v, "x")
               for p, (v, _) in ratios.items()}
    status = combine(three_way(v, s, claim.low) for v, s in ratios.values())
    nearest = min(ratios.values(), key=lambda vs: abs(vs[0] - claim.low))
    return Finding(status, text, figures, noisy(base_rec, *(r for _, r in tops)),
                   within_noise(*nearest, claim.low) if status == INCONCLUSIVE else "")


def _datasheet(figure_: str, low: float, stated: str, reading: str, needs: tuple) -> dict:
    """The definition of a datasheet check beside the guide (a ratio of peak matmul rates)."""
    return dict(source=DATASHEETS, cites=(), chapter="03", stated=stated, figure=figure_,
                low=low, about=TC, readings=(Reading("datasheet", reading, literal=True),),
                decides=f"the ratio against {figure_}", steps=("peak",), needs=needs)


@measured(**_datasheet("8x", 8.0, "TF32 runs float32 matmuls about 8x faster than fp32 (A100: "
                       "156 vs 19.5 dense TFLOP/s)", "cuBLAS at 8192^3: TF32 over IEEE fp32 "
                       "TFLOP/s", ("gpu", "tf32")))
def tf32_speed(ctx: Context, claim) -> Finding | None:
    return _rate_ratio(ctx, claim, ["tf32"], "fp32")


@measured(**_datasheet("2x", 2.0, "bf16 and fp16 double TF32's matmul rate", "cuBLAS at "
                       "8192^3: bf16 and fp16 over TF32 TFLOP/s, both", ("gpu", "tf32")))
def half_speed(ctx: Context, claim) -> Finding | None:
    return _rate_ratio(ctx, claim, ["bf16", "fp16"], "tf32")


@measured(**_datasheet("2x", 2.0, "fp8 doubles bf16's matmul rate (Hopper)", "torch._scaled_mm "
                       "at 8192^3: fp8 e4m3 over bf16 TFLOP/s", ("gpu", "fp8")))
def fp8_speed(ctx: Context, claim) -> Finding | None:
    return _rate_ratio(ctx, claim, ["fp8"], "bf16")


def _largest_sparse(ctx: Context) -> Record | None:
    recs = ctx.ok("sparsity", precision="fp16") or ctx.ok("sparsity")
    return max(recs, key=lambda r: r.params["m"], default=None)


@measured(
    source=DATASHEETS, cites=(), chapter="03", figure="2x", low=2.0, about=TC,
    stated="2:4 structured sparsity doubles the matmul rate",
    readings=(Reading("datasheet", "8192^3 fp16: the 2:4-sparse matmul's time against the "
                      "dense one's on the same pruned matrix", literal=True),),
    decides="the speed-up against 2x", steps=("sparsity",), needs=("gpu", "sparsity"))
def sparsity_speed(ctx: Context, claim) -> Finding | None:
    largest = _largest_sparse(ctx)
    if largest is None:
        return None
    speedup = largest.metrics.get("speedup") or 0.0
    spread = 2 * speedup * rel_spread(largest.time_ms)   # the dense side's samples are not kept
    text = "2:4-sparse over dense on the same pruned matrix: " + ", ".join(
        f"{_shape(r)} {r.metrics.get('speedup'):.3g}x" for r in ctx.ok("sparsity"))
    return ctx.finding(claim, speedup, spread, text, {"speedup": figure(
        "2:4 sparse / dense (largest shape)", speedup, "x")}, noisy(largest))


@measured(
    cites=("G.3.4",), chapter="03", figure="85%", low=85.0, unit="%", about=TC,
    stated="combining a structured zero-value compression algorithm can further release "
           "TensorCore's parallel-computing potential and, together with the CUDA Core's "
           "asynchronous pipeline scheduling, achieve a peak computing-unit utilization "
           "exceeding 85%",
    readings=(
        Reading("share of the sparse peak", "the 2:4-sparse matmul's effective TFLOP/s (dense "
                "FLOPs counted) at 8192^3 fp16 as % of the sparse tensor cores' datasheet peak "
                "(twice the dense): a utilisation cannot exceed 100%", literal=True),
        Reading("share of the dense peak", "the same rate as % of the dense peak (it can pass "
                "100%, so it is no utilisation): shown beside")),
    decides="the share of the sparse peak against 85%", steps=("sparsity", "peak"),
    needs=("gpu", "sparsity"))
def sparsity_util(ctx: Context, claim) -> Finding | None:
    largest = _largest_sparse(ctx)
    peak = largest and ctx.one("peak", precision=largest.params["precision"])
    if peak is None:
        return None
    dense = peak.metrics.get("datasheet_tflops")
    if not dense:
        return Finding(UNTESTABLE, "", reason="the lab's specs table has no datasheet peak for "
                       f"this card in {largest.params['precision']}")
    pct = 100 * largest.throughput / (2 * dense)
    spread = pct * rel_spread(largest.time_ms)
    return ctx.finding(
        claim, pct, spread, f"{_shape(largest)} 2:4-sparse: {largest.throughput:.4g} effective "
        f"TFLOP/s = {ws(pct, spread, '%')} of the sparse peak {2 * dense:.4g} "
        f"({2 * pct:.1f}% of the dense {dense:.4g})",
        {"pct_of_sparse_peak": figure("2:4 sparse, % of sparse datasheet", pct, "%")},
        noisy(largest), {"share of the dense peak": (three_way(2 * pct, 2 * spread, 85.0),
                                                     f"{ws(2 * pct, 2 * spread, '%')}")})


def _energy_text(r: Record) -> str:
    if r.metrics.get("power_w") is None:
        return (f"no energy reading ({r.metrics.get('energy_note')}); CPU time "
                f"{r.metrics.get('cpu_s_per_tflop'):.3g} s per TFLOP")
    return (f"{r.metrics['power_w']:.4g} W, {r.metrics.get('j_per_tflop'):.3g} J per TFLOP "
            f"({r.metrics.get('energy_source')})")


@measured(
    cites=("G.8.4",), chapter="10", figure="18-22%", low=18.0, high=22.0, unit="%",
    about=ENERGY,
    stated="applying the mixed-precision training solution not only reduces GPU memory usage "
           "but can also, together with TensorCore's sparse-computation features, reduce "
           "single-card floating-point-operation power consumption by 18%-22%",
    readings=(
        Reading("power", "the card's average power in watts (NVML's energy counter over a "
                "metered run) for the same work, an 8192^3 matmul run steadily: fp32 dense -> "
                "mixed precision (fp16 in, fp32 accumulation) -> mixed precision + 2:4 sparse; "
                "the whole chain's cut decides, each link is shown", literal=True),
        Reading("energy per FLOP", "the same chain in joules per TFLOP (dense FLOPs counted)")),
    decides="the power cut from fp32 dense to mixed precision + 2:4 sparse against 18% (above "
            "22% the row says so)", steps=("energy", "energy_sparse"), needs=("sparsity",))
def energy(ctx: Context, claim) -> Finding | None:
    chain = [r for r in (ctx.one("energy", precision="fp32"), ctx.one("energy", precision="fp16"),
                         ctx.one("energy_sparse", precision="fp16")) if r is not None]
    if not chain:
        return None
    names = ["fp32 dense", "mixed precision", "mixed precision + 2:4"]
    text = "; ".join(f"{n} {r.params['size']}^3: {_energy_text(r)}"
                     for n, r in zip(names, chain, strict=False))
    if not ctx.on_gpu:
        return Finding(METHOD_ON_CPU, text + " (mixed precision and 2:4 sparsity need a GPU's "
                       "tensor cores)", noisy=noisy(*chain))
    if len(chain) < 3:
        return None
    if any(r.metrics.get("power_w") is None for r in chain):
        return Finding(FAILED, text, reason="no energy reading: " + str(
            chain[0].metrics.get("energy_note")))
    first, middle, last = chain
    cut, spread = cut_pct(last, first, lambda r: r.metrics["power_w"])
    step1, step2 = (100 * (b.metrics["power_w"] / a.metrics["power_w"] - 1)
                    for a, b in ((first, middle), (middle, last)))
    j_cut, j_spread = cut_pct(last, first, lambda r: r.metrics["j_per_tflop"])
    text += (f"; power cut {ws(cut, spread, '%')}{beyond_range(cut, spread, 18.0, 22.0, '%')} "
             f"(power fp32 -> mixed precision {step1:+.0f}%, then + 2:4 {step2:+.0f}%)")
    return ctx.finding(claim, cut, spread, text, {
        "power_cut_pct": figure("fp32 dense -> mixed + 2:4: power cut", cut, "%"),
        "energy_cut_pct": figure("fp32 dense -> mixed + 2:4: J per TFLOP cut", j_cut, "%")},
        noisy(*chain), {"energy per FLOP": (three_way(j_cut, j_spread, 18.0),
                                            f"cut {ws(j_cut, j_spread, '%')}")})
