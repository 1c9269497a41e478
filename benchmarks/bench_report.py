"""Wall time of `python -m a800lab report --quick` (or --full) on this machine: the battery from
nothing, per step, then a second sitting over the same folder (nothing left to measure: only
judging, the doctor and the HTML).

    python benchmarks/bench_report.py [--mode quick] [--rounds 2] [--device auto] [--keep DIR]

Each round measures into a fresh folder through the CLI's own entry point, so the time is what
a user waits (imports aside). `--keep DIR` leaves the last round's report there (e.g. a folder
under data/ on a GPU box, to share it with its device and environment). Prints JSON; a
benchmark run by hand, not a test. The targets are about 5 minutes (quick; the battery's own
estimate, not yet measured on a GPU) and 15 (full) on one GPU; on a CPU the quick battery runs at
CPU sizes with 2 gloo ranks, about 30 s on 2 cores.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from a800lab.cli import main
from a800lab.core.results import read_records


def _report(mode: str, device: str, folder: Path) -> tuple[int, float]:
    """The CLI's exit code and wall seconds; its verdict lines go to stderr with its progress,
    so stdout holds this benchmark's JSON only."""
    started = time.perf_counter()
    with contextlib.redirect_stdout(sys.stderr):
        code = main(["report", f"--{mode}", "--out", str(folder), "--device", device])
    return code, time.perf_counter() - started


def _round(mode: str, device: str, folder: Path) -> dict:
    code, first_s = _report(mode, device, folder)
    _, resume_s = _report(mode, device, folder)
    report = json.loads((folder / "report.json").read_text())
    per_step: dict[str, float] = defaultdict(float)
    records = read_records(folder / "points.jsonl")
    stamps = [datetime.datetime.fromisoformat(r.timestamp) for r in records]
    for record, before, after in zip(records[1:], stamps, stamps[1:], strict=False):
        per_step[record.label] += (after - before).total_seconds()   # the first point aside
    return {"exit_code": code, "wall_s": first_s, "resume_s": resume_s,
            "points": report["points"], "device_name": report["device_name"],
            "scope": report["scope"], "complete": report["complete"],
            "per_step_s": dict(per_step),
            "verdicts": {c["id"]: c["status"] for c in report["claims"]}}


def run(mode: str = "quick", rounds: int = 2, device: str = "auto",
        keep: str | None = None) -> dict:
    results = []
    for _ in range(rounds):
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp) / "report"
            results.append(_round(mode, device, folder))
            if keep:
                shutil.rmtree(keep, ignore_errors=True)
                shutil.copytree(folder, keep)
    walls = [r["wall_s"] for r in results]
    return {"mode": mode, "rounds": results, "median_wall_s": statistics.median(walls),
            "min_wall_s": min(walls), "max_wall_s": max(walls),
            "median_resume_s": statistics.median(r["resume_s"] for r in results)}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=("quick", "full"), default="quick")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--keep", default=None, help="copy the last round's report folder here")
    args = parser.parse_args()
    print(json.dumps(run(args.mode, args.rounds, args.device, args.keep), indent=1))
