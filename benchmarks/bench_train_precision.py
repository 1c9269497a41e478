"""Samples/s of the Transformer preset in fp32, tf32, bf16 and fp16 (and pure bf16), on a GPU.

    python benchmarks/bench_train_precision.py [--size medium] [--batch-size 32] \
        [--record data/train-precision-<device>.jsonl]

One sweep of a800lab.workloads.training.point.train_point over the precisions the card has, in
rounds (each round measures every precision once, so clock and thermal drift hit all alike);
per precision the median samples/s over rounds, the ratio to fp32 and to tf32, the step's peak
memory (CUDA allocated) and the loss after the training steps. --record appends every point
(with the device's metadata) to a JSON Lines file the chapters can overlay (commit it under
data/). A benchmark run by hand, not a test; without a CUDA GPU it says so and exits 0: CPU
numbers say nothing about tensor cores.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

from a800lab.core.backends import HAS_CUDA, why_unavailable
from a800lab.core.results import new_run_id
from a800lab.core.sweep import run_sweep
from a800lab.workloads.training.point import train_point
from a800lab.workloads.training.spec import precisions_for


def run(size: str = "medium", batch_size: int = 32, rounds: int = 3, budget_s: float = 1.0,
        train_steps: int = 20, record: str | None = None) -> dict:
    precisions = precisions_for("cuda")
    run_id = new_run_id()
    by_precision: dict[str, list] = {p: [] for p in precisions}
    for _ in range(rounds):
        result = run_sweep(train_point, {"precision": precisions},
                           fixed={"model": "transformer", "size": size,
                                  "batch_size": batch_size, "train_steps": train_steps,
                                  "budget_s": budget_s}, workload="train", device="cuda",
                           out=record, resume=False, run_id=run_id,
                           label=f"transformer {size}, batch {batch_size}")
        for r in result.records:
            by_precision[r.params["precision"]].append(r)
    table = {}
    for precision, records in by_precision.items():
        ok = [r for r in records if r.outcome == "ok"]
        table[precision] = {
            "samples_per_s": statistics.median(r.throughput for r in ok) if ok else None,
            "peak_allocated_mib": max((r.memory.get("peak_allocated_bytes") or 0)
                                      for r in ok) / 2**20 if ok else None,
            "loss": ok[-1].metrics["loss"] if ok else None,
            "outcomes": [r.outcome for r in records]}
    for base in ("fp32", "tf32"):
        ref = table.get(base, {}).get("samples_per_s")
        for row in table.values():
            if ref and row["samples_per_s"]:
                row[f"speedup_vs_{base}"] = row["samples_per_s"] / ref
    device = by_precision[precisions[0]][0].env.get("device_name") if precisions else None
    return {"device": device, "size": size, "batch_size": batch_size, "rounds": rounds,
            "precisions": table, "recorded_to": record}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="medium")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--budget-s", type=float, default=1.0)
    parser.add_argument("--record", default=None, help="JSON Lines file to append points to")
    args = parser.parse_args()
    if not HAS_CUDA:
        print(f"bench_train_precision needs a CUDA GPU: {why_unavailable('cuda')}; nothing "
              "measured")
        return 0
    print(json.dumps(run(args.size, args.batch_size, args.rounds, args.budget_s,
                         record=args.record), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
