"""Command line: `python -m a800lab doctor|peak|sweep ...` (also installed as `a800lab`).

    python -m a800lab doctor [--json]                  environment and topology report
    python -m a800lab peak [--json]                    achievable matmul rate and copy bandwidth
    python -m a800lab sweep matmul --size 1024 4096 --precision fp32 bf16 --out runs.jsonl

A sweep appends one JSON line per point as it is measured; run the same command again to resume
(points already in the file for this environment are skipped). Ctrl-C stops after saving what was
measured. Each point prints one line; a `!` marks a noisy point and says why (timing spread, CPU
oversubscription). Open the file in a notebook with `a800lab.load_results("runs.jsonl")`.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import sys

from .core.cancel import Cancelled


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="a800lab", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    doctor = sub.add_parser("doctor", help="environment and topology report with advice")
    doctor.add_argument("--json", action="store_true", help="print JSON instead of a table")

    peak = sub.add_parser("peak", help="measure achievable matmul TFLOP/s and copy bandwidth")
    peak.add_argument("--json", action="store_true")
    peak.add_argument("--device", default="auto", help="auto, cpu or cuda[:N]")
    peak.add_argument("--precision", nargs="+", default=None, help="default: the device's set")

    sweep = sub.add_parser("sweep", help="run a sweep headless and write JSON Lines")
    sweep.add_argument("workload", choices=["matmul"])
    sweep.add_argument("--size", type=int, nargs="+", help="square problems m=n=k")
    sweep.add_argument("--m", type=int, nargs="+")
    sweep.add_argument("--n", type=int, nargs="+")
    sweep.add_argument("--k", type=int, nargs="+")
    sweep.add_argument("--precision", nargs="+", default=["fp32"])
    sweep.add_argument("--device", default="auto", help="auto, cpu or cuda[:N]")
    sweep.add_argument("--budget-s", type=float, default=0.3, help="timing budget per point")
    sweep.add_argument("--threads", type=int, default=None,
                       help="torch CPU threads during the sweep (default: torch's own)")
    sweep.add_argument("--out", required=True, help="JSON Lines file to append to")
    sweep.add_argument("--no-resume", action="store_true", help="re-measure points in --out")
    sweep.add_argument("--telemetry", action="store_true", help="sample NVML during each point")

    args = parser.parse_args(argv)
    try:
        if args.command == "doctor":
            from .core.doctor import main as doctor_main

            return doctor_main(["--json"] if args.json else [])
        if args.command == "peak":
            return _peak(args)
        return _sweep(args, parser)
    except ValueError as exc:  # bad input: say what and exit like argparse does
        print(f"a800lab: error: {exc}", file=sys.stderr)
        return 2


def _peak(args) -> int:
    from .core.peak import measure_peak

    report = measure_peak(device=args.device, precisions=args.precision,
                          on_progress=lambda done, total, what: print(
                              f"[{done}/{total}] {what}", file=sys.stderr))
    print(json.dumps(report.to_dict(), indent=2) if args.json else report.format())
    return 0


def _sweep(args, parser) -> int:
    from .core.backends import resolve_device
    from .core.precision import check_supported, parse_precision
    from .core.results import check_writable
    from .core.sweep import grid, run_sweep
    from .workloads.matmul import MatmulSpec, cpu_slowdown_note, matmul_point

    if args.size and (args.m or args.n or args.k):
        parser.error("give either --size (square) or --m/--n/--k, not both")
    if not (math.isfinite(args.budget_s) and args.budget_s > 0):
        raise ValueError(f"--budget-s {args.budget_s} must be a finite number of seconds > 0, "
                         "e.g. 0.3")
    if args.threads is not None and args.threads < 1:
        raise ValueError(f"--threads {args.threads} must be at least 1")
    check_writable(args.out)
    device = resolve_device(args.device)
    # "fp32" and "float32" are one precision: canonical names, each measured once
    precisions = list(dict.fromkeys(parse_precision(p).name for p in args.precision))
    for name in precisions:
        check_supported(name, device)
    run = functools.partial(matmul_point, device=device, budget_s=args.budget_s)
    if args.size:
        axes = {"size": args.size, "precision": precisions}

        def point(size, precision):
            return run(size, size, size, precision)
    elif args.m and args.n and args.k:
        axes = {"m": args.m, "n": args.n, "k": args.k, "precision": precisions}
        point = run
    else:
        parser.error("give --size, or all of --m, --n and --k")
    for p in grid(axes):  # reject a bad shape before anything runs
        size = p.get("size")
        MatmulSpec(p.get("m", size), p.get("n", size), p.get("k", size), p["precision"])
    if device == "cpu":
        for name in precisions:
            note = cpu_slowdown_note(name)
            if note:
                print(f"note: {note}", file=sys.stderr)

    def progress(done, total, eta_s):
        eta = "" if eta_s is None else f", about {eta_s:.0f} s left"
        print(f"[{done}/{total}{eta}]", file=sys.stderr)

    try:
        res = run_sweep(point, axes, workload="matmul", out=args.out, device=device,
                        resume=not args.no_resume, sample_telemetry=args.telemetry,
                        torch_threads=args.threads, on_progress=progress, on_result=_show)
    except (KeyboardInterrupt, Cancelled):
        print(f"stopped; every finished point is in {args.out}", file=sys.stderr)
        return 130
    noisy = sum(bool(r.noise.get("noisy")) for r in res.records)
    flagged = f", {noisy} noisy (marked !)" if noisy else ""
    print(f"{len(res.records)} points measured{flagged}, {res.skipped} already in {args.out}",
          file=sys.stderr)
    return 0


def _show(record) -> None:
    """One line per point: params, outcome, rate and spread; `!` and the reasons when noisy."""
    line = f"  {record.params}: {record.outcome}"
    if record.throughput:
        line += f" {record.throughput:.3g} {record.throughput_unit}"
    if record.noise:
        line += f" (IQR {100 * record.noise['iqr_over_median']:.0f}% of median)"
    if record.message:
        line += f" {record.message}"
    if record.noise.get("noisy"):
        line = "!" + line[1:] + "\n    ! " + "\n    ! ".join(record.noise["reasons"])
    print(line, file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
