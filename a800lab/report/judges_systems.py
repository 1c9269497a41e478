"""Judging the systems claims: the loading ladder's idle cut, embedding placement, gradient
compression as a step speed-up, hierarchical all-reduce, and DDP's traffic with accumulation.

    from a800lab.report.judges_systems import JUDGES
    finding = JUDGES["compression"](ctx, CLAIMS["compression"])   # a Finding, or None

Speed-ups are ratios of whole training steps (samples/s), never of a communication time
derived by subtraction, so nothing is clipped and nothing divides by zero; the exposed
communication (step time synchronising every micro-batch minus with no_sync) is shown with its
sign.
"""

from __future__ import annotations

from ..core.units import MIB
from .claims import FAILS, HOLDS, UNTESTABLE, figure, loss_reached, reaches
from .claims import with_spread as ws
from .judge import Context, Finding, loss_text, median_ms, noisy

PLAIN = ("allreduce", "every_micro_batch")


def idle_cut(ctx: Context, claim) -> Finding | None:
    recs = ctx.ok("pipeline")
    base = next((r for r in recs if r.params["num_workers"] == 0), None)
    workers = next((r for r in recs if r.params["num_workers"] > 0
                    and not r.params["pin_memory"]), None)
    if base is None or workers is None:
        return None
    idle0 = base.metrics["idle_fraction"]
    if idle0 <= 0:
        return Finding(UNTESTABLE, f"idle {100 * idle0:.0f}% without workers", reason=(
            "the loop without workers left the device no idle time to cut at this "
            "preprocessing cost"))
    ratio, spread = ctx.rate_ratio(workers, base)   # spread of the two runs' step times
    cut = 100 * (1 - workers.metrics["idle_fraction"] / idle0)
    spread = 100 * spread / ratio * workers.metrics["idle_fraction"] / idle0
    w = workers.params["num_workers"]
    parts = [f"device idle {100 * idle0:.0f}% with 0 workers, "
             f"{100 * workers.metrics['idle_fraction']:.0f}% with {w}: a relative cut of "
             f"{ws(cut, spread, '%')} (samples/s x{ratio:.3g})"]
    figures = {"workers_cut_pct": figure("idle fraction cut by workers", cut, "%")}
    previous, idle_prev = workers, workers.metrics["idle_fraction"]
    for lever, test in (("pin_memory", lambda p: p["pin_memory"] and not p["non_blocking"]),
                        ("non_blocking", lambda p: p["pin_memory"] and p["non_blocking"])):
        rung = next((r for r in recs if test(r.params)), None)
        if rung is None:
            continue
        idle = rung.metrics["idle_fraction"]
        own = 100 * (1 - idle / idle_prev) if idle_prev > 0 else 0.0
        parts.append(f"+ {lever}: idle {100 * idle:.0f}% (its own cut {own:.0f}%)")
        figures[f"{lever}_cut_pct"] = figure(f"idle cut by {lever}", own, "%")
        previous, idle_prev = rung, idle
    if previous is not workers:
        total = 100 * (1 - idle_prev / idle0)
        parts.append(f"all levers together: {total:.0f}%")
    return Finding(ctx.decide(claim, cut, spread), "; ".join(parts), figures,
                   noisy(base, workers))


def placement(ctx: Context, claim) -> Finding | None:
    both = {p: ctx.one("placement", placement=p) for p in ("all_on_device", "embedding_on_cpu")}
    if not all(both.values()):
        return None
    split, whole = both["embedding_on_cpu"], both["all_on_device"]
    ratio, spread = ctx.rate_ratio(split, whole)

    def device_peak(r) -> str:
        peak = r.memory.get("peak_allocated_bytes")   # CUDA's allocator: the device's own
        return "" if peak is None else f" ({peak / MIB:.0f} MiB device peak)"

    table_mib = (whole.metrics.get("table_bytes") or 0) / MIB
    text = (f"a {table_mib:.0f} MiB embedding table: all on the device {whole.throughput:.4g} "
            f"samples/s{device_peak(whole)}, table on the CPU {split.throughput:.4g}"
            f"{device_peak(split)}: {ws(ratio, spread)}; "
            f"{split.metrics.get('crossing_bytes_per_step', 0) / MIB:.2f} MiB cross per step "
            "split")
    return Finding(HOLDS if reaches(ratio, spread, 1.0) else FAILS, text,
                   {"split_over_whole": figure("table on CPU / all on device samples/s", ratio,
                                               "x")}, noisy(split, whole))


def _ddp(ctx: Context) -> dict:
    return {(r.params["hook"], r.params["sync"]): r for r in ctx.ok("ddp")}


def compression(ctx: Context, claim) -> Finding | None:
    runs = _ddp(ctx)
    base = runs.get(PLAIN)
    candidates = {h: r for (h, s), r in runs.items() if s == "no_sync" and h != "allreduce"}
    if base is None or not candidates:
        return None
    loss0 = base.metrics.get("eval_loss")
    parts, figures, passing = [], {}, {}
    for hook, r in candidates.items():
        speed, spread = ctx.rate_ratio(r, base)
        sent = r.metrics.get("sent_vs_fp32", 1.0)
        compressed = sent < 1 and r.metrics.get("compressed", True)
        trains = loss_reached(r.metrics.get("eval_loss"), loss0)
        checks = ("" if compressed else f"; did not compress (sent {sent:.2f} of fp32's bytes)")
        checks += "" if trains else (f"; held-out loss {loss_text(r.metrics.get('eval_loss'))}"
                                     f" misses plain all-reduce's {loss0:.4g} (within 2%)")
        parts.append(f"{hook} + no_sync {ws(speed, spread)} (sent {sent:.3g} of fp32's bytes per "
                     f"sync){checks}")
        figures[f"{hook}_speedup"] = figure(f"{hook} + no_sync / plain samples/s", speed, "x")
        if compressed and trains:
            passing[hook] = (speed, spread)
    quiet = runs.get(("allreduce", "no_sync"))
    if quiet is not None:
        alone = ", ".join(f"{h} {r.throughput / quiet.throughput:.3g}x"
                          for h, r in candidates.items())
        exposed = median_ms(base) - median_ms(quiet)
        parts.append(f"compression alone (both no_sync): {alone}; exposed communication of "
                     f"syncing every micro-batch: {exposed:+.3g} ms per step")
    head = (f"DDP step over {base.params['world_size']} ranks ({base.params['backend']}), "
            f"{base.params['accum_steps']} micro-batches: plain all-reduce syncing every "
            f"micro-batch {base.throughput:.4g} samples/s (loss {loss0:.4g}); ")
    if not passing:
        return Finding(FAILS, head + "; ".join(parts) + "; no compressing hook passed the loss "
                       "and bytes checks", figures, noisy(*runs.values()))
    best = max(passing, key=lambda h: passing[h][0])
    speed, spread = passing[best]
    figures["speedup"] = figure(f"{best} + no_sync / plain samples/s", speed, "x")
    return Finding(ctx.decide(claim, speed, spread), head + "; ".join(parts) + f"; best: {best}",
                   figures, noisy(*runs.values()))


def hierarchical(ctx: Context, claim) -> Finding | None:
    flat = {r.params["size_bytes"]: r for r in ctx.ok("hierarchical", op="all_reduce")}
    hier = {r.params["size_bytes"]: r
            for r in ctx.ok("hierarchical", op="hierarchical_all_reduce")}
    sizes = sorted(set(flat) & set(hier))
    if not sizes:
        return None
    cuts = {s: ctx.time_cut(hier[s], flat[s]) for s in sizes}
    top = sizes[-1]
    cut, spread = (100 * v for v in cuts[top])
    first = hier[top]
    text = (f"{first.params['world_size']} ranks ({first.params['backend']}), groups of "
            f"{first.params.get('ranks_per_node')}: " + ", ".join(
                f"{s / MIB:g} MiB flat {median_ms(flat[s]):.3g} ms, hierarchical "
                f"{median_ms(hier[s]):.3g} ms ({100 * cuts[s][0]:+.0f}%)" for s in sizes)
            + f"; at the largest message the time is cut by {ws(cut, spread, '%')}")
    return Finding(ctx.decide(claim, cut, spread), text,
                   {"cut_pct": figure("hierarchical vs flat all-reduce: time cut", cut, "%")},
                   noisy(*flat.values(), *hier.values()))


def _accum_pair(ctx: Context):
    runs = _ddp(ctx)
    return runs.get(PLAIN), runs.get(("allreduce", "no_sync"))


def accum_traffic(ctx: Context, claim) -> Finding | None:
    every, quiet = _accum_pair(ctx)
    if every is None or quiet is None:
        return None
    b0, b1 = every.metrics["bytes_per_sample"], quiet.metrics["bytes_per_sample"]
    cut = 100 * (1 - b1 / b0)
    return Finding(ctx.decide(claim, cut), f"bytes handed to all-reduce per training sample, "
                   f"{every.params['accum_steps']} micro-batches per step: {b0 / 1024:.4g} KiB "
                   f"syncing every micro-batch, {b1 / 1024:.4g} KiB with no_sync: cut {cut:.0f}%",
                   {"traffic_cut_pct": figure("no_sync: bytes per sample cut", cut, "%")})


def accum_frequency(ctx: Context, claim) -> Finding | None:
    every, quiet = _accum_pair(ctx)
    if every is None or quiet is None:
        return None
    c0, c1 = (r.metrics["allreduce_calls_per_sample"] for r in (every, quiet))
    return Finding(HOLDS if c1 < c0 else FAILS, f"all-reduce calls per training sample: "
                   f"{c0:.3g} syncing every micro-batch, {c1:.3g} with no_sync "
                   f"({every.metrics['syncs_per_step']} vs {quiet.metrics['syncs_per_step']} "
                   "syncs per step)", {"calls_ratio": figure("no_sync / every micro-batch "
                                                             "calls", c1 / c0, "x")})


JUDGES = {"idle_cut": idle_cut, "placement": placement, "compression": compression,
          "hierarchical": hierarchical, "accum_traffic": accum_traffic,
          "accum_frequency": accum_frequency}
