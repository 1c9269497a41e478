"""The systems claims, each defined once with its judge: the loading ladder's idle cut, embedding
placement, compression, hierarchical all-reduce, DDP's traffic and calls with accumulation, the
inference case. Speed-ups are ratios of whole training steps at the same global batch."""

from ..core.units import MIB
from .claims import FAILS, HOLDS, NOT_MEASURABLE, UNTESTABLE, Reading, figure, measured
from .judge import Context, Finding, cut_pct, loss_text, median_ms, median_of, noisy, reading_runs
from .rules import LOSS_TOLERANCE, half_iqr, runs_text, three_way
from .rules import with_spread as ws

LINKS = "NVLink and NCCL"
PLAIN = ("allreduce", "every_micro_batch")


@measured(
    cites=("G.1.8",), chapter="07", figure="25%", low=25.0, unit="%",
    about="GPU idle time (a CPU's 'device' is the CPU itself)",
    stated="Heterogeneous computing scheduling … Coordinated scheduling of CUDA cores and CPU "
           "tasks … Resource idle rate drops by 25%",
    readings=(
        Reading("relative", "the device's idle fraction in a loader -> copy -> step loop cut by "
                "25% of itself (1 - idle after / idle before), one lever: DataLoader workers, "
                "which prepare batches on the CPU while the device computes: the words say the "
                "rate drops by 25%, not by 25 percentage points", literal=True),
        Reading("percentage points", "the idle fraction falls by 25 points (idle before - idle "
                "after)")),
    decides="the workers' relative cut against 25% in every run, each idle fraction with the "
            "spread of its per-step samples (pinned memory and non_blocking copies follow, each "
            "with its own cut)", steps=("pipeline",))
def idle_cut(ctx: Context, claim) -> Finding | None:
    recs = ctx.runs("pipeline")
    bases = [r for r in recs if r.params["num_workers"] == 0]
    pairs = ctx.paired([r for r in recs if r.params["num_workers"] > 0
                        and not r.params["pin_memory"]], bases)
    if not pairs:
        return None
    workers, base = pairs[0]
    if any(b.metrics["idle_fraction"] <= 0 for _, b in pairs):
        return Finding(UNTESTABLE, f"idle {100 * base.metrics['idle_fraction']:.0f}% without "
                       "workers", reason="the loop without workers left the device no idle "
                       "time to cut at this preprocessing cost")
    cuts, points = [], []
    for w, b in pairs:   # each idle fraction with the spread of its own per-step samples
        i0, iw = b.metrics["idle_fraction"], w.metrics["idle_fraction"]
        s0, sw = (half_iqr(r.metrics.get("idle_per_step") or ()) for r in (b, w))
        cuts.append((100 * (1 - iw / i0), 100 * (sw / i0 + iw * s0 / i0**2)))
        points.append((100 * (i0 - iw), 100 * (s0 + sw)))
    i0, iw = base.metrics["idle_fraction"], workers.metrics["idle_fraction"]
    parts = [f"device idle {100 * i0:.0f}% with 0 workers, {100 * iw:.0f}% with "
             f"{workers.params['num_workers']} (first run)"]
    figures = {"workers_cut_pct": figure("idle fraction cut by workers", median_of(cuts), "%")}
    idle_prev = iw
    for lever, test in (("pin_memory", lambda p: p["pin_memory"] and not p["non_blocking"]),
                        ("non_blocking", lambda p: p["pin_memory"] and p["non_blocking"])):
        rung = next((r for r in recs if test(r.params)), None)
        if rung is not None:
            idle = rung.metrics["idle_fraction"]
            own = 100 * (1 - idle / idle_prev) if idle_prev > 0 else 0.0
            parts.append(f"+ {lever}: idle {100 * idle:.0f}% (its own cut {own:.0f}%)")
            figures[f"{lever}_cut_pct"] = figure(f"idle cut by {lever}", own, "%")
            idle_prev = idle
    return ctx.confirmed(claim, cuts, "; ".join(parts) + "; the relative cut:", figures,
                         noisy(base, workers), {"percentage points": reading_runs(
                             points, 25.0, " points")})


@measured(
    cites=("G.5.5",), chapter="07", low=1.0, about="PCIe transfers and GPU memory",
    stated="the Embedding layer and the Transformer layers are assigned to different computing "
           "units, while memory-reuse techniques are used to reduce data-movement overhead",
    readings=(
        Reading("memory reuse cuts the data movement", "the GPT-2-small-shaped Transformer "
                "(on a CPU the tiny one) with its token embedding on the CPU and its Transformer "
                "layers on the GPU, the embedding's activations and their gradients crossing "
                "through pinned host buffers allocated once and reused every step, against the "
                "same split crossing through fresh pageable memory: the bytes crossing per step "
                "(counted) and the step time", literal=True),
        Reading("the split against one unit", "the split (reused buffers) against everything "
                "on the GPU: its step time and the device memory the table frees, shown "
                "beside")),
    decides="the reused buffers moving no more bytes per step than the fresh copies (counted) "
            "and their step time below the fresh copies' in every run (samples/s above 1x "
            "beyond noise)", steps=("placement",))
def placement(ctx: Context, claim) -> Finding | None:
    whole, fresh, reused = (ctx.runs("placement", placement=p, staging=st)
                            for p, st in (("all_on_device", "fresh"),
                                          ("embedding_on_cpu", "fresh"),
                                          ("embedding_on_cpu", "reused")))
    pairs = ctx.paired(reused, fresh)
    if not whole or not pairs:
        return None

    def device_peak(r) -> str:
        peak = r.memory.get("peak_allocated_bytes")   # CUDA's allocator: the device's own
        return "" if peak is None else f", {peak / MIB:.0f} MiB device peak"

    def ms(rs) -> str:
        return "/".join(f"{median_ms(r):.3g}" for r in rs) + " ms"

    moved = {name: rs[0].metrics.get("crossing_bytes_per_step", 0)
             for name, rs in (("fresh", fresh), ("reused", reused))}
    text = (f"Transformer ({whole[0].params['size']}, batch {whole[0].params['batch_size']}), "
            f"a {whole[0].metrics.get('table_bytes', 0) / MIB:.3g} MiB token embedding; step "
            f"time per run: all on the device {ms(whole)}{device_peak(whole[0])}; embedding on "
            f"the CPU, fresh copies {ms(fresh)}, reused pinned buffers {ms(reused)}"
            f"{device_peak(reused[0])}; {moved['fresh'] / MIB:.3g} and "
            f"{moved['reused'] / MIB:.3g} MiB cross per step")
    speeds = [ctx.rate_ratio(r, f) for r, f in pairs]
    split = [ctx.rate_ratio(r, w) for r, w in ctx.paired(reused, whole)]
    readings = {"the split against one unit": reading_runs(split, 1.0)}
    figures = {"reused_over_fresh": figure("reused / fresh staging samples/s", median_of(speeds),
                                           "x"),
               "split_over_whole": figure("embedding on CPU (reused) / all on device samples/s",
                                          median_of(split) if split else None, "x")}
    if moved["reused"] > moved["fresh"]:
        return Finding(FAILS, f"{text}: the reused buffers moved more", figures,
                       noisy(*fresh, *reused), readings=readings)
    return ctx.confirmed(claim, speeds, f"{text}; reused over fresh samples/s:", figures,
                         noisy(*fresh, *reused), readings)


def _ddp(ctx: Context, model: str = "transformer") -> dict:
    """The DDP selection run's records of `model` by (hook, sync)."""
    return {(r.params["hook"], r.params["sync"]): r for r in ctx.ok("ddp")
            if r.params.get("model", model) == model}


def _passes(r, base) -> str:
    """Why a compressing run does not count ("" when it does): it must have sent fewer bytes
    than fp32 gradients and reached the plain run's held-out loss within 2%."""
    sent, loss0, loss = r.metrics.get("sent_vs_fp32", 1.0), base.metrics.get("eval_loss"), \
        r.metrics.get("eval_loss")
    if not (sent < 1 and r.metrics.get("compressed", True)):
        return f"did not compress (sent {sent:.2f} of fp32's bytes)"
    if loss is None or loss0 is None or loss > loss0 * (1 + LOSS_TOLERANCE):
        return f"held-out loss {loss_text(loss)} misses plain all-reduce's {loss_text(loss0)}"
    return ""


@measured(
    cites=("G.1.9",), chapter="08", figure="3x", low=3.0, about=LINKS,
    stated="explain how to achieve a 3x training speedup through gradient compression and "
           "communication optimization",
    readings=(
        Reading("compression + no_sync", "DDP training samples/s of the GPT-2-small-shaped "
                "Transformer at GPT-2's published global batch (512 sequences of 1024 tokens: "
                "micro-batches of 8 accumulated over the box's ranks; on a CPU the tiny one, 4 "
                "micro-batches of 16 per step): the fastest compressing hook (fp16 or PowerSGD) "
                "with no_sync accumulation against the same training without compression or "
                "no_sync (plain all-reduce after every micro-batch), both timed again in each "
                "of three runs; the plain step's communication share and the share 3x would "
                "need shown beside", literal=True),
        Reading("compression alone", "fp16 compression against plain all-reduce, both syncing "
                "every micro-batch"),
        Reading("no_sync alone", "plain all-reduce with no_sync against after every "
                "micro-batch"),
        Reading("ResNet-50", "the same on ResNet-50 at its published 256 images (32 per GPU), "
                "where torchvision is installed")),
    decides="the confirmed speed-up in every run against 3x; it counts only if the hook sent "
            "fewer bytes than fp32 gradients and reached the plain run's held-out loss within 2%",
    steps=("ddp", "ddp_confirm"))
def compression(ctx: Context, claim) -> Finding | None:
    runs = _ddp(ctx)
    base = runs.get(PLAIN)
    candidates = [r for (h, s), r in runs.items() if s == "no_sync" and h != "allreduce"]
    _, again = ctx.winner("ddp", candidates)
    pairs = ctx.paired(again, ctx.again("ddp_confirm", base))
    if base is None or not pairs:
        return None
    hook, p = again[0].params["hook"], base.params
    speeds = [ctx.rate_ratio(a, b) for a, b in pairs]
    model = f"{p.get('model', 'an MLP')} ({p['size']}, {p.get('precision', 'fp32')})" \
        if p.get("size") else "an MLP"
    parts = [f"DDP of {model} over {p['world_size']} ranks ({p['backend']}), global batch "
             f"{base.metrics.get('global_batch', '?')}: {p['accum_steps']} micro-batches of "
             f"{p.get('micro_batch', 32)} per rank per step; plain all-reduce after every "
             f"micro-batch {base.throughput:.4g} samples/s"] + [
        f"{r.params['hook']} + no_sync {r.throughput:.4g} (sent "
        f"{r.metrics.get('sent_vs_fp32', 1):.3g} of fp32's bytes per sync)" for r in candidates]
    parts.append(f"the fastest, {hook}, and plain all-reduce timed again per run: " + ", ".join(
        f"{a.throughput:.4g} / {b.throughput:.4g}" for a, b in pairs))
    figures = {"speedup": figure(f"{hook} + no_sync / plain samples/s (confirmed)",
                                 median_of(speeds), "x")}
    readings, quiet = {}, runs.get(("allreduce", "no_sync"))
    for name, key, run in (("no_sync alone", "no_sync_alone", quiet), ("compression alone",
                           "compression_alone", runs.get(("fp16_compress",
                                                          "every_micro_batch")))):
        if run is not None:
            v, s = ctx.rate_ratio(run, base)
            readings[name] = (three_way(v, s, 3.0), ws(v, s))
            figures[key] = figure(f"{name}: samples/s over plain", v, "x")
    resnet = _ddp(ctx, "resnet50")
    if resnet.get(PLAIN) is not None:
        best = max((r for (h, s), r in resnet.items() if s == "no_sync" and h != "allreduce"),
                   key=lambda r: r.throughput, default=None)
        if best is not None:
            v, s = ctx.rate_ratio(best, resnet[PLAIN])
            readings["ResNet-50"] = (three_way(v, s, 3.0), f"{best.params['hook']} + no_sync "
                                     f"{ws(v, s)} (one run)")
    k = p["accum_steps"]
    if quiet is not None and k > 1:
        share = 100 * k / (k - 1) * (median_ms(base) - median_ms(quiet)) / median_ms(base)
        # the share 3x needs (Amdahl) when a sync sends `sent_vs_fp32` of fp32's bytes once
        # per k micro-batches instead of all after each one
        saved = 1 - again[0].metrics.get("sent_vs_fp32", 1.0) / k
        need = 100 * (2 / 3) / saved if saved > 0 else float("inf")
        parts.append(f"the plain step's communication share, estimated from its two sync modes "
                     f"(k/(k-1) x the time no_sync saves): {share:.0f}%; 3x needs "
                     + (f"at least {need:.0f}% with {hook}'s bytes once per {k} micro-batches "
                        "(67% if communication vanished)" if need <= 100 else
                        f"more than all of it with {hook}'s bytes once per {k} micro-batches"))
        figures["comm_share_pct"] = figure("plain step: communication share (estimated)",
                                           share, "%")
    why = _passes(again[0], base)
    if why:
        return Finding(FAILS, "; ".join(parts) + f"; {hook} {why}", figures,
                       noisy(base, *again), readings=readings)
    return ctx.confirmed(claim, speeds, "; ".join(parts) + "; the speed-up:", figures,
                         noisy(base, *again), readings)


ONE_BOX = ("needs ranks on more than one node: the sentence is about cross-node transfer, and "
           "on one box (any number of GPUs) both all-reduces run over the same links; run "
           "`python -m a800lab comm collectives --op all_reduce hierarchical_all_reduce` under "
           "torchrun across nodes (chapter 08, docs/cluster.md)")


@measured(
    cites=("G.7.2",), chapter="08", figure="40%+", low=40.0, unit="%", about=LINKS,
    stated="adopting a hierarchical AllReduce algorithm that separates local gradient "
           "aggregation from global synchronization, combined with the A800's NVLink high-speed "
           "interconnect technology, reduces communication overhead by more than 40%",
    readings=(
        Reading("across nodes", "the time of the lab's hierarchical all-reduce (reduce-scatter "
                "in each node over NVLink, all-reduce across nodes, all-gather in the node) "
                "against the flat all-reduce on the same ranks, at the largest message, with "
                "ranks on two or more nodes (torchrun)", literal=True),
        Reading("one box", "the box's two halves as two 'nodes': the method and a correct sum, "
                "not the cross-node latency the sentence is about: shown beside")),
    decides="the time cut at the largest message against 40% in every run, with ranks on 2+ "
            "nodes: the report starts its ranks on this box only, so in it the row cannot be "
            "tested; `comm collectives` under torchrun across nodes measures it (chapter 08)",
    steps=("hierarchical",))
def hierarchical(ctx: Context, claim) -> Finding | None:
    flat, hier, leader = ({r.params["size_bytes"]: r for r in ctx.runs("hierarchical", op=op)}
                          for op in ("all_reduce", "hierarchical_all_reduce", "leader_all_reduce"))
    sizes = sorted(set(flat) & set(hier))
    if not sizes:
        return None
    cuts = {s: cut_pct(hier[s], flat[s], median_ms) for s in sizes}
    top = hier[sizes[-1]]
    runs = [cut_pct(h, f, median_ms) for h, f in ctx.paired(
        ctx.again("hierarchical", top), ctx.again("hierarchical", flat[sizes[-1]]))]
    # nodes: a param of points across nodes; "hosts" in records of an earlier a800lab
    nodes = top.params.get("nodes") or top.metrics.get("hosts", 1)
    text = (f"{top.params['world_size']} ranks ({top.params['backend']}) on {nodes} node(s), "
            f"groups of {top.params.get('ranks_per_node')}: " + ", ".join(
                f"{s / MIB:g} MiB flat {median_ms(flat[s]):.3g} ms, hierarchical "
                f"{median_ms(hier[s]):.3g} ms ({cuts[s][0]:+.0f}%)" + (
                    f", through node leaders {median_ms(leader[s]):.3g} ms "
                    f"({cut_pct(leader[s], flat[s], median_ms)[0]:+.0f}%)" if s in leader
                    else "") for s in sizes)
            + "; at the largest message the time is cut by")
    figures = {"cut_pct": figure("hierarchical vs flat all-reduce: time cut", median_of(runs),
                                 "%")}
    if nodes < 2:
        return Finding(UNTESTABLE, f"{text} {runs_text(runs, '%')}", figures, noisy(top),
                       ONE_BOX)
    return ctx.confirmed(claim, runs, text, figures, noisy(*flat.values(), *hier.values()))


def _accum_pair(ctx: Context):   # the deciding model's, syncing every micro-batch or not
    runs = _ddp(ctx)
    return runs.get(PLAIN), runs.get(("allreduce", "no_sync"))


@measured(
    cites=("G.8.5",), chapter="08", figure="30%+", low=30.0, unit="%", cpu_answers=True,
    stated="adopting gradient accumulation and micro-batch pipelining techniques can reduce the "
           "frequency of cross-node communication in distributed training scenarios, and, "
           "combined with optimization tools such as NVIDIA Magnum IO, can effectively cut more "
           "than 30% of cross-device data-transfer overhead",
    readings=(
        Reading("bytes per sample", "bytes one rank hands to all-reduce per training sample in "
                "DDP: no_sync accumulation (4 micro-batches, one sync) against syncing every "
                "micro-batch, counted where DDP hands its buckets to torch.distributed",
                literal=True),
        Reading("micro-batch pipelining", "pipeline parallelism's micro-batches",
                unmeasured="the lab has no pipeline parallelism; the accumulation half only")),
    decides="the bytes per sample cut against 30% (counted)", steps=("ddp",))
def accum_traffic(ctx: Context, claim) -> Finding | None:
    every, quiet = _accum_pair(ctx)
    if every is None or quiet is None:
        return None
    b0, b1 = every.metrics["bytes_per_sample"], quiet.metrics["bytes_per_sample"]
    cut = 100 * (1 - b1 / b0)
    return ctx.finding(claim, cut, 0.0, f"bytes handed to all-reduce per training sample, "
                       f"{every.params['accum_steps']} micro-batches per step: {b0 / 1024:.4g} "
                       f"KiB syncing every micro-batch, {b1 / 1024:.4g} KiB with no_sync: cut "
                       f"{cut:.0f}%", {"traffic_cut_pct": figure("no_sync: bytes per sample cut",
                                                                 cut, "%")})


@measured(
    cites=("G.4.4",), chapter="08", cpu_answers=True,
    stated="reducing communication frequency through gradient accumulation",
    readings=(Reading("calls per sample", "all-reduce calls per training sample in DDP with 4 "
                      "micro-batches per step: no_sync accumulation against syncing every "
                      "micro-batch, counted", literal=True),),
    decides="fewer all-reduce calls per sample with no_sync (counted)", steps=("ddp",))
def accum_frequency(ctx: Context, claim) -> Finding | None:
    every, quiet = _accum_pair(ctx)
    if every is None or quiet is None:
        return None
    c0, c1 = (r.metrics["allreduce_calls_per_sample"] for r in (every, quiet))
    return Finding(HOLDS if c1 < c0 else FAILS, f"all-reduce calls per training sample: "
                   f"{c0:.3g} syncing every micro-batch, {c1:.3g} with no_sync "
                   f"({every.metrics['syncs_per_step']} vs {quiet.metrics['syncs_per_step']} "
                   "syncs per step)", {"calls_ratio": figure("no_sync / every micro-batch calls",
                                                            c1 / c0, "x")})


@measured(
    cites=("G.9.3",), chapter="13", figure="23ms -> 9ms, 27%", low=23 / 9,
    about="the customer's model on A800s",
    stated="through quantization-aware training and FP16/FP32 mixed-precision configuration, "
           "while maintaining diagnostic accuracy, shortened the time of a single inference "
           "from 23ms to 9ms, and reduced the cluster's resource-usage cost by 27%",
    readings=(
        Reading("the hospital's model", "a single inference of the hospital's medical-image "
                "model, 23 ms before, 9 ms after (2.56x), and its cluster's cost", literal=True,
                unmeasured="the model, its data, the cluster and the before/after "
                "configuration are the customer's; the guide gives none of them"),
        Reading("the method on the lab's Transformer", "one request (batch 1) of the lab's "
                "Transformer, fp32 against fp16 weights, p50 latency, the fp16 output checked "
                "against fp32's: what to run on your own model (chapter 13)")),
    decides="nothing here: the 23 ms and 9 ms are the customer's; the method's figures are "
            "shown beside", steps=("inference",),
    not_measurable="the hospital's model, its data, its cluster and the configuration before "
                   "and after are the customer's; the guide gives none of them, so nothing here "
                   "can rerun its 23 ms -> 9 ms; the method is shown on the lab's Transformer")
def case_hospital(ctx: Context, claim) -> Finding | None:
    fp32, fp16 = ctx.one("inference", precision="fp32"), ctx.one("inference", precision="fp16")
    if fp32 is None or fp16 is None:
        return None
    speed, spread = ctx.rate_ratio(fp16, fp32)
    text = (f"the lab's Transformer at batch 1: fp32 p50 {median_ms(fp32):.3g} ms, fp16 "
            f"{median_ms(fp16):.3g} ms ({ws(speed, spread)}; the guide's case: 2.56x); "
            f"measure yours: python -m a800lab sweep serve --user-model your_model.py "
            f"--batch-size 1 --precision fp32 fp16 --out serve.jsonl")
    return Finding(NOT_MEASURABLE, text, {"fp16_speedup": figure(
        "the lab's Transformer, batch 1: fp32 / fp16 latency", speed, "x")}, noisy(fp32, fp16),
        reason=claim.readings[0].unmeasured, readings={
            "the method on the lab's Transformer": (NOT_MEASURABLE, f"{ws(speed, spread)} "
                                                    "faster in fp16 at batch 1, not the "
                                                    "customer's model")})
