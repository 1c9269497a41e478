"""The overlap speed-up of DataLoader workers (and, on a GPU, pinned memory and non_blocking
copies), measured side by side in one run.

    python benchmarks/bench_overlap.py [--workers 0 1 2 4] [--preprocess-ms 0.2] [--rounds 3]

For each per-sample cost kind ("wait": a sleep, like reading storage; "cpu": CPU-bound work,
like decoding) it times a800lab's pipeline_point at every worker count, interleaved over rounds
so drift hits them alike, and prints samples/s, the device's idle fraction and the speed-up
over `num_workers=0`. On a GPU it then compares pin_memory x non_blocking at the largest worker
count, and the two-stream copy/compute overlap. Without a GPU the device stage runs on the CPU
(beside the workers, on the same cores) and pinned memory does not exist: those rows say so. A
benchmark run by hand, not a test.
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch

from a800lab.core.backends import HAS_CUDA
from a800lab.core.noise import default_cpu_threads
from a800lab.workloads.pipeline import pipeline_point
from a800lab.workloads.streams import stream_overlap, why_no_streams


def _median_point(rounds: int, **kwargs) -> dict:
    points = [pipeline_point(**kwargs) for _ in range(rounds)]
    return {"throughput": statistics.median(p["throughput"] for p in points),
            "idle_fraction": statistics.median(p["idle_fraction"] for p in points),
            "per_round": [p["throughput"] for p in points]}


def run(workers: list[int], preprocess_ms: float, batch_size: int, rounds: int,
        budget_s: float) -> dict:
    device = "cuda" if HAS_CUDA else "cpu"
    if device == "cpu":
        torch.set_num_threads(default_cpu_threads())
    common = {"preprocess_ms": preprocess_ms, "batch_size": batch_size, "budget_s": budget_s,
              "device": device}
    report = {"device": device, "torch_threads": torch.get_num_threads(), "workers": {}}
    for cost in ("wait", "cpu"):
        per_round = {n: [] for n in workers}
        idle = {n: [] for n in workers}
        for _ in range(rounds):  # interleaved: every worker count once per round
            for n in workers:
                point = pipeline_point(num_workers=n, cost=cost, **common)
                per_round[n].append(point["throughput"])
                idle[n].append(point["idle_fraction"])
        base = statistics.median(per_round[workers[0]])
        report["workers"][cost] = [
            {"num_workers": n, "samples_per_s": statistics.median(per_round[n]),
             "idle_fraction": statistics.median(idle[n]),
             "speedup": statistics.median(per_round[n]) / base, "per_round": per_round[n]}
            for n in workers]
    if device == "cuda":
        report["pinned"] = {
            f"pin_memory={pin}, non_blocking={nb}": _median_point(
                rounds, num_workers=max(workers), pin_memory=pin, non_blocking=nb, cost="wait",
                **common)
            for pin in (False, True) for nb in (False, True)}
        report["streams"] = {f"pinned={pinned}": stream_overlap(pinned=pinned, device="cuda")
                             for pinned in (True, False)}
    else:
        report["pinned"] = ("not measurable: pinned memory and non_blocking copies need a CUDA "
                            "device (there is no host-to-device copy on a CPU)")
        report["streams"] = why_no_streams("cpu")
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 1, 2, 4])
    parser.add_argument("--preprocess-ms", type=float, default=0.2)
    parser.add_argument("--batch-size", type=int, default=None,
                        help="default 64 on a CPU, 256 on a GPU")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--budget-s", type=float, default=0.3)
    args = parser.parse_args()
    batch = args.batch_size or (256 if HAS_CUDA else 64)
    report = run(args.workers, args.preprocess_ms, batch, args.rounds, args.budget_s)
    print(f"{report['device']}, {report['torch_threads']} torch thread(s), batch {batch}, "
          f"{args.preprocess_ms} ms per sample, median of {args.rounds} rounds")
    for cost, rows in report["workers"].items():
        for row in rows:
            print(f"  cost={cost:<4} workers={row['num_workers']}: "
                  f"{row['samples_per_s']:8.0f} samples/s, idle {row['idle_fraction']:.2f}, "
                  f"x{row['speedup']:.2f} vs {args.workers[0]} workers")
    pinned = report["pinned"]
    if isinstance(pinned, str):
        print(f"  pinned memory: {pinned}")
    else:
        for name, row in pinned.items():
            print(f"  {name}: {row['throughput']:.0f} samples/s, idle "
                  f"{row['idle_fraction']:.2f}")
    print(json.dumps(report, default=str))


if __name__ == "__main__":
    main()
