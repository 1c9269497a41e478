"""What a panel costs: ms per point added to a sweep, and the time to re-plot 1,000 points.

    python benchmarks/bench_panel_overhead.py [--points 256] [--rounds 3] [--replot-points 1000]

1. Overhead: a no-op workload swept over `--points` points by bare `run_sweep` and by an
   `Explorer` (`panel.run(wait=True)`, until the last point is drawn), interleaved over
   `--rounds` rounds in this one process, with the same device and torch threads. Reports the
   median wall time of each and the panel's added milliseconds per point (target: <= 5 ms).
2. Re-plot: a panel holding `--replot-points` recorded points (10 runs of 2 series, 20 time
   samples each, a third of them noisy) re-plots with `panel.refresh()`: results frame, figure,
   PNG, caption and table. Reports the median of `--rounds` re-plots (target: < 200 ms) and
   how that splits into building the figure and rendering its PNG.

Prints JSON. A benchmark run by hand, not a test; numbers depend on the machine (a 2-core box
without a GPU is the slow end).
"""

from __future__ import annotations

import argparse
import io
import json
import random
import statistics
import tempfile
import time
from pathlib import Path

from a800lab.core.backends import resolve_device
from a800lab.core.environment import environment
from a800lab.core.noise import default_cpu_threads
from a800lab.core.results import Record, records_to_frame
from a800lab.core.sweep import run_sweep
from a800lab.figures.sweep import throughput_and_memory_figure
from a800lab.widgets import Explorer, Range
from a800lab.widgets.panel import PNG_DPI


def noop(i):
    """The cheapest legal workload: a throughput and nothing measured."""
    return {"throughput": 1.0, "throughput_unit": "calls/s"}


def overhead(points: int, rounds: int, device: str) -> dict:
    threads = default_cpu_threads() if device == "cpu" else None
    values = list(range(points))
    bare_s, panel_s, draws = [], [], []
    panel = Explorer(noop, params={"i": Range(0, points)}, sweep="i", device=device)
    for _ in range(rounds):
        started = time.perf_counter()
        run_sweep(noop, {"i": values}, device=device, torch_threads=threads)
        bare_s.append(time.perf_counter() - started)
        drawn_before, started = panel._drawer.draws, time.perf_counter()
        panel.run(wait=True, i=values)
        panel_s.append(time.perf_counter() - started)
        draws.append(panel._drawer.draws - drawn_before)
        panel.clear()
    bare, in_panel = statistics.median(bare_s), statistics.median(panel_s)
    return {"points": points, "rounds": rounds, "bare_run_sweep_s": bare,
            "panel_s": in_panel, "added_ms_per_point": 1e3 * (in_panel - bare) / points,
            "target_added_ms_per_point": 5.0, "draws_per_panel_run": draws,
            "per_round_bare_s": bare_s, "per_round_panel_s": panel_s}


def recorded_points(count: int, device: str) -> list[Record]:
    """`count` ok records as a panel would hold them: 10 runs x 2 series, sizes as x."""
    rng = random.Random(0)
    env = environment(device)
    per_run = count // 10
    records = []
    for k in range(count):
        run, i = divmod(k, per_run)
        samples = tuple(1.0 + 0.05 * rng.random() for _ in range(20))
        records.append(Record(
            workload="bench", params={"size": 16 * (1 + i // 2), "variant": "ab"[i % 2]},
            outcome="ok", throughput=100.0 + i + run, throughput_unit="items/s",
            time_ms=samples, memory={"peak_rss_bytes": 2**20 * (1 + i % 7),
                                     "capacity_bytes": 2**35},
            env=env, run_id=f"2026010{run // 10}T0000{run % 10:02d}.000Z-0000",
            noise={"noisy": k % 3 == 0, "reasons": ["timing spread"]},
            conditions={"torch_threads": 1}))
    return records


def replot(count: int, rounds: int, device: str) -> dict:
    panel = Explorer(lambda size, variant: {"throughput": 1.0},
                     params={"size": Range(1, 100_000), "variant": ["a", "b"]}, sweep="size",
                     device=device)
    with tempfile.TemporaryDirectory() as tmp:  # held as a user's Load would give them
        path = Path(tmp) / "recorded.jsonl"
        path.write_text("".join(r.to_json() + "\n" for r in recorded_points(count, device)))
        panel.load(str(path))  # draws once: the records become a frame once (then cached)
    refresh_s, build_s, png_s = [], [], []
    df = records_to_frame(panel.records).assign(series=lambda d: d["variant"])
    for _ in range(rounds):
        started = time.perf_counter()
        panel.refresh()
        refresh_s.append(time.perf_counter() - started)
        started = time.perf_counter()
        figure = throughput_and_memory_figure(df, "size", series="series")
        built = time.perf_counter()
        figure.savefig(io.BytesIO(), format="png", dpi=PNG_DPI, pil_kwargs={"compress_level": 1})
        build_s.append(built - started)
        png_s.append(time.perf_counter() - built)
    return {"points": count, "rounds": rounds,
            "refresh_ms": 1e3 * statistics.median(refresh_s), "target_refresh_ms": 200.0,
            "figure_build_ms": 1e3 * statistics.median(build_s),
            "png_render_ms": 1e3 * statistics.median(png_s),
            "per_round_refresh_ms": [1e3 * s for s in refresh_s]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--replot-points", type=int, default=1000)
    parser.add_argument("--device", default="auto")
    args = parser.parse_args()
    device = resolve_device(args.device)
    report = {"device": device, "device_name": environment(device)["device_name"],
              "overhead": overhead(args.points, args.rounds, device),
              "replot": replot(args.replot_points, max(args.rounds, 5), device)}
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
