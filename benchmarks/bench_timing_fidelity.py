"""Fidelity of measure(): the same matmul timed by measure() and by torch's own timers.

    python benchmarks/bench_timing_fidelity.py [--size 1024] [--device auto] [--rounds 3]

Times a size x size x size fp32 torch.matmul with a800lab's measure(), with
torch.utils.benchmark.Timer(...).blocked_autorange() and, on a GPU with Triton, with
triton.testing.do_bench, in one run, interleaved over several rounds so drift hits all of them
alike. Prints each median and the ratio measure()/reference (target 0.95-1.05). A benchmark run
by hand, not a test.
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch
import torch.utils.benchmark as tbench

from a800lab.core.backends import HAS_TRITON, resolve_device
from a800lab.core.timing import measure


def run(size: int = 1024, device: str = "auto", rounds: int = 3, budget_s: float = 1.0) -> dict:
    device = resolve_device(device)
    a = torch.randn(size, size, device=device)
    b = torch.randn(size, size, device=device)

    def fn():
        return torch.matmul(a, b)

    medians: dict[str, list[float]] = {"measure": [], "torch_timer": []}
    use_do_bench = device.startswith("cuda") and HAS_TRITON
    if use_do_bench:
        import triton.testing

        medians["do_bench"] = []
    for _ in range(rounds):
        medians["measure"].append(measure(fn, device=device, budget_s=budget_s).median_ms)
        # Timer defaults to one thread; give it the same threads measure() runs with.
        timer = tbench.Timer(stmt="fn()", globals={"fn": fn}, num_threads=torch.get_num_threads())
        medians["torch_timer"].append(timer.blocked_autorange(min_run_time=budget_s).median * 1e3)
        if use_do_bench:
            medians["do_bench"].append(
                triton.testing.do_bench(fn, rep=int(budget_s * 1e3), return_mode="median"))
    summary = {name: statistics.median(values) for name, values in medians.items()}
    return {
        "size": size, "device": device, "rounds": rounds,
        "device_name": torch.cuda.get_device_name() if device.startswith("cuda") else "cpu",
        "torch_threads": torch.get_num_threads(),
        "median_ms": summary,
        "per_round_ms": medians,
        "ratio_vs_torch_timer": summary["measure"] / summary["torch_timer"],
        "ratio_vs_do_bench": (summary["measure"] / summary["do_bench"]) if use_do_bench else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--budget-s", type=float, default=1.0)
    args = parser.parse_args()
    print(json.dumps(run(args.size, args.device, args.rounds, args.budget_s), indent=2))


if __name__ == "__main__":
    main()
