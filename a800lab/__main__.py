"""Command line: `python -m a800lab doctor|peak|sweep ...` (also installed as `a800lab`).

    python -m a800lab doctor [--json]                  environment and topology report
    python -m a800lab peak [--json]                    achievable matmul rate and copy bandwidth
    python -m a800lab sweep matmul --size 1024 4096 --precision fp32 bf16 --out runs.jsonl

A sweep appends one JSON line per point as it is measured; run the same command again to resume
(points already in the file for this environment are skipped). Ctrl-C stops after saving what was
measured. Open the file in a notebook with `a800lab.load_results("runs.jsonl")`.
"""

from __future__ import annotations

import argparse
import functools
import json
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
    from .core.sweep import grid, run_sweep
    from .workloads.matmul import MatmulSpec, matmul_point

    if args.size and (args.m or args.n or args.k):
        parser.error("give either --size (square) or --m/--n/--k, not both")
    run = functools.partial(matmul_point, device=args.device, budget_s=args.budget_s)
    if args.size:
        axes = {"size": args.size, "precision": args.precision}

        def point(size, precision):
            return run(size, size, size, precision)
    elif args.m and args.n and args.k:
        axes = {"m": args.m, "n": args.n, "k": args.k, "precision": args.precision}
        point = run
    else:
        parser.error("give --size, or all of --m, --n and --k")
    # Reject bad input before anything runs: a bad size or an unavailable precision.
    for p in grid(axes):
        size = p.get("size")
        MatmulSpec(p.get("m", size), p.get("n", size), p.get("k", size), p["precision"])
    for name in args.precision:
        check_supported(parse_precision(name), resolve_device(args.device))

    def progress(done, total, eta_s):
        eta = "" if eta_s is None else f", about {eta_s:.0f} s left"
        print(f"[{done}/{total}{eta}]", file=sys.stderr)

    def show(record):
        rate = f"{record.throughput:.3g} {record.throughput_unit}" if record.throughput else ""
        print(f"  {record.params}: {record.outcome} {rate} {record.message}".rstrip(),
              file=sys.stderr)

    try:
        res = run_sweep(point, axes, workload="matmul", out=args.out, device=args.device,
                        resume=not args.no_resume, sample_telemetry=args.telemetry,
                        on_progress=progress, on_result=show)
    except (KeyboardInterrupt, Cancelled):
        print(f"stopped; every finished point is in {args.out}", file=sys.stderr)
        return 130
    print(f"{len(res.records)} points measured, {res.skipped} already in {args.out}",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
