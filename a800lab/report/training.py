"""The training claims, each defined once with its judge: mixed precision's memory, buffers and
speed, the NLP and overall figures, the AMP and accumulation snippets, held-out losses and the
memory model's largest batch. AMP is the "fp16" precision, its baseline "fp32_default"."""

import statistics

from ..core.units import MIB
from ..workloads.usage import cost_per_million_samples_usd
from .claims import FAILED, FAILS, HOLDS, INCONCLUSIVE, UNTESTABLE, Reading, figure, measured
from .judge import Context, Finding, loss_text, median_of, noisy, reading_runs
from .rules import (
    LOSS_TOLERANCE,
    MODEL_ERROR,
    beyond_range,
    combine,
    confirmed,
    over_runs,
    runs_text,
    three_way,
    undecided,
)
from .rules import with_spread as ws
from .snippets import mixed_float16

BASE, AMP = "fp32_default", "fp16"
HBM, TC = "HBM (GPU memory)", "tensor cores"
AMP_TEXT = "AMP (fp16 autocast + GradScaler over fp32 master weights)"
FP32 = "the framework's default fp32 (PyTorch: IEEE matmuls, TF32 cuDNN convolutions)"
RESNET = ("torchvision's ResNet-50 at 224x224, channels_last in both runs, as NVIDIA's own "
          "ResNet-50 examples train it under AMP")
GPT2 = "the GPT-2-small-shaped Transformer (12 layers, d=768, 1024 tokens)"
FELL = 0.75   # a run "trained": its held-out loss at most 3/4 of its first step's loss


def _pair(ctx: Context, model: str):
    """(fp32_default record, AMP record, {other precision: record}) of `model`, or None."""
    base, amp = (ctx.one("amp", model=model, precision=p) for p in (BASE, AMP))
    if base is None or amp is None:
        return None
    return base, amp, {r.params["precision"]: r for r in ctx.ok("amp", model=model)
                       if r.params["precision"] not in (BASE, AMP)}


def _saving(a, b, key="step_peak_bytes") -> float:
    return 100 * (1 - b.metrics[key] / a.metrics[key])


def _without_resnet(ctx: Context, claim, beside: str, readings: dict) -> Finding | None:
    """A ResNet-50 row without its records: untestable here (the Transformer beside), or None."""
    why = ctx.plan.untestable.get(claim.id, "")
    return Finding(UNTESTABLE, f"no ResNet-50 here; beside it, {beside}", reason=why,
                   readings=readings) if why else None


def _resnet_row(ctx: Context, claim, key: str, what: str) -> Finding | None:
    """A counted ResNet-50 saving (memory or buffers) against the claim's figure, the
    Transformer's beside with its own outcome."""
    resnet, tr = _pair(ctx, "resnet50"), _pair(ctx, "transformer")
    beside = {}
    if tr is not None:
        cut = _saving(tr[0], tr[1], key)
        beside["the Transformer"] = (three_way(cut, 0.0, claim.low), f"{what} -{cut:.0f}%")
    if resnet is None:
        return _without_resnet(ctx, claim, f"the Transformer ({tr[0].params['size']}): "
                               f"{beside['the Transformer'][1]}" if tr else "nothing", beside)
    base, amp, _ = resnet
    cut = _saving(base, amp, key)
    return Finding(three_way(cut, 0.0, claim.low), f"ResNet-50: {what} fp32 "
                   f"{base.metrics[key] / MIB:.1f} MiB, AMP {amp.metrics[key] / MIB:.1f} MiB: "
                   f"-{cut:.0f}% (counted: no spread)",
                   {"resnet50_cut_pct": figure(f"ResNet-50: {what} cut by AMP", cut, "%")},
                   readings=beside)


@measured(
    cites=("G.1.7", "G.4.1"), chapter="04", figure="40%", low=40.0, unit="%", about=HBM,
    stated="Mixed-precision acceleration … FP16/FP32 mixed training framework … GPU memory "
           "usage reduced by 40% … mixed-precision training, by reasonably allocating the FP16 "
           "and FP32 data types, significantly reduces memory usage",
    readings=(
        Reading("ResNet-50's step peak", f"peak GPU memory of one training step of {RESNET} "
                "(the model the guide names for its 40% in G.3.3), "
                f"{AMP_TEXT} against {FP32}: the sentence compares FP16/FP32 with FP32 alone; "
                "G.4.1's 'significantly' has no figure of its own, G.1.7's 40% decides",
                literal=True),
        Reading("the Transformer", f"the same on {GPT2}: shown beside"),
        Reading("host memory", "G.4.1 writes 内存, which often means the host's RAM (the GPU's "
                "is 显存): AMP changes what the GPU holds",
                unmeasured="the host keeps the same data loader and the same fp32 model copy "
                "either way; GPU memory is what mixed precision changes")),
    decides="ResNet-50's saving against 40% (a step's memory repeats exactly: counted)",
    steps=("amp",), needs=("resnet50",))
def mp_memory(ctx: Context, claim) -> Finding | None:
    return _resnet_row(ctx, claim, "step_peak_bytes", "step peak")


@measured(
    cites=("G.3.3",), chapter="04", figure="40%", low=40.0, unit="%", about=HBM,
    stated="in the ResNet-50 training scenario this can reduce intermediate cache usage by 40%",
    readings=(
        Reading("activations kept for backward", "the activation bytes ResNet-50 saves for "
                f"backward in one training step (its intermediate buffers, counted tensor by "
                f"tensor), {AMP_TEXT} against {FP32}; {RESNET}", literal=True),
        Reading("the Transformer", f"the same on {GPT2}: shown beside")),
    decides="ResNet-50's cut against 40% (counted: no spread)", steps=("amp",),
    needs=("resnet50",))
def buffers_resnet50(ctx: Context, claim) -> Finding | None:
    return _resnet_row(ctx, claim, "activation_bytes", "activations saved for backward")


def _speed(ctx: Context, model: str):
    """(AMP / fp32 samples/s per run, fp32 record, AMP record, others) of `model`, or None."""
    pair = _pair(ctx, model)
    if pair is None:
        return None
    runs = [ctx.rate_ratio(a, b) for a, b in ctx.paired(
        ctx.runs("amp", model=model, precision=AMP), ctx.runs("amp", model=model,
                                                              precision=BASE))]
    return runs, *pair


@measured(
    cites=("G.4.3",), chapter="04", figure="1.8-2.5x", low=1.8, high=2.5, about=TC,
    stated="a 1.8-2.5x training-speed improvement can be achieved on typical models such as "
           "ResNet-50",
    readings=(
        Reading("to 1.8-2.5x", f"training samples/s of {RESNET}, {AMP_TEXT} over {FP32}: the "
                "section compares mixed precision with FP32", literal=True),
        Reading("by 1.8-2.5x", "the same ratio read as raised by 1.8-2.5x, i.e. to 2.8-3.5x"),
        Reading("against TF32", "AMP over TF32 everywhere, as NVIDIA's own A100 tables "
                "compare mixed precision"),
        Reading("the Transformer", f"the same on {GPT2}, a 'typical model' beside")),
    decides="ResNet-50's speed-up against 1.8x, the range's low end, in every run (above 2.5x "
            "the row says so)", steps=("amp",), needs=("resnet50",))
def amp_speed(ctx: Context, claim) -> Finding | None:
    readings = {}
    tr = _speed(ctx, "transformer")
    if tr is not None:
        readings["the Transformer"] = reading_runs(tr[0], 1.8)
    resnet = _speed(ctx, "resnet50")
    if resnet is None:
        return _without_resnet(ctx, claim, f"the Transformer's AMP speed-up {runs_text(tr[0])}"
                               if tr else "nothing", readings)
    runs, base, amp, others = resnet
    speed, spread = over_runs(runs)
    readings["by 1.8-2.5x"] = reading_runs(runs, 2.8)
    text = (f"ResNet-50 (first run): fp32 {base.throughput:.4g}, AMP {amp.throughput:.4g} "
            f"samples/s; AMP / fp32{beyond_range(speed, spread, 1.8, 2.5)}:")
    if "tf32" in others:
        vs, s = ctx.rate_ratio(amp, others["tf32"])
        readings["against TF32"] = (three_way(vs, s, 1.8), f"{ws(vs, s)} over TF32's "
                                    f"{others['tf32'].throughput:.4g}")
    cost = {p: cost_per_million_samples_usd(r.throughput, ctx.price)
            for p, r in (("fp32", base), ("AMP", amp))}
    text += (f"; ${cost['fp32']:.3g} -> ${cost['AMP']:.3g} per million samples at "
             f"${ctx.price:g} per GPU-hour")
    return ctx.confirmed(claim, runs, text, {
        "resnet50_speedup": figure("ResNet-50: AMP / fp32 samples/s", speed, "x"),
        "resnet50_amp_usd_per_million": figure("ResNet-50: AMP $ per million samples",
                                               cost["AMP"], "$")}, noisy(base, amp), readings)


def _speed_memory(ctx: Context, claim, speed_low: float, memory_low: float, by: float):
    """The Transformer's AMP speed-up (timed, over runs) and memory saving (counted), both
    required."""
    found = _speed(ctx, "transformer")
    if found is None:
        return None
    runs, base, amp, _ = found
    saving = _saving(base, amp)
    memory = three_way(saving, 0.0, memory_low)
    status = combine([confirmed(runs, speed_low), memory])
    share = 100 * base.throughput / amp.throughput
    text = (f"Transformer ({base.params['size']}): AMP step time {share:.0f}% of fp32's in the "
            f"first run, step peak memory -{saving:.0f}% (counted); AMP / fp32 samples/s "
            f"{runs_text(runs)}")
    resnet = _speed(ctx, "resnet50")
    if resnet is not None:
        text += (f"; ResNet-50 beside: {runs_text(resnet[0])}, "
                 f"-{_saving(*resnet[1:3]):.0f}%")
    return Finding(status, text, {
        "transformer_speedup": figure("Transformer: AMP / fp32 samples/s", median_of(runs), "x"),
        "transformer_saving_pct": figure("Transformer: AMP memory saving", saving, "%")},
        noisy(base, amp), undecided(runs, speed_low) if status == INCONCLUSIVE else "",
        {"by": (combine([confirmed(runs, by), memory]), f"{runs_text(runs)} against {by:g}x")})


@measured(
    cites=("G.7.5",), chapter="04", figure="1/3, 28%", low=3.0, about=f"{TC} and {HBM}",
    stated="the training period of typical NLP models is shortened to 1/3 of the original and "
           "GPU memory usage drops by 28% at the same time",
    readings=(
        Reading("to 1/3", f"the time of the same training steps of {GPT2}, {AMP_TEXT} against "
                f"{FP32}, at most 1/3 of fp32's, and its step peak memory at least 28% lower "
                "(an epoch's time is the same steps' time: both readings of 'training period' "
                "agree)",
                literal=True),
        Reading("by", "shortened by 1/3, i.e. to 2/3 (1.5x faster)")),
    decides="the step time against 1/3 of fp32's in every run (timed) and the memory against "
            "-28% (counted)",
    steps=("amp",))
def nlp_speed_memory(ctx: Context, claim) -> Finding | None:
    return _speed_memory(ctx, claim, 3.0, 28.0, 1.5)


@measured(
    cites=("G.10.4",), chapter="04", figure="3x+, ~30%", low=3.0, about=f"{TC} and {HBM}",
    stated="the systematically optimized deployment solution can achieve an improvement of more "
           "than 3x in computational throughput at the same task scale, while reducing peak GPU "
           "memory usage by nearly 30%",
    readings=(
        Reading("to more than 3x", f"samples/s of {GPT2}, {AMP_TEXT} against {FP32} (the "
                "baseline the sentence compares: the same task unoptimised), 3x or more, and "
                "a step peak memory nearly 30% lower (taken as at least 27%)", literal=True),
        Reading("by", "improved by more than 3x, i.e. to 4x or more")),
    decides="the speed-up against 3x in every run (timed) and the saving against 27% (counted)",
    steps=("amp",))
def overall(ctx: Context, claim) -> Finding | None:
    return _speed_memory(ctx, claim, 3.0, 27.0, 4.0)


def _loss_match(base: list, test: list, what: str):
    """(status, text, gap, spread): `test` runs' mean held-out loss against `base` runs'; status
    FAILED (baseline diverged or did not train), FAILS (`test` diverged), else None: judge it."""
    lb, lt = ([r.metrics.get("eval_loss") for r in runs] for runs in (base, test))
    start = statistics.mean(r.metrics["loss_curve"][0] for r in base)
    if None in lb:
        return FAILED, f"the baseline diverged: held-out losses {lb}", None, None
    if statistics.mean(lb) > FELL * start:
        return FAILED, (f"too few steps: the baseline's held-out loss {statistics.mean(lb):.4g} "
                        f"is not well below its start {start:.4g}; train longer"), None, None
    if None in lt:
        return FAILS, f"{what} diverged: held-out losses {[loss_text(v) for v in lt]}", None, None
    mb, mt = statistics.mean(lb), statistics.mean(lt)
    widest = max((max(g) - min(g) for g in (lb, lt) if len(g) > 1), default=0.0)
    gap, spread = mt / mb - 1, widest / mb   # the widest range over seeds
    text = (f"{len(lb)} and {len(lt)} seeds, the same {len(base[0].metrics['loss_curve'])} "
            f"steps: held-out loss {mb:.4g} (from {start:.4g}), {what} {mt:.4g}: "
            f"{100 * gap:+.2f}% ± {100 * spread:.2g} (seeds' range)")
    return None, text, gap, spread


@measured(
    cites=("G.1.4", "G.4.1", "D.4.7", "D.4.8"), chapter="05", low=LOSS_TOLERANCE,
    about="the GPU's autocast (a CPU's casts other ops)",
    stated="a gradient scaling mechanism, ensuring a balance between model convergence "
           "stability and computation speed … mixed-precision training … while maintaining "
           "model accuracy … 6. Mixed-precision training configuration: … PyTorch automatic "
           "mixed precision … scaler = torch.cuda.amp.GradScaler() … with "
           "torch.cuda.amp.autocast():",
    readings=(
        Reading("trains like fp32", f"the snippet's recipe trains {GPT2} (on a CPU the tiny "
                "one) like fp32: its held-out loss after the same steps within 2% of the "
                "framework's default fp32, three seeds each, both fallen well below their "
                "start (G.4.1's 模型精度 read as the model's accuracy, not its numeric "
                "precision). The lab runs it as torch.amp.GradScaler('cuda') and torch.autocast"
                "('cuda', torch.float16): the snippet's torch.cuda.amp.GradScaler() and "
                "torch.cuda.amp.autocast() are deprecated spellings of the same", literal=True),
        Reading("the TensorFlow half", "Policy('mixed_float16') and set_global_policy run as "
                "printed in TensorFlow's own venv (`python -m a800lab report --tf-env`), then a "
                "tiny Keras model trained the same steps under float32 and under the policy, "
                "three seeds each: held-out losses within 2%")),
    decides="AMP's mean held-out loss within 2% of fp32's, three-way against the seeds' range; "
            "a fp32 baseline that diverged or did not fall below 3/4 of its start has failed",
    steps=("amp_trains", "guide_snippets"))
def amp_trains(ctx: Context, claim) -> Finding | None:
    base, amp = ctx.ok("amp_trains", precision=BASE), ctx.ok("amp_trains", precision=AMP)
    if not base or not amp:
        return None
    status, text, gap, spread = _loss_match(base, amp, "AMP")
    skipped = sum(r.metrics.get("skipped_steps", 0) for r in amp)
    if status == FAILED:
        return Finding(FAILED, "", reason=text)
    if status is not None:
        return Finding(status, text)
    text += f"; the scaler skipped {skipped} step(s) over all seeds"
    return ctx.finding(claim, gap, spread, text, {"amp_loss_gap": figure(
        "AMP / fp32 held-out loss - 1", gap)}, noisy(*base, *amp),
        {"the TensorFlow half": mixed_float16(ctx)}, at_most=True)


@measured(
    source="NVIDIA's datasheets (beside the guide)", cites=(), chapter="03", about=TC,
    low=LOSS_TOLERANCE, stated="TF32 trains at no cost in accuracy",
    readings=(Reading("held-out loss", "held-out loss of the medium Transformer after the same "
                      "steps, TF32 against IEEE fp32, three seeds each; a float32 matmul probe "
                      "under each run's settings checks that TF32 engaged", literal=True),),
    decides="TF32's mean held-out loss within 2% of fp32's, three-way against the seeds' range; "
            "a run where TF32 did not engage, or a baseline that diverged, has failed",
    steps=("tf32_loss",), needs=("gpu", "tf32"))
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
    status, text, gap, spread = _loss_match(fp32, tf32, "TF32")
    if status == FAILED:
        return Finding(FAILED, probe, reason=text)
    if status is not None:
        return Finding(status, f"{text}; {probe}")
    return ctx.finding(claim, gap, spread, f"{text}; {probe} ({etf / e32:.0f}x: TF32 engaged)",
                       {"loss_gap": figure("TF32 / fp32 held-out loss - 1", gap),
                        "error_factor": figure("TF32 / fp32 matmul error", etf / e32, "x")},
                       noisy(*fp32, *tf32), at_most=True)


@measured(
    cites=("G.11.3", "G.11.4"), chapter="05", low=LOSS_TOLERANCE,
    about="the real model's scale: the CPU preset is tiny and its learning rate large",
    stated="For model layers involving extremely small gradient updates (such as the Embedding "
           "layer) or computing units with numerical-stability requirements, it is recommended "
           "to retain FP32 precision",
    readings=(
        Reading("fp16 storage loses tiny updates", "the Transformer trained with its embedding "
                "tables stored in fp16 against fp32, AdamW's state and its eps in fp32 in both "
                "(each update is computed in fp32, then stored in the table's dtype), three "
                "seeds, enough steps for the held-out loss to fall: the share of each step's "
                "table updates fp16 rounds away is counted", literal=True),
        Reading("AdamW's state in fp16", "plain AdamW on fp16 tables keeps its moments in fp16, "
                "where eps = 1e-8 rounds to 0: a different failure, shown separately")),
    decides="the fp16 tables' mean held-out loss worse than the fp32 tables' by more than 2%, "
            "three-way against the seeds' range; a fp32 baseline that diverged or did not train "
            "has failed", steps=("embeddings",))
def embeddings_fp32(ctx: Context, claim) -> Finding | None:
    runs = {e: ctx.ok("embeddings", optimizer_state="fp32", embedding=e) for e in ("fp32",
                                                                                   "fp16")}
    if not runs["fp32"] or not runs["fp16"]:
        return None
    status, text, gap, spread = _loss_match(runs["fp32"], runs["fp16"], "fp16 tables")
    if status == FAILED:
        return Finding(FAILED, "", reason=text)
    if status == FAILS:   # fp16 tables diverged: the advice holds
        return Finding(HOLDS, text)
    lost = statistics.mean(r.metrics.get("lost_update_share", 0.0) for r in runs["fp16"])
    text += f"; fp16 rounded away {100 * lost:.0f}% of the table's updates on the last step"
    readings = {}
    plain = ctx.one("embeddings", optimizer_state="fp16", embedding="fp16")
    if plain is not None:
        readings["AdamW's state in fp16"] = (
            HOLDS if plain.metrics.get("eval_loss") is None else FAILS,
            f"held-out loss {loss_text(plain.metrics.get('eval_loss'))}")
    return ctx.finding(claim, gap, spread, text, {
        "loss_gap": figure("fp16 / fp32 tables held-out loss - 1", gap),
        "fp16_lost_updates_pct": figure("fp16 table: updates rounded away", 100 * lost, "%")},
        noisy(*runs["fp16"]), readings)


@measured(
    source="the lab (beside the guide)", cites=(), chapter="06",
    about="GPU memory (on a CPU the peak is the model's own counted bytes)",
    stated="the memory model predicts the largest micro-batch that fits",
    readings=(Reading("verified peak", "the max-batch finder's verified largest micro-batch "
                      "against the memory model's prediction of its peak, per preset and "
                      "precision", literal=True),),
    decides="every prediction within 10% of the verified peak (counted)", steps=("max_batch",))
def max_batch(ctx: Context, claim) -> Finding | None:
    recs = ctx.ok("max_batch")
    if not recs:
        return None
    parts, figures, holds = [], {}, True
    for r in recs:
        name = f"{r.params['model']} {r.params['precision']}"
        error = r.metrics.get("prediction_error")
        holds &= error is not None and abs(error) <= MODEL_ERROR
        parts.append(f"{name}: {int(r.throughput)} per micro-batch in "
                     f"{(r.metrics.get('limit_bytes') or 0) / MIB:.0f} MiB, model "
                     + ("no prediction" if error is None else f"{100 * error:+.1f}%"))
        figures[f"{r.params['model']}_{r.params['precision']}_batch"] = figure(
            f"{name}: largest micro-batch", r.throughput, "samples")
    if not ctx.on_gpu:
        return Finding(UNTESTABLE, "; ".join(parts), figures, reason=(
            "on a CPU the verified peak is counted tensor bytes, the memory model's own "
            "accounting, so agreement tests only the model's fit; the largest batches found "
            "are listed"))
    return Finding(HOLDS if holds else FAILS, "; ".join(parts), figures)
