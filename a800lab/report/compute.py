"""The compute claims, each defined once with its judge: tiles and the share of peak, the
precisions' rates and the compute units' utilisation, 2:4 sparsity, power. A winner among
candidates (the best tile, the better guide tile) is judged from its confirmation runs, every
timed figure over RUNS independent runs."""

from ..core.results import Record
from .claims import FAILED, INCONCLUSIVE, METHOD_ON_CPU, RUN, UNTESTABLE, Reading, figure, measured
from .judge import Context, Finding, median_of, noisy, reading_runs
from .rules import beyond_range, combine, confirmed, over_runs, rel_spread, runs_text, undecided

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
                "matmul, timed again in each of three confirmation runs, as % of the card's dense "
                "datasheet peak; cuBLAS at the same shape beside", literal=True),
        Reading("peak of utilization", "the peak over time of the GPU's utilisation",
                unmeasured="NVML's utilisation is the share of time some kernel ran, 100% for "
                "any long matmul whatever its tiles: it says nothing about them")),
    decides="the confirmed best tile's share of the dense peak against 92% in every run",
    steps=("tiles", "tiles_confirm", "guide_tiles", "peak"), needs=("triton",))
def tc_peak(ctx: Context, claim) -> Finding | None:
    tiles = ctx.ok("tiles")
    best, again = ctx.winner("tiles", tiles)
    if not again:
        return None
    picked = (f"best of {len(tiles)} tiles {_tile(best)} ({_shape(best)}), picked at "
              f"{best.throughput:.4g} TFLOP/s and timed again: "
              + ", ".join(f"{r.throughput:.4g}" for r in again) + " TFLOP/s")
    shares = [_pct(r) for r in again]
    if None in shares:
        peak = ctx.one("peak", precision=best.params["precision"])
        if ctx.on_gpu or peak is None:
            return Finding(UNTESTABLE, picked, reason="the lab's specs table has no datasheet "
                           "peak for this device and precision")
        pct = 100 * median_of([(r.throughput, 0.0) for r in again]) / peak.throughput
        return Finding(METHOD_ON_CPU, f"{picked} = {pct:.0f}% of this CPU's measured matmul rate "
                       f"({peak.throughput:.4g} TFLOP/s; CPUs have no datasheet peak)",
                       {"pct_of_measured": figure("best tile, % of measured", pct, "%")},
                       noisy(*again, peak))
    text = f"{picked}; % of the datasheet's {again[0].metrics['datasheet_peak_tflops']:.4g}:"
    figures = {"pct_of_peak": figure("confirmed best tile, % of datasheet", median_of(shares),
                                     "%")}
    cublas = ctx.one("guide_tiles", backend="torch", precision=best.params["precision"])
    if cublas is not None and cublas.metrics.get("pct_of_datasheet_peak") is not None:
        text += f"; cuBLAS at the same shape {cublas.metrics['pct_of_datasheet_peak']:.1f}%"
        figures["cublas_pct"] = figure("cuBLAS, % of datasheet",
                                       cublas.metrics["pct_of_datasheet_peak"], "%")
    return ctx.confirmed(claim, shares, text, figures, noisy(*again))


@measured(
    cites=("G.3.2",), chapter="02", figure="2.5x", low=2.5, about=TC,
    stated="when the matrix block (tile) size is set to 16×16 or 32×8, the measured "
           "computational throughput can be increased 2.5x",
    readings=(
        Reading("to 2.5x the other tiles", "the better of the guide's tiles (16x16x16, and "
                "32x16x16 for 32x8: Triton's tl.dot needs >= 16 per dimension) over the median "
                "of the kernel's other tiles at the same precision and shape, both timed again "
                "in each of three confirmation runs: the sentence compares tile sizes, so the "
                "other tiles are the baseline", literal=True),
        Reading("by 2.5x", "the same ratio read as increased by 2.5x, i.e. to 3.5x"),
        Reading("over no tensor cores", "the better guide tile over the same product without "
                "tensor cores (IEEE fp32 cuBLAS): shown beside, never deciding"),
        Reading("as fragment shapes", "16x16x16 and 32x8x16 as CUDA WMMA fragments",
                unmeasured="Triton picks the mma instruction itself (m16n8k16 on Ampere): no "
                "knob for it")),
    decides="the confirmed better guide tile over the other tiles' median tile against 2.5x "
            "in every run",
    steps=("guide_tiles", "guide_tiles_confirm", "tiles"), needs=("triton",))
def tile_shape(ctx: Context, claim) -> Finding | None:
    guide = [r for r in ctx.ok("guide_tiles") if r.params.get("backend") != "torch"]
    others = sorted(ctx.ok("tiles"), key=lambda r: r.throughput)
    _, again = ctx.winner("guide_tiles", guide)
    middle = others[len(others) // 2] if others else None  # as plan.pick: the median, upper of two
    pairs = ctx.paired(again, ctx.again("guide_tiles_confirm", middle))
    if not pairs:
        return None
    runs = [ctx.rate_ratio(g, m) for g, m in pairs]
    text = (f"{_shape(again[0])}: " + ", ".join(
        f"guide tile {_tile(r)}{NEAREST if r.params['block_n'] < r.params['block_m'] else ''} "
        f"{r.throughput:.4g} TFLOP/s" for r in guide)
        + f"; the better one and the other {len(others)} tiles' median tile {_tile(middle)} "
        f"({middle.throughput:.4g}; best {_tile(others[-1])} {others[-1].throughput:.4g}) "
        "timed again: " + ", ".join(f"{g.throughput:.4g} / {m.throughput:.4g}"
                                    for g, m in pairs) + "; guide tile / median tile:")
    figures = {"ratio": figure("guide tile / other tiles' median", median_of(runs), "x")}
    readings = {"by 2.5x": reading_runs(runs, 3.5)}
    fp32 = ctx.one("guide_tiles", backend="torch", precision="fp32")
    if fp32 is not None:
        vs32 = [ctx.rate_ratio(g, fp32) for g in again]
        status, said = reading_runs(vs32, 2.5)
        readings["over no tensor cores"] = (status, f"{said} over IEEE fp32 "
                                            f"{'cuBLAS' if ctx.on_gpu else 'CPU BLAS'} "
                                            f"({fp32.throughput:.4g} TFLOP/s)")
        figures["over_fp32"] = figure("guide tile / fp32 (no tensor cores)", median_of(vs32),
                                      "x")
    return ctx.confirmed(claim, runs, text, figures, noisy(*again, middle), readings)


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
    decides="the AMP step's MFU against 92% in every run", steps=("amp", "peak"))
def unit_util(ctx: Context, claim) -> Finding | None:
    runs = ctx.runs("amp", model="transformer", precision="fp16")
    amp = next(iter(runs), None)
    if amp is None or amp.metrics.get("achieved_tflops") is None:
        return None
    m = amp.metrics
    text = (f"Transformer ({amp.params['size']}) AMP step: {m['model_flops_per_sample'] / 1e9:.3g}"
            f" GFLOP per sample x {amp.throughput:.4g} samples/s = {m['achieved_tflops']:.3g} "
            "TFLOP/s")
    figures = {"step_tflops": figure("AMP step: achieved TFLOP/s", m["achieved_tflops"],
                                     "TFLOP/s")}
    readings = {}
    units = {p: [_pct(r, "ratio_of_datasheet") for r in ctx.runs("peak", precision=p)]
             for p in ("fp16", "fp32")}
    if all(shares and None not in shares for shares in units.values()):
        units = {p: [(100 * v, 100 * s) for v, s in shares] for p, shares in units.items()}
        readings["each unit's matmul"] = (
            combine(confirmed(shares, 92.0) for shares in units.values()),
            ", ".join(f"{p} {runs_text(shares, '%')} of its datasheet peak"
                      for p, shares in units.items()))
    core = ctx.one("peak", precision="fp32" if not ctx.on_gpu else "fp16")
    if core is not None:
        text += (f" ({100 * m['achieved_tflops'] / core.throughput:.1f}% of the "
                 f"{core.params['precision']} matmul rate measured here, {core.throughput:.4g})")
    if not ctx.on_gpu:
        return Finding(METHOD_ON_CPU, text + " (a CPU has no datasheet peak: MFU needs a GPU)",
                       figures, noisy(amp), readings=readings)
    if m.get("mfu_pct_of_datasheet_peak") is None:
        return Finding(UNTESTABLE, text, figures, reason="the lab's specs table has no fp16 "
                       "datasheet peak for this card", readings=readings)
    mfu = [_pct(r, "mfu_pct_of_datasheet_peak") for r in runs]
    figures["mfu_pct"] = figure("AMP step, MFU % of datasheet", median_of(mfu), "%")
    return ctx.confirmed(claim, mfu, f"{text}; {KERNEL_NOT_STEP}; the step's MFU:", figures,
                         noisy(*runs), readings)


def _rate_ratio(ctx: Context, claim, top: list[str], base: str) -> Finding | None:
    """Each of `top`'s matmul rates over `base`'s, per run; all must hold."""
    bases = ctx.runs("peak", precision=base)
    tops = {p: ctx.paired(ctx.runs("peak", precision=p), bases) for p in top}
    if not bases or not all(tops.values()):
        return None
    ratios = {p: [ctx.rate_ratio(t, b) for t, b in pairs] for p, pairs in tops.items()}
    text = f"{bases[0].params['size']}^3 matmul, TFLOP/s per run: " + "; ".join(
        f"{p} " + ", ".join(f"{r.throughput:.4g}" for r in ctx.runs("peak", precision=p))
        for p in [*top, base])
    figures = {f"{p}_over_{base}": figure(f"{p} / {base} matmul rate", median_of(runs), "x")
               for p, runs in ratios.items()}
    status = combine(confirmed(runs, claim.low) for runs in ratios.values())
    text += "; " + "; ".join(f"{p}/{base} {runs_text(runs)}" for p, runs in ratios.items())
    nearest = min(ratios.values(), key=lambda runs: abs(median_of(runs) - claim.low))
    return Finding(status, text, figures, noisy(*bases, *(t for pairs in tops.values()
                                                           for t, _ in pairs)),
                   undecided(nearest, claim.low) if status == INCONCLUSIVE else "")


G31 = ("the datasheet's figure, in every run, is how 'significant' G.3.1's advantage of the "
       "tensor cores in matrix operations is read (the sentence gives no figure)")


def _datasheet(figure_: str, low: float, stated: str, reading: str, needs: tuple,
               cites: tuple = ()) -> dict:
    """The definition of a datasheet check beside the guide (a ratio of peak matmul rates);
    `cites`: the guide's sentences it tests."""
    return dict(source=DATASHEETS, cites=cites, chapter="03", stated=stated, figure=figure_,
                low=low, about=TC, readings=(Reading("datasheet", reading, literal=True),),
                decides=f"the ratio against {figure_} in every run" + (f"; {G31}" if cites
                                                                       else ""),
                steps=("peak",), needs=needs)


@measured(**_datasheet("8x", 8.0, "TF32 runs float32 matmuls about 8x faster than fp32 (A100: "
                       "156 vs 19.5 dense TFLOP/s)", "cuBLAS at 8192^3: TF32 over IEEE fp32 "
                       "TFLOP/s", ("gpu", "tf32"), ("G.3.1",)))
def tf32_speed(ctx: Context, claim) -> Finding | None:
    return _rate_ratio(ctx, claim, ["tf32"], "fp32")


@measured(**_datasheet("2x", 2.0, "bf16 and fp16 double TF32's matmul rate", "cuBLAS at "
                       "8192^3: bf16 and fp16 over TF32 TFLOP/s, both", ("gpu", "tf32"),
                       ("G.3.1",)))
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
    decides="the speed-up against 2x in every run", steps=("sparsity",),
    needs=("gpu", "sparsity"))
def sparsity_speed(ctx: Context, claim) -> Finding | None:
    runs = ctx.again("sparsity", _largest_sparse(ctx))
    if not runs:
        return None
    # the dense side's samples are not kept: twice the sparse side's spread
    speedups = [((r.metrics.get("speedup") or 0.0), 2 * (r.metrics.get("speedup") or 0.0)
                 * rel_spread(r.time_ms)) for r in runs]
    text = "2:4-sparse over dense on the same pruned matrix: " + ", ".join(
        f"{_shape(r)} {r.metrics.get('speedup'):.3g}x" for r in ctx.ok("sparsity")
        if r.params.get(RUN, 0) == 0) + f"; the largest ({_shape(runs[0])}):"
    return ctx.confirmed(claim, speedups, text, {"speedup": figure(
        "2:4 sparse / dense (largest shape)", median_of(speedups), "x")}, noisy(*runs))


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
    decides="the share of the sparse peak against 85% in every run", steps=("sparsity", "peak"),
    needs=("gpu", "sparsity"))
def sparsity_util(ctx: Context, claim) -> Finding | None:
    runs = ctx.again("sparsity", _largest_sparse(ctx))
    peak = runs and ctx.one("peak", precision=runs[0].params["precision"])
    if not peak:
        return None
    dense = peak.metrics.get("datasheet_tflops")
    if not dense:
        return Finding(UNTESTABLE, "", reason="the lab's specs table has no datasheet peak for "
                       f"this card in {runs[0].params['precision']}")
    shares = [(100 * r.throughput / (2 * dense), 100 * r.throughput / (2 * dense)
               * rel_spread(r.time_ms)) for r in runs]
    pct = median_of(shares)
    return ctx.confirmed(
        claim, shares, f"{_shape(runs[0])} 2:4-sparse: " + ", ".join(
            f"{r.throughput:.4g}" for r in runs) + f" effective TFLOP/s = {pct:.1f}% of the "
        f"sparse peak {2 * dense:.4g} ({2 * pct:.1f}% of the dense {dense:.4g}); per run:",
        {"pct_of_sparse_peak": figure("2:4 sparse, % of sparse datasheet", pct, "%")},
        noisy(*runs), {"share of the dense peak": reading_runs(
            [(2 * v, 2 * sp) for v, sp in shares], 85.0, "%")})


def _energy_text(r: Record) -> str:
    if r.metrics.get("power_w") is None:
        return (f"no energy reading ({r.metrics.get('energy_note')}); CPU time "
                f"{r.metrics.get('cpu_s_per_tflop'):.3g} s per TFLOP")
    return (f"{r.metrics['power_w']:.4g} W, {r.metrics.get('j_per_tflop'):.3g} J per TFLOP "
            f"({r.metrics.get('energy_source')})")


def _power_cut(last: Record, first: Record, key: str = "power_w") -> tuple[float, float]:
    """How much lower `key` is for last than for first, in %, and its spread: the power
    samples' (and for J per TFLOP also the timings') relative half-IQRs, summed."""
    ratio = last.metrics[key] / first.metrics[key]
    rel = sum(rel_spread(r.metrics.get("power_w_samples") or ())
              + (rel_spread(r.time_ms) if key != "power_w" else 0.0) for r in (last, first))
    return 100 * (1 - ratio), 100 * ratio * rel


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
    decides="the power cut from fp32 dense to mixed precision + 2:4 sparse against 18% in every "
            "run, each with the spread of its power samples (above 22% the row says so)",
    steps=("energy", "energy_sparse"), needs=("sparsity",))
def energy(ctx: Context, claim) -> Finding | None:
    chains = [ctx.runs("energy", precision="fp32"), ctx.runs("energy", precision="fp16"),
              ctx.runs("energy_sparse", precision="fp16")]
    chain = [runs[0] for runs in chains if runs]
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
    if any(r.metrics.get("power_w") is None for runs in chains for r in runs):
        return Finding(FAILED, text, reason="no energy reading: " + str(
            chain[0].metrics.get("energy_note")))
    first, middle, last = chain
    pairs = ctx.paired(chains[2], chains[0])
    cuts = [_power_cut(b, a) for b, a in pairs]
    j_cuts = [_power_cut(b, a, "j_per_tflop") for b, a in pairs]
    step1, step2 = (100 * (b.metrics["power_w"] / a.metrics["power_w"] - 1)
                    for a, b in ((first, middle), (middle, last)))
    cut, spread = over_runs(cuts)
    text += (f" (first run: power fp32 -> mixed precision {step1:+.0f}%, then + 2:4 "
             f"{step2:+.0f}%); power cut{beyond_range(cut, spread, 18.0, 22.0, '%')}:")
    return ctx.confirmed(claim, cuts, text, {
        "power_cut_pct": figure("fp32 dense -> mixed + 2:4: power cut", cut, "%"),
        "energy_cut_pct": figure("fp32 dense -> mixed + 2:4: J per TFLOP cut",
                                 median_of(j_cuts), "%")},
        noisy(*chain), {"energy per FLOP": reading_runs(j_cuts, 18.0, "%")})
