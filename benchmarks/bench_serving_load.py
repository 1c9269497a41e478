"""What the open-loop load generator can measure: whether it keeps up with an offered rate, its
own cost per request, and how late it wakes for an arrival.

    python benchmarks/bench_serving_load.py [--duration-s 2] [--rounds 3]

1. Keeping up: a zero-cost server (answers at once) behind the batcher (max batch 64, no
   delay) under constant and Poisson arrivals at 1,000 ... 50,000 requests/s: achieved /
   offered (target: >= 0.99 up to at least 20,000 requests/s on a 2-core CPU) and the p99 of
   the loop's own latency for a request.
2. Its cost per request: the zero-cost server offered far more than it can take (4 x 10^6
   requests/s, constant), with max batch 1 (a batch per request: the worst case) and 64: the
   requests/s the loop then answers is its capacity, and 1 / that is what scheduling,
   batching and bookkeeping cost per request. A server faster than this per request cannot
   be measured by it; a GPU model's batch takes far longer.
3. Scheduling error: Poisson arrivals at 1,000 requests/s to the zero-cost server: how late
   the loop woke for an arrival that found it idle, p50 / p99 / max (target: p99 <= 1 ms).

Each figure is the median of `--rounds` runs, with their range. The CPU's load over the runs
is said: on a shared machine the loop loses its core now and then. Prints JSON. A benchmark
run by hand, not a test.
"""

from __future__ import annotations

import argparse
import json
import statistics

import numpy as np

from a800lab.core.noise import CpuLoadMeter
from a800lab.workloads.serving.arrivals import Arrivals, arrival_times
from a800lab.workloads.serving.schedule import DRAIN_SHARE, run_schedule, summarise

RATES = (1_000, 5_000, 10_000, 20_000, 30_000, 50_000)


def zero_cost(_n: int) -> None:
    """A server that answers at once."""


def replay(arrival: str, rate: float, duration_s: float, max_batch: int = 64) -> dict:
    times = arrival_times(Arrivals(arrival, rate, duration_s))
    trace = run_schedule(zero_cost, times, max_batch=max_batch, max_delay_s=0.0,
                         end_s=duration_s * (1 + DRAIN_SHARE))
    got = summarise(trace, times, window_s=duration_s, max_batch=max_batch)
    late = np.asarray(trace.late_s) * 1e3
    return {**got, "late_p50_ms": float(np.percentile(late, 50)) if len(late) else None,
            "late_max_ms": float(late.max()) if len(late) else None}


def rounds_of(make, rounds: int, keys: tuple[str, ...]) -> dict:
    runs = [make() for _ in range(rounds)]
    return {k: {"median": statistics.median(r[k] for r in runs),
                "range": [min(r[k] for r in runs), max(r[k] for r in runs)]}
            for k in keys}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration-s", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    meter = CpuLoadMeter().start()
    keeping_up = []
    for arrival in ("constant", "poisson"):
        for rate in RATES:
            def run(arrival=arrival, rate=rate):
                got = replay(arrival, rate, args.duration_s)
                return {**got, "ratio": got["achieved_rate"] / got["offered_rate"]}
            keeping_up.append({"arrival": arrival, "rate_rps": rate, **rounds_of(
                run, args.rounds, ("ratio", "p99_ms", "mean_batch"))})
    capacity = {batch: rounds_of(lambda batch=batch: replay("constant", 4e6, 0.5, batch),
                                 args.rounds, ("achieved_rate",))["achieved_rate"]
                for batch in (1, 64)}
    lateness = rounds_of(lambda: replay("poisson", 1_000.0, args.duration_s), args.rounds,
                         ("late_p50_ms", "late_p99_ms", "late_max_ms"))
    load = meter.stop()
    print(json.dumps({
        "keeping_up": keeping_up,
        "kept_up_to_rps": max((k["rate_rps"] for k in keeping_up
                               if k["ratio"]["range"][0] >= 0.99), default=None),
        "loop_capacity_rps": {f"max_batch {b}": c for b, c in capacity.items()},
        "loop_cost_us_per_request": {f"max_batch {b}": 1e6 / c["median"]
                                     for b, c in capacity.items()},
        "scheduling_error_at_1000_rps": lateness,
        "cpu": {"others_busy_cores": load["others_busy_cores"],
                "self_busy_cores": load["self_busy_cores"]},
    }, indent=1))


if __name__ == "__main__":
    main()
