"""The training-config tuner against the exhaustive grid on the CPU presets: wall time, the
winner and the frontier of samples/s against peak memory.

    python benchmarks/bench_tune_train.py [--models mlp transformer cnn] [--target-batch 64]
                                          [--budget-s 2.0] [--device auto] [--threads 1]

Per preset, the exhaustive grid times every config of the tuner's own grid (the same bounds,
verification and trial function, a800lab.workloads.training.tune.TuneSession) once at the full
budget; then tune_train (successive halving, nothing reused) searches the same grid. Both wall
times include planning (the max-batch bounds) and verification. The winners agree when they
are the same config or when the exhaustive grid's timings of the two overlap in their middle
halves (within noise). The frontiers agree when every point of each is matched on the other by
a point using no more memory at a rate no lower than its own less the noise (the two points'
IQR / median added, at least MATCH_FLOOR). Prints JSON per preset and the totals. Targets: the
same winner or within noise, matched frontiers, tuner time <= 1/3 of the exhaustive grid's.
A benchmark run by hand, not a test.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch

from a800lab.core.backends import resolve_device
from a800lab.core.search import config_key, pareto_frontier
from a800lab.core.sweep import thread_count
from a800lab.core.warmup import warm_runtime
from a800lab.workloads.models.presets import preset
from a800lab.workloads.training.candidates import TuneSession, default_axes
from a800lab.workloads.training.max_batch import DEFAULT_MARGIN
from a800lab.workloads.training.spec import TrainSpec
from a800lab.workloads.training.tune import tune_train

MATCH_FLOOR = 0.05  # rates within 5% match even when both timings are very steady


def exhaustive(model: str, target_batch: int, device: str, budget_s: float) -> dict:
    """Every config of the tuner's grid timed once at the full budget."""
    started = time.perf_counter()
    session = TuneSession(preset(model), TrainSpec(model=model), target_batch, device,
                          axes=default_axes(device), limit_bytes=None, margin=DEFAULT_MARGIN)
    timed = []
    for config in session.plan():
        try:
            session.validate(config)
        except ValueError:
            continue
        out = session.evaluate(config, budget_s)
        if out["outcome"] == "ok":
            checked = session.verified(config)
            t = out["timing"]
            timed.append({"config": config, "samples_per_s": target_batch / (t.median_ms / 1e3),
                          "median_ms": t.median_ms, "iqr_ms": t.iqr_ms, "q25_ms": t.q25_ms,
                          "q75_ms": t.q75_ms, "peak_bytes": checked["step_peak_bytes"]})
    wall_s = time.perf_counter() - started
    best = min(timed, key=lambda c: c["median_ms"])
    return {"wall_s": wall_s, "measured": len(timed), "best": best, "timed": timed,
            "noisy": sum(bool(r.noise.get("noisy")) for r in session.records),
            "frontier": pareto_frontier(timed)}


def _noise(c: dict) -> float:
    return c["iqr_ms"] / c["median_ms"]


def unmatched(frontier: list[dict], other: list[dict]) -> list[dict]:
    """Points of `frontier` that `other` does not match (see the module docstring)."""
    out = []
    for p in frontier:
        if not any(q["peak_bytes"] <= p["peak_bytes"] and q["samples_per_s"] >=
                   p["samples_per_s"] * (1 - max(MATCH_FLOOR, _noise(p) + _noise(q)))
                   for q in other):
            out.append({"config": p["config"], "samples_per_s": p["samples_per_s"],
                        "peak_bytes": p["peak_bytes"]})
    return out


def run(model: str, target_batch: int, device: str, budget_s: float) -> dict:
    warm_runtime(device)  # torch's one-time start-up is neither side's (the first grid's, else)
    grid = exhaustive(model, target_batch, device, budget_s)
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        outcome = tune_train(model=model, target_batch=target_batch, device=device,
                             budget_s=budget_s, store=Path(tmp) / "tuned.json", force=True)
        tuner_s = time.perf_counter() - started
    entry = outcome.entry
    by_key = {config_key(c["config"]): c for c in grid["timed"]}
    theirs, ours = grid["best"], by_key.get(config_key(entry["best"]))
    same = config_key(theirs["config"]) == config_key(entry["best"])
    within = ours is not None and ours["q25_ms"] <= theirs["q75_ms"] and \
        theirs["q25_ms"] <= ours["q75_ms"]
    tuner_frontier = entry["frontier"]
    missed = unmatched(grid["frontier"], tuner_frontier)
    extra = unmatched(tuner_frontier, grid["frontier"])
    return {"model": model, "target_batch": target_batch, "configs": grid["measured"],
            "exhaustive_s": grid["wall_s"], "tuner_s": tuner_s,
            "time_ratio_tuner_over_exhaustive": tuner_s / grid["wall_s"],
            "tuner_trials": len(outcome.records), "tuner_noisy_trials": entry["noisy_trials"],
            "exhaustive_noisy_trials": grid["noisy"],
            "exhaustive_best": theirs["config"], "tuner_best": entry["best"],
            "same_winner": same, "winner_within_noise": same or within,
            "tuner_within_noise_of": entry["within_noise"],
            "exhaustive_frontier": [(c["samples_per_s"], c["peak_bytes"])
                                    for c in grid["frontier"]],
            "tuner_frontier": [(c["samples_per_s"], c["peak_bytes"]) for c in entry["frontier"]],
            "exhaustive_points_the_tuner_misses": missed,
            "tuner_points_the_grid_beats": extra, "frontiers_match": not missed and not extra}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["mlp", "transformer", "cnn"])
    parser.add_argument("--target-batch", type=int, default=64)
    parser.add_argument("--budget-s", type=float, default=2.0)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    device = resolve_device(args.device)
    results = []
    with thread_count(args.threads if device == "cpu" else None):
        threads = torch.get_num_threads()
        for model in args.models:
            results.append(run(model, args.target_batch, device, args.budget_s))
            print(json.dumps(results[-1], indent=1, default=str), flush=True)
    total = {"device": device, "torch_threads": threads,
             "budget_s": args.budget_s,
             "exhaustive_s": sum(r["exhaustive_s"] for r in results),
             "tuner_s": sum(r["tuner_s"] for r in results),
             "winners_agree": all(r["winner_within_noise"] for r in results),
             "frontiers_match": all(r["frontiers_match"] for r in results)}
    total["time_ratio_tuner_over_exhaustive"] = total["tuner_s"] / total["exhaustive_s"]
    print(json.dumps({"total": total}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
