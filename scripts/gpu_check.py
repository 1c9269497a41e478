"""Run every GPU path of a800lab briefly on a real GPU, judge each, write one JSON report.

The one command, from the repository root, on a lent GPU machine (it runs on that machine's own
stack as found: Python 3.12, torch 2.11 with CUDA 13, triton 3.6, nvidia-ml-py, pandas, numpy;
no ipywidgets, no JupyterLab, no network; nothing to install and no wheel to carry):

    python3 scripts/gpu_check.py                     # about 4 minutes, at most 5: no check
                                                     # starts that would end after --budget-s
                                                     # 270, none runs past 285
    python3 scripts/gpu_check.py --only tiles hopper_tiles     # a few checks
    python3 scripts/gpu_check.py --record data/matmul-<device>.jsonl   # + a recorded sweep
    python3 scripts/gpu_check.py --report data/report-<device>/        # + `a800lab report`
                                                     # (each extra: ~2 more minutes)

Each check states its expectation (a healthy card meets it), measures, and passes or fails;
one line per check is printed ("PASS timing: measure()/do_bench 0.98 (expect 0.9-1.1), ...").
Checks are independent: one failing or crashing does not stop the others, and the report is
rewritten after every check, so a crash or a kill keeps what was measured. The checks run in
the order below, most telling first (the Hopper variants first of all); a check that would not
fit in the time left is recorded as "not run" with that reason. Exit status: 0 all passed or
skipped, 1 a check failed or there is no GPU, 3 the budget left checks not run.

The report goes to data/gpu_check-<device>-<date>.json (the device, driver, CUDA, torch and
Triton versions in its "environment"), and a copy to $OUT when that is set (what a lent machine
sends back); commit it under data/.

Checks: hopper_tiles, doctor, timing, tf32, peak, topology, sampler, memory, oom, device,
tiles, sparsity, training, energy, health, overlap, comm, gpu_tests, then the training-step
checks profile, levers and tune (scripts/gpu_checks_training.py; run them alone with `--only
profile levers tune` when the budget is spent before them) (each one's expectation is its
docstring; `--list` prints them).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sys
import time
import traceback
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path[:0] = [str(REPO), str(HERE)]

import torch  # noqa: E402
from gpu_checks_device import (  # noqa: E402
    Failed,
    check_device,
    check_doctor,
    check_memory,
    check_oom,
    check_peak,
    check_sampler,
    check_tf32,
    check_timing,
    check_topology,
    expect_between,
    parse_topo_matrix,
)
from gpu_checks_labs import (  # noqa: E402
    check_comm,
    check_energy,
    check_gpu_tests,
    check_health,
    check_hopper_tiles,
    check_overlap,
    check_sparsity,
    check_tiles,
    check_training,
)
from gpu_checks_training import check_levers, check_profile, check_tune  # noqa: E402

from a800lab.core.backends import HAS_CUDA, why_unavailable  # noqa: E402
from a800lab.core.environment import environment, fingerprint  # noqa: E402

__all__ = ["CHECKS", "Failed", "expect_between", "main", "parse_topo_matrix", "run_check"]

CHECKS: dict[str, Callable[[], tuple[str, dict]]] = {
    "hopper_tiles": check_hopper_tiles, "doctor": check_doctor, "timing": check_timing,
    "tf32": check_tf32, "peak": check_peak, "topology": check_topology,
    "sampler": check_sampler, "memory": check_memory, "oom": check_oom, "device": check_device,
    "tiles": check_tiles, "sparsity": check_sparsity, "training": check_training,
    "energy": check_energy, "health": check_health, "overlap": check_overlap,
    "comm": check_comm, "gpu_tests": check_gpu_tests, "profile": check_profile,
    "levers": check_levers, "tune": check_tune,
}
# seconds each check takes on one H100/H200-class card (compiles included), for the budget
ESTIMATE_S = {"hopper_tiles": 25, "doctor": 3, "timing": 10, "tf32": 3, "peak": 15,
              "topology": 2, "sampler": 4, "memory": 15, "oom": 5, "device": 3, "tiles": 25,
              "sparsity": 10, "training": 25, "energy": 4, "health": 15, "overlap": 8,
              "comm": 12, "gpu_tests": 60, "profile": 25, "levers": 75, "tune": 30}
BUDGET_S = 270.0
WALL_MARGIN_S = 15.0  # a check still running this long after the budget is stopped


class OverBudget(BaseException):
    """Raised in a check that is still running past the budget's hard wall."""


def _stop_at_the_wall(signum, frame):
    raise OverBudget("stopped: still running at the time budget's hard wall")


def run_check(check: Callable[[], tuple[str, dict]]) -> dict:
    """{"status": pass | fail | skip | error, "expect", "summary", "details", "duration_s"}."""
    t0 = time.perf_counter()
    result = {"expect": " ".join((check.__doc__ or "").split())}
    try:
        summary, details = check()
        status = "skip" if summary.startswith("skip:") else "pass"
        result.update(status=status, summary=summary, details=details)
    except Failed as exc:
        result.update(status="fail", summary=str(exc))
    except OverBudget as exc:
        result.update(status="fail", summary=str(exc))
    except Exception as exc:  # a crash is a failed expectation too, with its traceback
        result.update(status="error", summary=f"{type(exc).__name__}: {exc}",
                      traceback=traceback.format_exc())
    result["duration_s"] = round(time.perf_counter() - t0, 2)
    return result


def record_sweep(path: Path) -> int:
    """A matmul sweep (sizes x precisions) recorded as JSON Lines for the panels' overlay."""
    from a800lab.core.precision import unsupported_reason
    from a800lab.core.sweep import run_sweep
    from a800lab.workloads.matmul import matmul_point

    precisions = [p for p in ("fp32", "tf32", "bf16", "fp16", "fp8")
                  if not unsupported_reason(p, "cuda:0")]

    def point(size, precision):
        return matmul_point(size, size, size, precision, device="cuda:0", budget_s=0.3)

    res = run_sweep(point, {"size": [1024, 2048, 4096, 8192], "precision": precisions},
                    workload="matmul", out=path, device="cuda:0", sample_telemetry=True,
                    label=torch.cuda.get_device_name(0))
    return len(res.records)


def record_report(folder: Path) -> dict:
    """`a800lab report --quick` on cuda:0 into `folder` (points.jsonl, report.json/.html):
    judged complete, every point measured without an error, every claim given a verdict."""
    from a800lab.report.html import write_report_html
    from a800lab.report.run import run_report

    t0 = time.perf_counter()
    report = run_report("quick", folder, device="cuda:0", on_progress=lambda done, total, eta,
                        what: print(f"  [report {done}/{total}] {what}", flush=True))
    write_report_html(report, folder / "report.html")
    errors = [c for c in report["claims"] if not c["status"]]
    status = "pass" if report["complete"] and not report["points"]["failed"] and not errors \
        else "fail"
    return {"status": status, "wall_s": round(time.perf_counter() - t0, 1),
            "points": report["points"], "folder": str(folder),
            "verdicts": {c["id"]: c["status"] for c in report["claims"]},
            "flags": report["health"]["flags"]}


def default_out(device_name: str) -> Path:
    """data/gpu_check-<device>-<date>.json, e.g. data/gpu_check-nvidia-h200-2026-11-20.json."""
    slug = re.sub(r"[^a-z0-9]+", "-", device_name.lower()).strip("-") or "no-gpu"
    return REPO / "data" / f"gpu_check-{slug}-{datetime.now(timezone.utc):%Y-%m-%d}.json"


def _write(paths: list[Path], report: dict) -> None:
    for path in paths:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(report, indent=2, default=str))
        os.replace(tmp, path)  # a kill mid-write leaves the previous report


def _parser() -> argparse.ArgumentParser:
    paragraphs = __doc__.split("\n\n")
    parser = argparse.ArgumentParser(
        description="\n\n".join(paragraphs[:3]),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=f"Time budget: --budget-s {BUDGET_S:g} (checks are started only while they fit;"
               " about 4 minutes on one H200). Exit: 0 passed, 1 failed or no GPU, 3 budget.")
    parser.add_argument("--out", type=Path, default=None,
                        help="report file (default data/gpu_check-<device>-<date>.json, and a "
                             "copy in $OUT when set)")
    parser.add_argument("--only", nargs="+", choices=list(CHECKS), metavar="CHECK",
                        help=f"run only these ({', '.join(CHECKS)})")
    parser.add_argument("--skip", nargs="+", choices=list(CHECKS), default=[], metavar="CHECK",
                        help="leave these out")
    parser.add_argument("--budget-s", type=float, default=BUDGET_S,
                        help=f"start no check that would end after this (default {BUDGET_S:g})")
    parser.add_argument("--list", action="store_true", help="print each check's expectation")
    parser.add_argument("--record", type=Path, help="also record a matmul sweep (JSON Lines)")
    parser.add_argument("--report", type=Path,
                        help="also run `a800lab report --quick` into this folder (~2 minutes)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.list:
        for name, check in CHECKS.items():
            print(f"{name} (~{ESTIMATE_S[name]} s): {' '.join(check.__doc__.split())}")
        return 0
    started = time.perf_counter()
    env = environment("cuda:0" if HAS_CUDA else "cpu")
    out = args.out or default_out(env.get("device_name", "") if HAS_CUDA else "no-gpu")
    paths = [out] + ([Path(os.environ["OUT"]) / out.name] if os.environ.get("OUT") and
                     args.out is None else [])
    report = {"created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
              "command": " ".join(["python3", "scripts/gpu_check.py", *(argv or sys.argv[1:])]),
              "budget_s": args.budget_s, "environment": env, "fingerprint": fingerprint(env),
              "checks": {}}
    if not HAS_CUDA:  # nothing measured: data/ gets no file unless --out asks for one
        report["error"] = f"no CUDA device: {why_unavailable('cuda')}"
        print(f"FAIL  gpu_check: {report['error']}")
        _write([args.out] if args.out else [], report)
        return 1
    signal.signal(signal.SIGALRM, _stop_at_the_wall)
    signal.alarm(int(args.budget_s + WALL_MARGIN_S))
    for name, check in CHECKS.items():
        if (args.only and name not in args.only) or name in args.skip:
            continue
        left = args.budget_s - (time.perf_counter() - started)
        if ESTIMATE_S[name] > left:
            report["checks"][name] = {"status": "not run", "expect": " ".join(
                check.__doc__.split()), "summary": f"not run: it takes ~{ESTIMATE_S[name]} s "
                f"and {max(left, 0):.0f} s of the {args.budget_s:g} s budget were left"}
            print(f"SKIP  {name}: {report['checks'][name]['summary']}", flush=True)
            _write(paths, report)
            continue
        print(f"[gpu_check] {name} (~{ESTIMATE_S[name]} s, {left:.0f} s left) ...", flush=True)
        if name == "gpu_tests":
            report["checks"][name] = result = run_check(
                lambda left=left: check_gpu_tests(timeout_s=max(30.0, left - 5)))
            result["expect"] = " ".join(check_gpu_tests.__doc__.split())
        else:
            report["checks"][name] = result = run_check(check)
        print(f"{result['status'].upper():<5} {name}: {result['summary']} "
              f"({result['duration_s']} s)", flush=True)
        _write(paths, report)  # after every check: a crash keeps what was measured
    signal.alarm(0)
    if args.record:
        report["recorded_points"] = record_sweep(args.record)
        print(f"recorded {report['recorded_points']} points to {args.record}")
    if args.report:
        report["checks"]["report"] = result = record_report(args.report)
        print(f"{result['status'].upper():<5} report: {result['points']} in "
              f"{result['wall_s']} s; {args.report}/report.html", flush=True)
    statuses = {n: r["status"] for n, r in report["checks"].items()}
    report["failed"] = [n for n, s in statuses.items() if s in ("fail", "error")]
    report["not_run"] = [n for n, s in statuses.items() if s == "not run"]
    report["wall_s"] = round(time.perf_counter() - started, 1)
    _write(paths, report)
    print(f"[gpu_check] {sum(s in ('pass', 'skip') for s in statuses.values())}/{len(statuses)} "
          f"checks passed or skipped, {len(report['not_run'])} not run, in {report['wall_s']} s;"
          f" report written to {', '.join(map(str, paths))}")
    return 1 if report["failed"] else 3 if report["not_run"] else 0


if __name__ == "__main__":
    sys.exit(main())
