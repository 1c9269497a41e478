"""Our Triton tile kernel against torch.matmul (cuBLAS) at 4096^3 in fp16 and bf16, on a GPU.

    python benchmarks/bench_tile_kernel.py [--size 4096] [--precisions fp16 bf16] [--rounds 3]
                                           [--record data/tiles-h200.jsonl] [--out report.json]

Sweeps a short list of tile configs (Triton's matmul-tutorial configs and a few larger ones for
Hopper) with tiled_matmul_point: each is refused if the card cannot hold it, else checked against
float64 and only then timed. The best config per precision is then timed side by side with
torch.matmul, interleaved over rounds so that drift hits both alike, and the report gives the
ratio ours / cuBLAS (target >= 0.9), % of the datasheet peak and % of the peak measured on the
spot (a800lab.workloads.peak.measure_peak), with the best config as triton.Config text. --record
appends every swept point (with the device's metadata) to a JSON Lines file that the chapters can
overlay. A benchmark run by hand, not a test; without a CUDA GPU and Triton it says so and exits 0.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

from a800lab.core.backends import HAS_CUDA, HAS_TRITON, why_unavailable
from a800lab.core.results import new_run_id
from a800lab.core.sweep import run_sweep
from a800lab.workloads.matmul import MatmulSpec
from a800lab.workloads.peak import measure_peak
from a800lab.workloads.tiles.config import export_config
from a800lab.workloads.tiles.point import tiled_matmul_point

TARGET_RATIO = 0.9
# (block_m, block_n, block_k, group_m, num_warps, num_stages)
CONFIGS = (
    (128, 256, 64, 8, 8, 3),   # Triton tutorial's first CUDA config
    (64, 256, 32, 8, 4, 4),
    (128, 128, 32, 8, 4, 4),
    (128, 64, 32, 8, 4, 4),
    (64, 128, 32, 8, 4, 4),
    (128, 128, 64, 8, 4, 4),   # 128 KiB of shared memory in 16 bits
    (128, 128, 64, 8, 8, 3),
    (256, 128, 64, 8, 8, 3),   # 144 KiB: fits an A800 (163 KiB) and an H100 (227 KiB)
    (128, 256, 64, 8, 8, 4),   # 192 KiB: Hopper only, refused on an A800
)
TILE_FIELDS = ("block_m", "block_n", "block_k", "group_m", "num_warps", "num_stages")


def sweep_configs(size: int, precisions: list[str], budget_s: float, record: str | None,
                  run_id: str) -> list:
    """Every config in every precision through run_sweep; the records."""
    records = []
    for config in CONFIGS:
        fixed = {"m": size, "n": size, "k": size, "backend": "triton", "budget_s": budget_s,
                 **dict(zip(TILE_FIELDS, config, strict=True))}
        result = run_sweep(tiled_matmul_point, {"precision": precisions}, fixed=fixed,
                           workload="tiles", out=record, resume=False, device="cuda",
                           label="bench_tile_kernel", run_id=run_id)
        for r in result.records:
            shown = f"{r.throughput:.1f} TFLOP/s" if r.outcome == "ok" else r.message[:90]
            print(f"  {r.params['precision']:<5} {_tile_text(r.params):<24} {r.outcome:<6} "
                  f"{shown}", file=sys.stderr)
        records += result.records
    return records


def _tile_text(params: dict) -> str:
    return (f"{params['block_m']}x{params['block_n']}x{params['block_k']} g{params['group_m']} "
            f"w{params['num_warps']} s{params['num_stages']}")


def side_by_side(size: int, precision: str, tile: dict, rounds: int, budget_s: float) -> dict:
    """The best config and torch.matmul, alternately, `rounds` times each."""
    ours, cublas = [], []
    for _ in range(rounds):
        ours.append(tiled_matmul_point(size, size, size, precision, "triton", **tile,
                                       device="cuda", budget_s=budget_s))
        cublas.append(tiled_matmul_point(size, size, size, precision, "torch", device="cuda",
                                         budget_s=budget_s))
    wrong = [p["message"] for p in ours + cublas if p.get("outcome") == "wrong"]
    if wrong:
        return {"error": wrong[0]}
    ours_tflops = [p["tflops"] for p in ours]
    cublas_tflops = [p["tflops"] for p in cublas]
    ratios = [a / b for a, b in zip(ours_tflops, cublas_tflops, strict=True)]
    return {"ours_tflops": ours_tflops, "torch_tflops": cublas_tflops,
            "ratio_median": statistics.median(ratios), "ratios": ratios,
            "ours_noisy": [p["timing"].noisy for p in ours],
            "pct_of_datasheet_peak": (None if ours[0]["pct_of_datasheet_peak"] is None else
                                      statistics.median(p["pct_of_datasheet_peak"] for p in ours)),
            "datasheet_peak_tflops": ours[0]["datasheet_peak_tflops"]}


def run(size: int = 4096, precisions: tuple[str, ...] = ("fp16", "bf16"), rounds: int = 3,
        budget_s: float = 0.3, record: str | None = None) -> dict:
    import torch

    device_name = torch.cuda.get_device_name()
    run_id = new_run_id()
    print(f"{device_name}: sweeping {len(CONFIGS)} configs x {list(precisions)} at {size}^3",
          file=sys.stderr)
    records = sweep_configs(size, list(precisions), budget_s, record, run_id)
    peak = measure_peak("cuda", precisions=list(precisions), budget_s=budget_s)
    report = {"device_name": device_name, "capability": list(torch.cuda.get_device_capability()),
              "size": size, "rounds": rounds, "target_ratio": TARGET_RATIO, "run_id": run_id,
              "record": record, "measured_peak_tflops": peak.tflops, "precisions": {}}
    for precision in precisions:
        ok = [r for r in records if r.params["precision"] == precision and r.outcome == "ok"]
        not_ok = {_tile_text(r.params): f"{r.outcome}: {r.message}" for r in records
                  if r.params["precision"] == precision and r.outcome != "ok"}
        entry = {"configs_ok": len(ok), "not_ok": not_ok}
        if ok:
            best = max(ok, key=lambda r: r.throughput)
            tile = {name: best.params[name] for name in TILE_FIELDS}
            config, source = export_config(MatmulSpec(size, size, size, precision, "triton",
                                                      **tile))
            entry.update(best_sweep_tflops=best.throughput, best_config=config,
                         triton_config=source, **side_by_side(size, precision, tile, rounds,
                                                              budget_s))
            measured = peak.tflops.get(precision)
            if measured and "ours_tflops" in entry:
                entry["pct_of_measured_peak"] = (100 * statistics.median(entry["ours_tflops"])
                                                 / measured)
            if "ratio_median" in entry:
                entry["target_met"] = entry["ratio_median"] >= TARGET_RATIO
        report["precisions"][precision] = entry
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--precisions", nargs="+", default=["fp16", "bf16"])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--budget-s", type=float, default=0.3)
    parser.add_argument("--record", default=None, help="JSON Lines file for the swept points")
    parser.add_argument("--out", default=None, help="also write the report here")
    args = parser.parse_args()
    if not (HAS_CUDA and HAS_TRITON):
        missing = why_unavailable("cuda") or why_unavailable("triton")
        print(f"bench_tile_kernel needs a CUDA GPU with Triton: {missing}; nothing measured")
        return 0
    report = run(args.size, tuple(args.precisions), args.rounds, args.budget_s, args.record)
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
