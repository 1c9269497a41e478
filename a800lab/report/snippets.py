"""The getting-started guide's code judged as printed: D.3.1 (devices), D.4.6 (accumulation) and
D.4.8's TensorFlow half (beside amp_trains). Where TensorFlow's own venv is prepared
(`python -m a800lab report --tf-env`), what its run did decides, the lab's torch emulation shown
beside; without it the rows say how to install it and the emulation decides."""

import statistics

from .claims import FAILS, HOLDS, UNTESTABLE, Reading, figure, measured
from .judge import Context, Finding
from .rules import ACCUMULATION_GAP, LOSS_TOLERANCE, three_way

STEP = "guide_snippets"
EMULATION = "the torch emulation"


def tf_run(ctx: Context, sid: str) -> tuple[dict | None, str]:
    """TensorFlow's run of snippet `sid` ({"error", ...}) and "", or None and why not."""
    record = ctx.one(STEP)
    if record is None:
        return None, "the guide's snippets were not run"
    m = record.metrics
    if not m.get("tensorflow"):
        return None, m.get("tf_error") or m.get("tf_missing") or "TensorFlow is not installed"
    if sid not in m.get("results", {}):
        return None, f"TensorFlow's run has no result for {sid}"
    return {**m["results"][sid], "version": f"TensorFlow {m['tensorflow']} (Keras "
            f"{m.get('keras')})"}, ""


def _ran(result: dict) -> str:
    return f"raised {result['error']}" if result.get("error") else "ran"


@measured(
    cites=("D.3.1",), chapter="01", about="the GPUs the snippet lists and sets (a CPU has none)",
    stated="print(f\"显存总量: {torch.cuda.get_device_properties(i).total_memory/1024**3:.2f}GB\")"
           " … tf.config.experimental.set_memory_growth(gpu, True) … "
           "tf.config.set_visible_devices(gpus[0], 'GPU')",
    readings=(
        Reading("as printed", "both halves run as printed, the PyTorch half in the lab, the "
                "TensorFlow half in TensorFlow's own venv: each without an exception, doing what "
                "its comments say: list every GPU with its name and memory; set memory growth "
                "on every GPU and leave the first the only one TensorFlow sees", literal=True),
        Reading("the 'GB' label", "total_memory is in bytes, so /1024**3 prints GiB under the "
                "label 'GB' (an 80 GB A800 shows about 79): the printed figure against the "
                "card's bytes / 10^9")),
    decides="both halves ran without an exception and did what their comments say (a CPU has "
            "no GPU to list or set: its run shows the method)", steps=(STEP,))
def device_snippet(ctx: Context, claim) -> Finding | None:
    record = ctx.one(STEP)
    if record is None or not record.metrics.get("torch"):
        return None
    torch = record.metrics["torch"]
    sizes = torch["total_memory_bytes"]
    text = f"the PyTorch half {_ran(torch)}, listing {torch['gpus']} GPU(s)" + "".join(
        f"; GPU {i}: printed {b / 2**30:.2f}GB for {b / 1e9:.1f} GB" for i, b in enumerate(sizes))
    readings = {"the 'GB' label": (FAILS if any(abs(b / 2**30 - b / 1e9) > 0.005 * b / 1e9
                                                for b in sizes) else HOLDS,
                                   "GiB printed under 'GB'" if sizes else "no GPU to print")}
    tf, why = tf_run(ctx, "D.3.1")
    if tf is None:
        return Finding(UNTESTABLE, text, readings=readings, reason=f"the TensorFlow half: {why}")
    text += (f"; {tf['version']}: the TensorFlow half {_ran(tf)}: {tf['gpus']} GPU(s), memory "
             f"growth {tf['memory_growth']}, {tf['visible_gpus']} visible")
    if torch["gpus"] and not tf["gpus"]:
        return Finding(UNTESTABLE, text, readings=readings, reason=(
            "TensorFlow here sees no GPU (a CPU build?): `python -m a800lab report --tf-env` on "
            "this GPU box installs tensorflow[and-cuda]"))
    did = not tf["gpus"] or all(tf["memory_growth"]) and tf["visible_gpus"] == 1
    return Finding(HOLDS if not torch["error"] and not tf["error"] and did else FAILS, text,
                   readings=readings)


@measured(
    cites=("D.4.5", "D.4.6"), chapter="06", cpu_answers=True,
    stated="5. Solutions for insufficient GPU memory: … gradient accumulation implementation … "
           "optimizer.apply_gradients(zip(gradients, model.trainable_variables)) … "
           "optimizer.zero_grad()",
    readings=(
        Reading("the snippet as written", "the snippet as printed, run in TensorFlow's own venv "
                "on a tiny Keras model the lab makes, 4 micro-batches of 8: does it run, and "
                "does the update it applies carry the gradient of one batch of 32? The gradients "
                "it hands to apply_gradients against that batch's, computed the same way on any "
                "device; without TensorFlow the torch emulation decides", literal=True),
        Reading(EMULATION, "the same loop in torch on the lab's Transformer: each micro-batch's "
                "loss / k, a fresh gradient per micro-batch, only the last one applied: its "
                "gradient against one batch of k x b"),
        Reading("the fix", "the lab's loop (each micro-batch's loss / k, backward per "
                "micro-batch, one optimizer step) against one batch of k x b, at a lower step "
                "peak: shown beside as the fix")),
    decides="the snippet ran without an exception and its applied gradient is within 1e-5 of "
            "the large batch's (counted)", steps=("accumulation", STEP))
def accum_snippet(ctx: Context, claim) -> Finding | None:
    recs = ctx.ok("accumulation")
    large = next((r for r in recs if r.params["accum_steps"] == 1), None)
    micro = next((r for r in recs if r.params["accum_steps"] > 1), None)
    if large is None or micro is None:
        return None
    gap, snippet = micro.metrics.get("accumulation_gap"), micro.metrics.get("snippet_gap")
    mem = micro.metrics["step_peak_bytes"] / large.metrics["step_peak_bytes"]
    k, b = micro.params["accum_steps"], micro.params["batch_size"]
    emulated = (HOLDS if snippet <= ACCUMULATION_GAP else FAILS,
                f"{k} x {b} against one batch of {large.params['batch_size']}: gradient gap "
                f"{snippet:.2g} (it applies one micro-batch's gradient / {k}; the rule: "
                f"{ACCUMULATION_GAP:g})")
    figures = {"snippet_gap": figure("the snippet's gradient gap (torch emulation)", snippet),
               "memory_share": figure("accumulated / large-batch memory", mem, "x")}
    readings = {"the fix": (HOLDS if gap is not None and gap <= ACCUMULATION_GAP and mem < 1
                            else FAILS, f"gap {gap:.2g}, peak {100 * mem:.0f}%")}
    tf, why = tf_run(ctx, "D.4.6")
    if tf is None:
        return Finding(emulated[0], f"the torch emulation: {emulated[1]}; the lab's loop "
                       f"{gap:.2g} at {100 * mem:.0f}% of the large batch's peak", figures,
                       reason=f"the snippet's own TensorFlow: {why}", readings=readings)
    n = tf["micro_batch"] * tf["steps"]
    text = (f"{tf['version']}, the snippet as printed on a tiny Keras model, {tf['steps']} "
            f"micro-batches of {tf['micro_batch']}: it {_ran(tf)} after applying "
            f"{tf['applied_steps']} update(s)")
    if tf["gap"] is not None:
        text += (f"; the gradient it applied is the last micro-batch's / {tf['steps']} (gap "
                 f"{tf['last_gap']:.2g}), {tf['gap']:.2g} from one batch of {n}'s (the rule: "
                 f"{ACCUMULATION_GAP:g})")
        figures["tf_gap"] = figure("the snippet's gradient gap (TensorFlow)", tf["gap"])
    holds = not tf["error"] and tf["gap"] is not None and tf["gap"] <= ACCUMULATION_GAP
    return Finding(HOLDS if holds else FAILS, text, figures,
                   readings={EMULATION: emulated, **readings})


def mixed_float16(ctx: Context) -> tuple[str, str]:
    """D.4.8's TensorFlow half, run as printed: (status, what happened) for amp_trains."""
    tf, why = tf_run(ctx, "D.4.8")
    if tf is None:
        return UNTESTABLE, why
    if tf["error"] or tf["policy"] != "mixed_float16":
        return FAILS, f"{tf['version']}: {tf['error'] or 'the policy is ' + tf['policy']}"
    base, mixed = ([r["loss"] for r in tf["losses"][p]] for p in ("float32", "mixed_float16"))
    mean = statistics.mean(base)
    gap = statistics.mean(mixed) / mean - 1
    spread = max(max(v) - min(v) for v in (base, mixed)) / mean
    status = three_way(gap, spread, LOSS_TOLERANCE, at_most=True)
    return status, (f"{tf['version']}: the policy set (compute {tf['compute_dtype']}, variables "
                    f"{tf['variable_dtype']}; Keras wrapped Adam in "
                    f"{tf['losses']['mixed_float16'][0]['optimizer']}); a tiny Keras model's "
                    f"held-out loss after the same steps, {len(base)} seeds: float32 {mean:.4g}, "
                    f"mixed_float16 {statistics.mean(mixed):.4g} ({100 * gap:+.2f}% ± "
                    f"{100 * spread:.2g})")
