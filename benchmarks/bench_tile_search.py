"""Tile search vs exhaustive sweep of the same grid: wall time and the winner's throughput.

    python benchmarks/bench_tile_search.py [--size 384] [--budget-s 0.1] [--device auto]

Runs the exhaustive sweep (every valid config at the full budget) and the successive-halving
search (a800lab.workloads.tiles.tune.tune, nothing reused) over the default grid of the
device's tile back end (the CPU stand-in on a machine without a GPU), then times the two winners
side by side, interleaved over several rounds, so "best-throughput ratio" compares like with
like rather than two numbers taken minutes apart. Prints JSON: wall times and their ratio, both
winners, the throughput ratio search / exhaustive, and whether the search's verdict called its
lead noise. torch's one-time start-up (a800lab.core.warmup, which the search's measured
windows would otherwise pay alone) runs before either is timed. A benchmark run by hand, not a
test; targets: the search costs <= 1/3 of the exhaustive sweep's time, and finds its winner or
says that the leaders are within noise of each other ("agrees"); run it twice, on a quiet
machine (a contended run says so).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch

from a800lab.core.backends import resolve_device
from a800lab.core.warmup import warm_runtime
from a800lab.workloads.matmul import MatmulSpec
from a800lab.workloads.tiles.config import check_config
from a800lab.workloads.tiles.point import default_tile_backend, tiled_matmul_point
from a800lab.workloads.tiles.tune import default_grid, tune


def _tflops(size, precision, backend, config, device, budget_s) -> float:
    out = tiled_matmul_point(size, size, size, precision, backend, **config, device=device,
                             budget_s=budget_s)
    return out.get("tflops") or 0.0


def run(size: int = 384, precision: str = "fp32", device: str = "auto", budget_s: float = 0.1,
        rounds: int = 5) -> dict:
    device = resolve_device(device)
    warm_runtime(device)  # torch's one-time start-up (~2 s: torch._dynamo) is neither side's
    backend = default_tile_backend(device)
    grid = default_grid(backend)
    valid = []
    for config in grid:
        try:
            check_config(MatmulSpec(size, size, size, precision, backend, **config), device)
            valid.append(config)
        except ValueError:
            pass

    started = time.perf_counter()
    exhaustive = {json.dumps(c, sort_keys=True): _tflops(size, precision, backend, c, device,
                                                         budget_s) for c in valid}
    exhaustive_s = time.perf_counter() - started
    exhaustive_best = json.loads(max(exhaustive, key=exhaustive.get))

    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        outcome = tune(size, size, size, precision, backend, grid, device=device,
                       budget_s=budget_s, store=Path(tmp) / "tuned.json", force=True)
        search_s = time.perf_counter() - started
    search_best = outcome.search.best

    side_by_side = {"search": [], "exhaustive": []}
    for _ in range(rounds):  # interleaved: drift hits both alike
        side_by_side["search"].append(_tflops(size, precision, backend, search_best, device,
                                              budget_s))
        side_by_side["exhaustive"].append(_tflops(size, precision, backend, exhaustive_best,
                                                  device, budget_s))
    medians = {name: statistics.median(values) for name, values in side_by_side.items()}
    return {
        "device": device, "backend": backend, "size": size, "precision": precision,
        "torch_threads": torch.get_num_threads(), "grid": len(grid), "valid": len(valid),
        "budget_s": budget_s, "exhaustive_s": exhaustive_s, "search_s": search_s,
        "time_ratio_search_over_exhaustive": search_s / exhaustive_s,
        "search_trials": len(outcome.records), "exhaustive_trials": len(valid),
        "exhaustive_best": exhaustive_best, "search_best": search_best,
        "same_winner": search_best == exhaustive_best,
        "side_by_side_tflops": side_by_side, "median_tflops": medians,
        "throughput_ratio_search_over_exhaustive": medians["search"] / medians["exhaustive"],
        "search_verdict": outcome.search.verdict,
        "search_inside_noise": outcome.search.inside_noise,
        "search_contended": outcome.search.contended,
        # the target: the exhaustive winner, or a verdict that says the leaders are within noise
        "agrees": search_best == exhaustive_best or bool(outcome.search.inside_noise),
        "target_time_ratio": 1 / 3,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=384)
    parser.add_argument("--precision", default="fp32")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--budget-s", type=float, default=0.1)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(json.dumps(run(args.size, args.precision, args.device, args.budget_s, args.rounds),
                     indent=2))


if __name__ == "__main__":
    main()
