"""Judging the compute claims: tiles and peaks, precisions' rates, 2:4 sparsity, energy per FLOP.

    from a800lab.report.judges_compute import JUDGES
    finding = JUDGES["tile_shape"](ctx, CLAIMS["tile_shape"])   # a Finding, or None

Each function reads the records of its battery steps (a800lab.report.plan_gpu / plan_cpu name
them) through a report.judge.Context and returns the status its numbers give, its measurement
in words and its figures (the names --compare divides).
"""

from __future__ import annotations

from ..core.results import Record
from .claims import FAILED, FAILS, HOLDS, METHOD_ON_CPU, UNTESTABLE, beyond_range, figure
from .claims import rel_spread as spread_of
from .claims import with_spread as ws
from .judge import Context, Finding, noisy

NEAREST = " (32x8's nearest: tl.dot needs >= 16 per dimension)"


def _tile(r: Record) -> str:
    p = r.params
    return f"{p['block_m']}x{p['block_n']}x{p['block_k']}" if "block_m" in p else "cuBLAS"


def _shape(r: Record) -> str:
    return f"{r.params['m']}^3 {r.params['precision']}"


def tile_shape(ctx: Context, claim) -> Finding | None:
    guide = [r for r in ctx.ok("guide_tiles") if r.params.get("backend") != "torch"]
    fp32 = ctx.one("guide_tiles", backend="torch", precision="fp32")
    if not guide or fp32 is None:
        return None
    better = max(guide, key=lambda r: r.throughput)
    precision = better.params["precision"]
    ratio, spread = ctx.rate_ratio(better, fp32)
    cublas = ctx.one("guide_tiles", backend="torch", precision=precision)
    best = max(ctx.ok("tiles"), key=lambda r: r.throughput, default=None)
    parts = [f"{_shape(better)}: " + ", ".join(
        f"guide tile {_tile(r)}{NEAREST if r.params['block_n'] < r.params['block_m'] else ''} "
        f"{r.throughput:.4g} TFLOP/s" for r in guide),
        f"without tensor cores (IEEE fp32 {'cuBLAS' if ctx.on_gpu else 'CPU BLAS'}) "
        f"{fp32.throughput:.4g} TFLOP/s: the better guide tile is {ws(ratio, spread)} of it"]
    figures = {"ratio": figure("guide tile / fp32 (no tensor cores)", ratio, "x"),
               "guide_tflops": figure("better guide tile TFLOP/s", better.throughput, "TFLOP/s")}
    if best is not None:
        parts.append(f"best tile found {_tile(best)} {best.throughput:.4g} TFLOP/s "
                     f"({best.throughput / better.throughput:.3g}x the guide's)")
        figures["best_over_guide"] = figure("best tile / guide tile", best.throughput /
                                            better.throughput, "x")
    if cublas is not None and precision != "fp32":
        parts.append(f"cuBLAS {precision} {cublas.throughput:.4g} TFLOP/s "
                     f"({cublas.throughput / better.throughput:.3g}x the guide's)")
        figures["cublas_over_guide"] = figure(f"cuBLAS {precision} / guide tile",
                                              cublas.throughput / better.throughput, "x")
    return Finding(ctx.decide(claim, ratio, spread), "; ".join(parts), figures,
                   noisy(better, fp32))


def tc_peak(ctx: Context, claim) -> Finding | None:
    tiles = ctx.ok("tiles")
    if not tiles:
        return None
    best = max(tiles, key=lambda r: r.throughput)
    pct = best.metrics.get("pct_of_datasheet_peak")
    cublas = ctx.one("guide_tiles", backend="torch", precision=best.params["precision"])
    if pct is None:
        peak = ctx.one("peak", precision="fp32")
        if ctx.on_gpu or peak is None:
            return Finding(UNTESTABLE, "", reason=(
                "the lab's specs table has no datasheet peak for this device and precision"))
        share = 100 * best.throughput / peak.throughput
        return Finding(METHOD_ON_CPU, f"best stand-in tile {_tile(best)} ({_shape(best)}) "
                       f"{best.throughput:.4g} TFLOP/s = {share:.0f}% of this CPU's measured "
                       f"fp32 matmul rate ({peak.throughput:.4g} TFLOP/s at "
                       f"{peak.params['size']}^3; CPUs have no datasheet peak in the table)",
                       {"pct_of_measured": figure("best tile, % of measured fp32", share, "%")},
                       noisy(best, peak))
    spread = pct * spread_of(best.time_ms)
    text = (f"best tile {_tile(best)} (num_stages {best.params.get('num_stages')}) of "
            f"{len(tiles)} at {_shape(best)}: {best.throughput:.4g} TFLOP/s = "
            f"{ws(pct, spread, '%')} of the datasheet's "
            f"{best.metrics.get('datasheet_peak_tflops'):.4g}")
    figures = {"pct_of_peak": figure("best tile, % of datasheet", pct, "%")}
    if cublas is not None and cublas.metrics.get("pct_of_datasheet_peak") is not None:
        cu = cublas.metrics["pct_of_datasheet_peak"]
        text += f"; cuBLAS at the same shape {cu:.1f}%"
        figures["cublas_pct"] = figure("cuBLAS, % of datasheet", cu, "%")
    return Finding(ctx.decide(claim, pct, spread), text, figures, noisy(best))


def unit_util(ctx: Context, claim) -> Finding | None:
    recs = {p: ctx.one("peak", precision=p) for p in ("fp16", "fp32")}
    if any(r is None for r in recs.values()):
        return None
    shares = {p: (100 * r.metrics["ratio_of_datasheet"],
                  100 * r.metrics["ratio_of_datasheet"] * spread_of(r.time_ms))
              for p, r in recs.items() if r.metrics.get("ratio_of_datasheet") is not None}
    if len(shares) < 2:
        return Finding(UNTESTABLE, "", reason="the lab's specs table has no datasheet peak for "
                       "this card in fp16 and fp32")
    status = HOLDS if all(ctx.decide(claim, v, s) == HOLDS for v, s in shares.values()) \
        else FAILS
    text = f"cuBLAS at {recs['fp16'].params['size']}^3: " + ", ".join(
        f"{p} {recs[p].throughput:.4g} TFLOP/s = {ws(v, s, '%')} of its datasheet peak "
        f"{recs[p].metrics['datasheet_tflops']:.4g}" for p, (v, s) in shares.items())
    return Finding(status, text, {f"{p}_pct": figure(f"{p}, % of datasheet", v, "%")
                                  for p, (v, _) in shares.items()}, noisy(*recs.values()))


def _rate_ratio(ctx: Context, claim, top: list[str], base: str) -> Finding | None:
    base_rec = ctx.one("peak", precision=base)
    tops = [(p, ctx.one("peak", precision=p)) for p in top]
    if base_rec is None or any(r is None for _, r in tops):
        return None
    ratios = {p: ctx.rate_ratio(r, base_rec) for p, r in tops}
    status = HOLDS if all(ctx.decide(claim, v, s) == HOLDS for v, s in ratios.values()) \
        else FAILS
    text = f"{base_rec.params['size']}^3 matmul: " + ", ".join(
        f"{p} {r.throughput:.4g}" for p, r in [*tops, (base, base_rec)]) + " TFLOP/s; " + \
        ", ".join(f"{p}/{base} {ws(v, s)}" for p, (v, s) in ratios.items())
    return Finding(status, text, {f"{p}_over_{base}": figure(f"{p} / {base} matmul rate", v,
                                                              "x")
                                  for p, (v, _) in ratios.items()},
                   noisy(base_rec, *(r for _, r in tops)))


def tf32_speed(ctx, claim):
    return _rate_ratio(ctx, claim, ["tf32"], "fp32")


def half_speed(ctx, claim):
    return _rate_ratio(ctx, claim, ["bf16", "fp16"], "tf32")


def fp8_speed(ctx, claim):
    return _rate_ratio(ctx, claim, ["fp8"], "bf16")


def _largest_sparse(ctx: Context) -> Record | None:
    recs = ctx.ok("sparsity", precision="fp16") or ctx.ok("sparsity")
    return max(recs, key=lambda r: r.params["m"], default=None)


def sparsity_speed(ctx: Context, claim) -> Finding | None:
    largest = _largest_sparse(ctx)
    if largest is None:
        return None
    speedup = largest.metrics.get("speedup") or 0.0
    spread = 2 * speedup * spread_of(largest.time_ms)   # the dense side's spread is not kept
    text = "2:4-sparse over dense on the same pruned matrix: " + ", ".join(
        f"{_shape(r)} {r.metrics.get('speedup'):.3g}x" for r in ctx.ok("sparsity"))
    return Finding(ctx.decide(claim, speedup, spread), text, {"speedup": figure(
        "2:4 sparse / dense (largest shape)", speedup, "x")}, noisy(largest))


def sparsity_util(ctx: Context, claim) -> Finding | None:
    largest = _largest_sparse(ctx)
    if largest is None:
        return None
    peak = ctx.one("peak", precision=largest.params["precision"])
    datasheet = (peak.metrics.get("datasheet_tflops") if peak is not None else None)
    if not datasheet:
        if peak is None and "peak" in {s.name for s in ctx.plan.steps}:
            return None
        return Finding(UNTESTABLE, "", reason="the lab's specs table has no dense datasheet "
                       f"peak for this card in {largest.params['precision']}")
    pct = 100 * largest.throughput / datasheet
    spread = pct * spread_of(largest.time_ms)
    text = (f"{_shape(largest)} 2:4-sparse: {largest.throughput:.4g} effective TFLOP/s (dense "
            f"FLOPs) = {ws(pct, spread, '%')} of the dense datasheet peak {datasheet:.4g} "
            f"({pct / 2:.1f}% of the sparse peak {2 * datasheet:.4g})")
    return Finding(ctx.decide(claim, pct, spread), text,
                   {"pct_of_dense_peak": figure("2:4 sparse, % of dense datasheet", pct, "%")},
                   noisy(largest))


def _joules(r: Record) -> str:
    j = r.metrics.get("j_per_tflop")
    if j is None:
        return (f"energy unavailable ({r.metrics.get('energy_note')}); CPU time "
                f"{r.metrics.get('cpu_s_per_tflop'):.3g} s per TFLOP")
    return (f"{j:.3g} J per TFLOP at {r.metrics.get('power_w'):.4g} W "
            f"({r.metrics.get('energy_source')})")


def energy(ctx: Context, claim) -> Finding | None:
    fp32 = ctx.one("energy", precision="fp32")
    if fp32 is None:
        return None
    fp16 = ctx.one("energy", precision="fp16")
    sparse = ctx.one("energy_sparse", precision="fp16")
    parts = [f"{p} {'2:4-sparse' if r is sparse else 'dense'} {r.params['size']}^3: {_joules(r)}"
             for p, r in (("fp32", fp32), ("fp16", fp16), ("fp16", sparse)) if r is not None]
    text = "; ".join(parts)
    if not ctx.on_gpu:
        return Finding(METHOD_ON_CPU, text + " (fp16 and 2:4 sparsity need a GPU's tensor "
                       "cores)", noisy=noisy(fp32))
    if sparse is None:
        if "energy_sparse" in {s.name for s in ctx.plan.steps}:
            return None
        return Finding(UNTESTABLE, text, reason="2:4 sparsity cannot run on this GPU: the "
                       "claim's sparse half is missing (fp16 dense is shown)")
    if fp32.metrics.get("j_per_tflop") is None or sparse.metrics.get("j_per_tflop") is None:
        return Finding(FAILED, text, reason="no energy reading: " + str(
            sparse.metrics.get("energy_note") or fp32.metrics.get("energy_note")))
    ratio = sparse.metrics["j_per_tflop"] / fp32.metrics["j_per_tflop"]
    cut, spread = 100 * (1 - ratio), 100 * ratio * (spread_of(sparse.time_ms)
                                                    + spread_of(fp32.time_ms))
    text += (f"; energy per TFLOP cut by {ws(cut, spread, '%')}"
             f"{beyond_range(cut, spread, claim.low, claim.high, '%')}; mean power "
             f"{fp32.metrics.get('power_w'):.4g} W (fp32) -> "
             f"{sparse.metrics.get('power_w'):.4g} W (fp16 2:4)")
    return Finding(ctx.decide(claim, cut, spread), text, {
        "energy_cut_pct": figure("fp16 2:4 vs fp32: energy per TFLOP cut", cut, "%"),
        "fp32_j_per_tflop": figure("fp32: J per TFLOP", fp32.metrics["j_per_tflop"], "J"),
        "sparse_j_per_tflop": figure("fp16 2:4: J per TFLOP", sparse.metrics["j_per_tflop"],
                                     "J")}, noisy(fp32, sparse))


JUDGES = {"tile_shape": tile_shape, "tc_peak": tc_peak, "unit_util": unit_util,
          "tf32_speed": tf32_speed, "half_speed": half_speed, "fp8_speed": fp8_speed,
          "sparsity_speed": sparsity_speed, "sparsity_util": sparsity_util, "energy": energy}
