"""Compile-only tile facts: a 32-config grid for one card, cold and from the cache.

    python benchmarks/bench_compile.py [--card A800] [--precision bf16] [--size 4096]

Three fresh processes, each timing a800lab.workloads.tiles.facts.tile_facts_grid over the same
32 configs (block_m, block_n in 64/128, block_k 32/64, 4/8 warps, 3/4 stages):
1. cold: an empty lab cache and an empty Triton cache (TRITON_CACHE_DIR): every config goes
   through Triton's compiler and ptxas;
2. lab cache: the same command again, the facts read from the lab's compile cache;
3. Triton's cache only: the lab cache removed, Triton's own cache kept (what a cleared lab
   cache costs).
Targets: cold <= 60 s, lab cache <= 2 s on a 2-core machine without a GPU (the grid call
itself; the process's import time is printed beside it). A benchmark run by hand, not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CHILD = """
import json, sys, time
started = time.perf_counter()
from a800lab.workloads.matmul import MatmulSpec
from a800lab.workloads.tiles.facts import tile_facts_grid
from a800lab.workloads.tiles.tune import config_grid
imported = time.perf_counter()
card, precision, size = sys.argv[1], sys.argv[2], int(sys.argv[3])
grid = config_grid({"block_m": [64, 128], "block_n": [64, 128], "block_k": [32, 64],
                    "num_warps": [4, 8], "num_stages": [3, 4]}, "triton")
specs = [MatmulSpec(size, size, size, precision, "triton", **c) for c in grid]
t0 = time.perf_counter()
facts = tile_facts_grid(specs, card)
grid_s = time.perf_counter() - t0
print(json.dumps({"configs": len(specs), "grid_s": grid_s, "import_s": imported - started,
                  "fit": sum(f.fits for f in facts), "source": facts[0].source,
                  "compile_s": sum(f.compile_s for f in facts)}))
"""
TARGETS_S = {"cold": 60.0, "lab cache": 2.0}


def run(card: str, precision: str, size: int, env: dict) -> dict:
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", CHILD, card, precision, str(size)],
                          capture_output=True, text=True, env=env, cwd=REPO, check=True)
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    out["process_s"] = time.perf_counter() - started
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--card", default="A800")
    parser.add_argument("--precision", default="bf16")
    parser.add_argument("--size", type=int, default=4096)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        lab_cache = Path(folder) / "compiled_tiles.json"
        env = {**os.environ, "A800LAB_COMPILE_CACHE": str(lab_cache),
               "TRITON_CACHE_DIR": str(Path(folder) / "triton"),
               "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
        rows = {"cold": run(args.card, args.precision, args.size, env),
                "lab cache": run(args.card, args.precision, args.size, env)}
        lab_cache.unlink()
        rows["Triton's cache only"] = run(args.card, args.precision, args.size, env)
    print(f"{rows['cold']['configs']} configs for {args.card}, {args.precision} "
          f"{args.size}^3 ({rows['cold']['fit']} fit; {rows['cold']['source']}), "
          f"{os.cpu_count()} CPUs")
    ok = True
    for name, row in rows.items():
        target = TARGETS_S.get(name)
        verdict = "" if target is None else (
            f"  target <= {target:g} s: {'met' if row['grid_s'] <= target else 'MISSED'}")
        ok &= target is None or row["grid_s"] <= target
        print(f"  {name:<20} grid {row['grid_s']:7.2f} s   (import {row['import_s']:.2f} s, "
              f"process {row['process_s']:.2f} s){verdict}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
