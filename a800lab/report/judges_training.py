"""Judging the training claims: mixed precision's memory, speed and loss on the guide's models,
a training step's MFU, ResNet-50's buffers, TF32's held-out loss, embedding tables in fp16,
accumulation, max batch.

    from a800lab.report.judges_training import JUDGES
    finding = JUDGES["amp_speed"](ctx, CLAIMS["amp_speed"])    # a Finding, or None

AMP is the "fp16" training precision (autocast + GradScaler); the baseline is "fp32_default",
the framework's own defaults. Models are judged ResNet-50 first, then the Transformer.
"""

from __future__ import annotations

import statistics

from ..core.units import MIB
from ..workloads.usage import cost_per_million_samples_usd
from .claims import (
    ACCUMULATION_GAP,
    FAILED,
    FAILS,
    HOLDS,
    METHOD_ON_CPU,
    MODEL_ERROR,
    UNTESTABLE,
    beyond_range,
    figure,
    loss_reached,
    reaches,
    rel_spread,
)
from .claims import with_spread as ws
from .judge import Context, Finding, loss_text, noisy

BASE, AMP = "fp32_default", "fp16"
MODEL_ORDER = ("resnet50", "transformer", "mlp", "cnn")
NAMES = {"resnet50": "ResNet-50", "transformer": "Transformer"}


def _pairs(ctx: Context, models=MODEL_ORDER):
    """(model, fp32_default record, AMP record, {other precision: record}) per model with both."""
    out = []
    for m in models:
        base, amp = ctx.one("amp", model=m, precision=BASE), ctx.one("amp", model=m,
                                                                       precision=AMP)
        if base is not None and amp is not None:
            others = {r.params["precision"]: r for r in ctx.ok("amp", model=m)
                      if r.params["precision"] not in (BASE, AMP)}
            out.append((m, base, amp, others))
    return out


def _name(ctx: Context, m: str) -> str:
    r = ctx.one("amp", model=m)
    size = r.params["size"] if r is not None else ""
    return f"{NAMES.get(m, m)} ({size})" if size else NAMES.get(m, m)


def _missing_resnet(ctx: Context) -> str:
    if not ctx.on_gpu:
        return "; ResNet-50 runs on GPUs only"
    why = ctx.untestable_reason("buffers_resnet50")
    return f"; ResNet-50 not measured here: {why}" if why else ""


def _saving(a, b, key="step_peak_bytes") -> float:
    return 100 * (1 - b.metrics[key] / a.metrics[key])


def mp_memory(ctx: Context, claim) -> Finding | None:
    pairs = _pairs(ctx)
    if not pairs:
        return None
    parts, figures, holds = [], {}, True
    for m, base, amp, others in pairs:
        saving = _saving(base, amp)
        holds &= reaches(saving, 0.0, claim.low)
        extra = "".join(f", {p} saves {_saving(base, r):.0f}%" for p, r in others.items()
                        if p == "bf16")
        parts.append(f"{_name(ctx, m)}: step peak fp32 {base.metrics['step_peak_bytes'] / MIB:.1f}"
                     f" MiB, AMP {amp.metrics['step_peak_bytes'] / MIB:.1f} MiB: saves "
                     f"{saving:.0f}%{extra}")
        figures[f"{m}_saving_pct"] = figure(f"{m}: AMP memory saving", saving, "%")
    return Finding(HOLDS if holds else FAILS, "; ".join(parts) + _missing_resnet(ctx), figures)


def buffers_resnet50(ctx: Context, claim) -> Finding | None:
    pairs = _pairs(ctx, ("resnet50",))
    if not pairs:
        return None
    _, base, amp, _ = pairs[0]
    cut = _saving(base, amp, "activation_bytes")
    return Finding(ctx.decide(claim, cut), f"ResNet-50 activations saved for backward: fp32 "
                   f"{base.metrics['activation_bytes'] / MIB:.1f} MiB, AMP "
                   f"{amp.metrics['activation_bytes'] / MIB:.1f} MiB: cut {cut:.0f}%",
                   {"activation_cut_pct": figure("ResNet-50 activations cut by AMP", cut, "%")})


def amp_speed(ctx: Context, claim) -> Finding | None:
    pairs = _pairs(ctx)
    if not pairs:
        return None
    parts, figures, holds = [], {}, True
    for m, base, amp, others in pairs:
        speed, spread = ctx.rate_ratio(amp, base)
        holds &= reaches(speed, spread, claim.low)
        above = beyond_range(speed, spread, claim.low, claim.high)
        text = (f"{_name(ctx, m)}: fp32 {base.throughput:.4g}, AMP {amp.throughput:.4g} "
                f"samples/s: {ws(speed, spread)}{above}")
        if "tf32" in others:
            vs_tf32, s32 = ctx.rate_ratio(amp, others["tf32"])
            text += f"; against TF32 ({others['tf32'].throughput:.4g}) {ws(vs_tf32, s32)}"
            figures[f"{m}_amp_over_tf32"] = figure(f"{m}: AMP / TF32 samples/s", vs_tf32, "x")
        cost = {p: cost_per_million_samples_usd(r.throughput, ctx.price)
                for p, r in (("fp32", base), ("AMP", amp))}
        text += (f"; ${cost['fp32']:.3g} -> ${cost['AMP']:.3g} per million samples at "
                 f"${ctx.price:g} per GPU-hour")
        parts.append(text)
        figures[f"{m}_speedup"] = figure(f"{m}: AMP / fp32 samples/s", speed, "x")
        figures[f"{m}_amp_usd_per_million"] = figure(f"{m}: AMP $ per million samples",
                                                     cost["AMP"], "$")
    return Finding(HOLDS if holds else FAILS, "; ".join(parts) + _missing_resnet(ctx), figures,
                   noisy(*(r for _, b, a, _ in pairs for r in (b, a))))


def _speed_memory(ctx: Context, claim, models, memory_cut: float) -> Finding | None:
    pairs = _pairs(ctx, models)
    if not pairs:
        return None
    parts, figures, holds = [], {}, True
    for m, base, amp, _ in pairs:
        speed, spread = ctx.rate_ratio(amp, base)
        saving = _saving(base, amp)
        holds &= reaches(speed, spread, claim.low) and saving >= memory_cut
        parts.append(f"{_name(ctx, m)}: AMP step time {100 / speed:.0f}% of fp32's "
                     f"({ws(speed, spread)} samples/s), peak memory -{saving:.0f}%")
        figures[f"{m}_speedup"] = figure(f"{m}: AMP / fp32 samples/s", speed, "x")
        figures[f"{m}_saving_pct"] = figure(f"{m}: AMP memory saving", saving, "%")
    return Finding(HOLDS if holds else FAILS, "; ".join(parts), figures,
                   noisy(*(r for _, b, a, _ in pairs for r in (b, a))))


def nlp_speed_memory(ctx, claim):
    return _speed_memory(ctx, claim, ("transformer",), 28.0)


def overall(ctx, claim):
    found = _speed_memory(ctx, claim, MODEL_ORDER, 30.0)
    if found is not None:
        found.measured += _missing_resnet(ctx)
    return found


def amp_trains(ctx: Context, claim) -> Finding | None:
    pairs = _pairs(ctx, ("transformer",))
    if not pairs:
        return None
    _, base, amp, _ = pairs[0]
    lb, la = base.metrics.get("eval_loss"), amp.metrics.get("eval_loss")
    ok = loss_reached(la, lb)
    skipped, steps = amp.metrics.get("skipped_steps", 0), len(amp.metrics.get("loss_curve", []))
    text = (f"{_name(ctx, 'transformer')}, the same {steps} steps: held-out loss fp32 "
            f"{loss_text(lb)}, AMP {loss_text(la)}; the "
            f"scaler skipped {skipped} step(s), final scale {amp.metrics.get('scale')}")
    return Finding(HOLDS if ok else FAILS, text, {"amp_eval_loss": figure(
        "AMP held-out loss", la), "fp32_eval_loss": figure("fp32 held-out loss", lb)})


KERNEL_NOT_STEP = ("92% is a single kernel's share of the peak (the unit_util row); a whole "
                   "training step at 40-60% MFU is good")


def _mfu_line(ctx: Context, r) -> str:
    """One step's FLOPs x rate = TFLOP/s, and its shares of the datasheet peak and of the
    matmul rate this report measured in the step's matmul precision."""
    m, core = r.metrics, r.metrics.get("peak_precision")
    text = (f"{_name(ctx, r.params['model'])} {r.params['precision']}: "
            f"{m['model_flops_per_sample'] / 1e9:.3g} GFLOP per sample x {r.throughput:.4g} "
            f"samples/s = {m['achieved_tflops']:.3g} TFLOP/s")
    if m.get("mfu_pct_of_datasheet_peak") is not None:
        text += (f" = {m['mfu_pct_of_datasheet_peak']:.1f}% MFU of the {core} datasheet peak "
                 f"{m['datasheet_peak_tflops']:.4g}")
    peak = ctx.one("peak", precision=core)
    if peak is not None:
        text += (f" ({100 * m['achieved_tflops'] / peak.throughput:.1f}% of the {core} matmul "
                 f"rate measured here, {peak.throughput:.4g})")
    return text


def unit_util_mfu(ctx: Context, claim) -> Finding | None:
    order = {m: i for i, m in enumerate(MODEL_ORDER)}
    steps = sorted((r for r in ctx.ok("amp") if r.metrics.get("achieved_tflops") is not None),
                   key=lambda r: (order.get(r.params["model"], len(order)),
                                  r.params["precision"] != AMP))
    if not any(r.params["precision"] == AMP for r in steps):
        return None
    text = "; ".join(_mfu_line(ctx, r) for r in steps)
    figures = {f"{r.params['model']}_{r.params['precision']}_tflops": figure(
        f"{r.params['model']} {r.params['precision']}: achieved TFLOP/s",
        r.metrics["achieved_tflops"], "TFLOP/s") for r in steps}
    if not ctx.on_gpu:
        return Finding(METHOD_ON_CPU, text + " (a CPU has no datasheet peak: MFU needs a GPU)",
                       figures, noisy(*steps))
    amp = [r for r in steps if r.params["precision"] == AMP
           and r.metrics.get("mfu_pct_of_datasheet_peak") is not None]
    if not amp:
        return Finding(UNTESTABLE, text, figures, reason=(
            "the lab's specs table has no fp16 datasheet peak for this card"))
    best = max(amp, key=lambda r: r.metrics["mfu_pct_of_datasheet_peak"])
    pct = best.metrics["mfu_pct_of_datasheet_peak"]
    spread = pct * rel_spread(best.time_ms)
    figures["mfu_pct"] = figure("best AMP step, MFU % of datasheet", pct, "%")
    return Finding(ctx.decide(claim, pct, spread),
                   f"best: {_name(ctx, best.params['model'])} AMP at {ws(pct, spread, '%')} "
                   f"MFU; {text}; {KERNEL_NOT_STEP}", figures, noisy(best))


def _losses(records) -> list[float | None]:
    return [r.metrics.get("eval_loss") for r in records]


def _spread(*groups: list[float]) -> float:
    return max((max(g) - min(g) for g in groups if len(g) > 1), default=0.0)


def tf32_accuracy(ctx: Context, claim) -> Finding | None:
    fp32, tf32 = ctx.ok("tf32_loss", precision="fp32"), ctx.ok("tf32_loss", precision="tf32")
    if not fp32 or not tf32:
        return None
    e32 = max(r.metrics["matmul_probe_error"] for r in fp32)
    etf = min(r.metrics["matmul_probe_error"] for r in tf32)
    probe = f"matmul probe error vs float64: fp32 {e32:.2g}, TF32 runs {etf:.2g}"
    if etf <= 10 * e32:
        return Finding(FAILED, probe, reason=(
            f"TF32 did not engage: the 'tf32' runs' matmul probe error ({etf:.2g}) is fp32's "
            f"({e32:.2g}), so both runs computed IEEE fp32; check "
            "torch.backends.cuda.matmul.fp32_precision and that the card has TF32 (Ampere+)"))
    l32, ltf = _losses(fp32), _losses(tf32)
    if None in l32 or None in ltf:
        return Finding(FAILS if None in ltf else HOLDS, f"a run diverged: fp32 {l32}, TF32 "
                       f"{ltf}; {probe}")
    spread = _spread(l32, ltf)
    m32, mtf = statistics.mean(l32), statistics.mean(ltf)
    steps = fp32[0].metrics.get("steps_trained")
    text = (f"medium Transformer after {steps} steps, {len(l32)} seeds each: held-out loss "
            f"fp32 {m32:.4g}, TF32 {mtf:.4g} (seed spread {spread:.2g}); {probe} "
            f"({etf / e32:.0f}x: TF32 engaged)")
    return Finding(HOLDS if mtf <= m32 + spread else FAILS, text, {
        "loss_gap": figure("TF32 - fp32 held-out loss", mtf - m32),
        "error_factor": figure("TF32 / fp32 matmul error", etf / e32, "x")},
        noisy(*fp32, *tf32))


def embeddings_fp32(ctx: Context, claim) -> Finding | None:
    runs = {e: ctx.ok("embeddings", optimizer="adamw", embedding=e) for e in ("fp32", "fp16")}
    if not runs["fp32"] or not runs["fp16"]:
        return None
    l32, l16 = _losses(runs["fp32"]), _losses(runs["fp16"])
    diverged16, diverged32 = None in l16, None in l32
    if diverged32:
        return Finding(FAILED, "", reason=f"the fp32-table baseline diverged: {l32}")
    spread = _spread(l32, [v for v in l16 if v is not None])
    worse = diverged16 or statistics.mean(l16) > statistics.mean(l32) + spread
    text = (f"AdamW, {len(l32)} seeds: held-out loss with fp32 tables "
            f"{statistics.mean(l32):.4g}, fp16 tables "
            + ("diverged (AdamW's moments in fp16: g^2 and eps underflow)" if diverged16
               else f"{statistics.mean(l16):.4g}") + f" (seed spread {spread:.2g})")
    sgd = {e: ctx.one("embeddings", optimizer="sgd", embedding=e) for e in ("fp32", "fp16")}
    figures = {}
    if all(sgd.values()):
        lost = {e: r.metrics.get("lost_update_share", 0.0) for e, r in sgd.items()}
        loss = {e: loss_text(r.metrics.get("eval_loss")) for e, r in sgd.items()}
        text += (f"; SGD: the last step left {100 * lost['fp16']:.0f}% of the fp16 table's "
                 f"updated entries unchanged (fp32: {100 * lost['fp32']:.0f}%), held-out loss "
                 f"{loss['fp16']} vs {loss['fp32']}")
        figures["fp16_lost_updates_pct"] = figure("fp16 table: updates lost (SGD)",
                                                  100 * lost["fp16"], "%")
    return Finding(HOLDS if worse else FAILS, text, figures)


def accum_snippet(ctx: Context, claim) -> Finding | None:
    recs = ctx.ok("accumulation")
    large = next((r for r in recs if r.params["accum_steps"] == 1), None)
    micro = next((r for r in recs if r.params["accum_steps"] > 1), None)
    if large is None or micro is None:
        return None
    gap, snippet = micro.metrics.get("accumulation_gap"), micro.metrics.get("snippet_gap")
    mem = micro.metrics["step_peak_bytes"] / large.metrics["step_peak_bytes"]
    holds = gap is not None and gap <= ACCUMULATION_GAP and mem < 1
    k, b = micro.params["accum_steps"], micro.params["batch_size"]
    text = (f"{micro.params['model']}: {k} x {b} against one batch of "
            f"{large.params['batch_size']}: gradient gap {gap:.2g} (the rule: "
            f"{ACCUMULATION_GAP:g}), peak memory {100 * mem:.0f}% of the large batch's, "
            f"samples/s {100 * micro.throughput / large.throughput:.0f}% of it; the guide's "
            f"snippet as written: gap {snippet:.2g} (it applies one micro-batch's gradient / {k})")
    return Finding(HOLDS if holds else FAILS, text, {
        "memory_share": figure("accumulated / large-batch memory", mem, "x"),
        "snippet_gap": figure("the snippet's gradient gap", snippet)}, noisy(micro, large))


def max_batch(ctx: Context, claim) -> Finding | None:
    recs = ctx.ok("max_batch")
    if not recs:
        return None
    parts, figures, holds = [], {}, True
    for r in recs:
        name = f"{r.params['model']} {r.params['precision']}"
        error = r.metrics.get("prediction_error")
        holds &= error is not None and abs(error) <= MODEL_ERROR
        limit = r.metrics.get("limit_bytes")
        parts.append(f"{name}: {int(r.throughput)} per micro-batch in {(limit or 0) / MIB:.0f} "
                     "MiB, model " + ("no prediction" if error is None
                                      else f"{100 * error:+.1f}%"))
        figures[f"{r.params['model']}_{r.params['precision']}_batch"] = figure(
            f"{name}: largest micro-batch", r.throughput, "samples")
    if not ctx.on_gpu:
        return Finding(UNTESTABLE, "; ".join(parts), figures, reason=(
            "on a CPU the verified peak is counted tensor bytes, the memory model's own "
            "accounting, so agreement tests only the model's fit; the largest batches found "
            "are listed"))
    return Finding(HOLDS if holds else FAILS, "; ".join(parts), figures)


JUDGES = {"mp_memory": mp_memory, "buffers_resnet50": buffers_resnet50, "amp_speed": amp_speed,
          "nlp_speed_memory": nlp_speed_memory, "overall": overall, "amp_trains": amp_trains,
          "unit_util_mfu": unit_util_mfu,
          "tf32_accuracy": tf32_accuracy, "embeddings_fp32": embeddings_fp32,
          "accum_snippet": accum_snippet, "max_batch": max_batch}
