"""What the serving harness costs, and whether it recovers a known latency distribution.

    python benchmarks/bench_serving_harness.py [--rounds 5] [--requests 400] [--device auto]

1. Overhead: one Server's request (the transformer preset, batch 8: tiny on a CPU, medium on
   a GPU) timed by a bare loop (perf_counter around each call; on a GPU a synchronise inside
   the request, as the harness has), by time_requests (measure() as serve_point calls it) and
   by time_requests inside a sweep point's measured window (measure_point), interleaved over
   `--rounds` rounds in this one process. Reports each median and harness / bare (target:
   <= 1.02).
2. Recovery: requests that busy-wait for latencies drawn (stratified, shuffled) from a
   lognormal with p50 2 ms and p99 6.4 ms, timed with the real clock by time_requests: the
   recovered p50 and p99 against the true ones (target: within 5%). On a shared machine a
   descheduled request lands in the tail: run it on a quiet one.

Prints JSON. A benchmark run by hand, not a test.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import time
from statistics import NormalDist

import torch

from a800lab.core.backends import resolve_device
from a800lab.core.environment import environment, fingerprint
from a800lab.core.noise import CpuLoadMeter, assess, cpu_conditions, default_cpu_threads
from a800lab.core.sweep import measure_point, thread_count
from a800lab.workloads.models.presets import default_size, preset
from a800lab.workloads.serving.point import Server, batch_inputs, time_requests
from a800lab.workloads.serving.spec import ServeSpec


def overhead(device: str, rounds: int, requests: int) -> dict:
    spec = ServeSpec("transformer", default_size(device), 8)
    task = preset(spec.model, spec.size)
    server = Server(spec, task, device, batch_inputs(task, spec.batch_size, device))
    server.warm_up()
    env = environment(device)
    env["fingerprint"] = fingerprint(env)

    def bare() -> float:
        samples = []
        for _ in range(requests):
            started = time.perf_counter()
            server.request()
            samples.append((time.perf_counter() - started) * 1e3)
        return statistics.median(samples)

    def harness() -> float:
        return time_requests(server.request, device=device, requests=requests,
                             budget_s=0.0).median_ms

    def in_window() -> float:
        record = measure_point(lambda: {"timing": time_requests(
            server.request, device=device, requests=requests, budget_s=0.0),
            "throughput": 1.0}, {}, workload="bench", device=device, env=env)
        return statistics.median(record.time_ms)

    medians = {"bare": [], "time_requests": [], "point_window": []}
    for _ in range(rounds):
        for name, fn in (("bare", bare), ("time_requests", harness),
                         ("point_window", in_window)):
            medians[name].append(fn())
    summary = {name: statistics.median(v) for name, v in medians.items()}
    return {"config": f"transformer {spec.size}, batch {spec.batch_size}, fp32",
            "requests_per_round": requests, "rounds": rounds, "median_ms": summary,
            "time_requests_over_bare": summary["time_requests"] / summary["bare"],
            "point_window_over_bare": summary["point_window"] / summary["bare"],
            "target_ratio_at_most": 1.02, "per_round_ms": medians}


def recovery(requests: int, seed: int = 0) -> dict:
    sigma, p50 = 0.5, 2.0
    true = {q: p50 * math.exp(sigma * NormalDist().inv_cdf(q / 100)) for q in (50, 90, 99)}
    draws = [p50 * math.exp(sigma * NormalDist().inv_cdf((i + 0.5) / requests))
             for i in range(requests)]
    random.Random(seed).shuffle(draws)
    queue = iter(draws * 2)  # warm-up takes a few first

    def request() -> None:
        until = time.perf_counter() + next(queue) / 1e3
        while time.perf_counter() < until:
            pass

    meter = CpuLoadMeter().start()
    timing = time_requests(request, device="cpu", requests=requests, budget_s=0.0)
    noise = assess(timing.samples_ms, cpu_conditions(meter.stop()), on_cpu=True)
    got = {q: timing.percentile_ms(q) for q in true}
    # the load meter's verdict only: these latencies vary by design, so the spread and the
    # "far above the fastest" rule say nothing here
    busy = [r for r in noise["reasons"] if r.startswith("oversubscribed")]
    return {"true_ms": true, "recovered_ms": got,
            "rel_error": {q: got[q] / true[q] - 1 for q in true}, "target_rel_error": 0.05,
            "requests": len(timing.samples_ms), "contended": bool(busy), "contention": busy}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--only", choices=["overhead", "recovery"], default=None)
    args = parser.parse_args()
    device = resolve_device(args.device)
    with thread_count(default_cpu_threads() if device == "cpu" else None), \
            torch.inference_mode(False):
        report = {"device": device}
        if args.only != "recovery":
            report["overhead"] = overhead(device, args.rounds, args.requests)
        if args.only != "overhead":
            report["recovery"] = recovery(args.requests)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
