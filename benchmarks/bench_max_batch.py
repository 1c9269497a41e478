"""The max-batch finder (model-guided) vs plain doubling then halving, for the same answer.

    python benchmarks/bench_max_batch.py [--model mlp transformer cnn] [--limit-mib 64] \
        [--precision fp32] [--device auto]

Both searches run with resolution 0 (the exact largest micro-batch under the budget), the same
margin and the same verification (three full optimizer steps of a fresh model, the first
included), so they must agree; what differs is how many trials they run and how long they take.
On a CPU the limit is the injected one (counted tensor bytes); on a GPU, without --limit-mib,
the memory free at the start (real out-of-memory errors for the doubling search). Prints JSON;
a benchmark run by hand, not a test.
"""

from __future__ import annotations

import argparse
import json

import torch

from a800lab.core.backends import resolve_device
from a800lab.core.noise import default_cpu_threads
from a800lab.workloads.models.presets import default_size
from a800lab.workloads.training.max_batch import find_max_batch_for
from a800lab.workloads.training.spec import TrainSpec


def _one(spec: TrainSpec, device: str, limit_bytes: int | None, use_model: bool) -> dict:
    result = find_max_batch_for(spec, device=device, limit_bytes=limit_bytes,
                                use_model=use_model, resolution=0)
    return {"batch_size": result.batch_size, "trials_run": result.runs,
            "trials_skipped": len(result.trials) - result.runs,
            "oom_trials": sum(t.outcome == "oom" for t in result.trials),
            "wall_s": result.wall_s, "predicted_mib": None if result.predicted_bytes is None
            else result.predicted_bytes / 2**20,
            "measured_mib": None if result.measured_bytes is None
            else result.measured_bytes / 2**20}


def run(models=("mlp", "transformer", "cnn"), precision: str = "fp32",
        limit_mib: float | None = 64, device: str = "auto") -> dict:
    device = resolve_device(device)
    limit = None if limit_mib is None else int(limit_mib * 2**20)
    out = {"device": device, "precision": precision, "limit_mib": limit_mib,
           "torch_threads": torch.get_num_threads(), "models": {}}
    for model in models:
        spec = TrainSpec(model=model, size=default_size(device), precision=precision)
        finder = _one(spec, device, limit, use_model=True)
        doubling = _one(spec, device, limit, use_model=False)
        out["models"][model] = {
            "finder": finder, "doubling": doubling,
            "same_answer": finder["batch_size"] == doubling["batch_size"],
            "trials_ratio": finder["trials_run"] / doubling["trials_run"],
            "time_ratio": finder["wall_s"] / doubling["wall_s"]}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", nargs="+", default=["mlp", "transformer", "cnn"])
    parser.add_argument("--precision", default="fp32")
    parser.add_argument("--limit-mib", type=float, default=None,
                        help="default: 64 on a CPU, the free memory on a GPU")
    parser.add_argument("--device", default="auto")
    args = parser.parse_args()
    device = resolve_device(args.device)
    if device == "cpu":
        torch.set_num_threads(default_cpu_threads())
    limit = args.limit_mib if args.limit_mib is not None else (64 if device == "cpu" else None)
    print(json.dumps(run(args.model, args.precision, limit, device), indent=2))


if __name__ == "__main__":
    main()
