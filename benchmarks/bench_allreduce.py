"""All-reduce busbw over message sizes, the lab's per-call timing beside an nccl-tests-style loop.

    python benchmarks/bench_allreduce.py [--nproc 2] [--size 1K 64K 4M] [--rounds 3]
    python benchmarks/bench_allreduce.py --record data/comm-<device>.jsonl   # on GPUs, NCCL

Spawns `--nproc` ranks (gloo on a CPU, NCCL with one GPU per rank). For each size and round,
every rank runs a800lab's collective_point (checked, then each call timed, the slowest rank's
time per call) and, right after, the nccl-tests way: a barrier, a loop of the same number of
back-to-back all-reduces timed as a whole, the slowest rank's total / calls. Prints busbw of both
and their ratio (the lab's median per-call time includes each call's own synchronisation, the
loop lets consecutive calls overlap: expect the lab at or a little below the loop's busbw).
`--record` also writes the lab's points as JSON Lines (`python -m a800lab comm`) for the
chapters' overlays. A benchmark run by hand, not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from a800lab.workloads.comm.collectives import busbw_gbs, collective_point
from a800lab.workloads.comm.launcher import free_port

DEFAULT_SIZES_CPU = [2**10, 2**14, 2**18, 2**22, 2**24]
DEFAULT_SIZES_GPU = [2**e for e in range(10, 31, 2)]


def _loop_busbw(size_bytes: int, calls: int, device: str) -> float:
    """nccl-tests style: one timed loop of `calls` all-reduces, slowest rank's time / calls."""
    buf = torch.ones(size_bytes // 4, device=device)
    sync = (lambda: torch.cuda.synchronize(device)) if device.startswith("cuda") else \
        (lambda: None)
    dist.all_reduce(buf)  # warm
    sync()
    dist.barrier()
    start = time.perf_counter()
    for _ in range(calls):
        dist.all_reduce(buf)
    sync()
    elapsed = torch.tensor([time.perf_counter() - start], dtype=torch.float64, device=device)
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
    return busbw_gbs("all_reduce", size_bytes, elapsed.item() * 1e3 / calls,
                     dist.get_world_size())


def _rank(rank: int, nproc: int, port: int, sizes: list[int], rounds: int, budget_s: float,
          backend: str, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    if backend == "nccl":
        torch.cuda.set_device(rank)
        device = f"cuda:{rank}"
    else:
        torch.set_num_threads(1)
        device = "cpu"
    dist.init_process_group(backend, rank=rank, world_size=nproc)
    rows = []
    for size in sizes:
        lab, loop = [], []
        for _ in range(rounds):
            point = collective_point("all_reduce", size, world_size=nproc, backend=backend,
                                     device=device, budget_s=budget_s)
            lab.append(point["throughput"])
            loop.append(_loop_busbw(size, len(point["time_ms"]), device))
        rows.append({"size_bytes": size, "lab_busbw_gbs": statistics.median(lab),
                     "loop_busbw_gbs": statistics.median(loop),
                     "ratio_lab_over_loop": statistics.median(lab) / statistics.median(loop),
                     "per_round_lab": lab, "per_round_loop": loop})
    if rank == 0:
        with open(out, "w") as f:
            json.dump(rows, f)
    dist.destroy_process_group()


def run(nproc: int = 2, sizes: list[int] | None = None, rounds: int = 3,
        budget_s: float = 0.2, backend: str | None = None) -> dict:
    import tempfile

    backend = backend or ("nccl" if torch.cuda.is_available() else "gloo")
    sizes = sizes or (DEFAULT_SIZES_GPU if backend == "nccl" else DEFAULT_SIZES_CPU)
    out = os.path.join(tempfile.mkdtemp(), "rows.json")
    mp.spawn(_rank, args=(nproc, free_port(), sizes, rounds, budget_s, backend, out),
             nprocs=nproc, join=True)
    with open(out) as f:
        rows = json.load(f)
    name = torch.cuda.get_device_name(0) if backend == "nccl" else "cpu"
    return {"backend": backend, "nproc": nproc, "device_name": name, "rounds": rounds,
            "rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nproc", type=int, default=None,
                        help="ranks (default 2 on a CPU, every GPU with NCCL)")
    parser.add_argument("--size", type=int, nargs="+", default=None, help="bytes")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--budget-s", type=float, default=0.2)
    parser.add_argument("--record", default=None,
                        help="also record the lab's points there (JSON Lines)")
    args = parser.parse_args()
    nproc = args.nproc or (torch.cuda.device_count() if torch.cuda.is_available() else 2)
    report = run(nproc, args.size, args.rounds, args.budget_s)
    print(f"{report['backend']} x {nproc} on {report['device_name']}, median of "
          f"{report['rounds']} rounds")
    print(f"{'size':>12} {'lab GB/s':>10} {'loop GB/s':>10} {'lab/loop':>9}")
    for row in report["rows"]:
        print(f"{row['size_bytes']:>12} {row['lab_busbw_gbs']:>10.4g} "
              f"{row['loop_busbw_gbs']:>10.4g} {row['ratio_lab_over_loop']:>9.2f}")
    if args.record:
        sizes = [str(s) for s in (args.size or [r["size_bytes"] for r in report["rows"]])]
        subprocess.run([sys.executable, "-m", "a800lab", "comm", "collectives", "--op",
                        "all_reduce", "all_gather", "reduce_scatter", "broadcast", "--size",
                        *sizes, "--nproc", str(nproc), "--out", args.record], check=True)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
