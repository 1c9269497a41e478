"""The machine's facts on the command line: `doctor`, `peak`, `diff` and `health`. `health`
exits 1 when a GPU should be drained, (--stress) a card is flagged or (--dcgm) DCGM's quick
diagnostic fails; --stress is a throughput check, not a memory test (that is DCGM's)."""

import json
import sys

from .options import FLAG, add_options, stoppable


def add_parsers(commands) -> None:
    commands.add("doctor", run=doctor_command, options="json fleet",
                 help="environment and topology report with advice",
                 fleet={**FLAG, "help": "under torchrun (one process per node): gather every "
                        "node's report and print how each differs from node 0's"})
    commands.add("peak", run=peak_command, options="json device precision+ no_store threads",
                 help="measure achievable matmul TFLOP/s and copy bandwidth",
                 precision="default: the device's set (fp32 on a CPU)",
                 no_store={**FLAG, "help": "do not record the peaks (by default tile points "
                           "report %% of them; a noisy figure is never recorded)"})
    diff = commands.add("diff", run=diff_command,
                        help="compare two results files or two doctor reports: what differs, "
                             "what it means, throughputs side by side")
    diff.add_argument("a", help="results file (JSON Lines) or doctor report (doctor --json)")
    diff.add_argument("b", help="the same from the other machine")
    add_options(diff, "json")
    commands.add(
        "health", run=health_command,
        help="GPU memory health (ECC, remapped rows, retired pages), NCCL settings, DCGM; "
             "--stress is a throughput check of each card",
        options="json stress dcgm device+ threshold datasheet_threshold budget_s",
        stress={**FLAG, "help": "a throughput check, not a memory test: time a matmul and a copy "
                "on each card and flag cards below their siblings or datasheet"},
        dcgm={**FLAG, "help": "also run DCGM's quick diagnostic (dcgmi diag -r 1: deployment "
              "checks, seconds, no load on the GPUs); the memory tests are dcgmi diag -r 3 on a "
              "drained GPU, never started here"},
        device={"default": None, "check": None,
                "help": "cards to stress (default: every visible GPU, else the CPU)"},
        threshold={"type": float, "default": 0.1,
                   "help": "flag a card this fraction below its siblings' median (0.1)"},
        datasheet_threshold={"type": float, "default": 0.4,
                             "help": "flag a card this fraction below its datasheet (0.4)"},
        budget_s="timing budget per card")


def doctor_command(args, nvml=None) -> int:
    """The report on this machine (`nvml`: a stand-in NVML module, for tests); --fleet: every
    node's, compared, printed by rank 0."""
    from ..core.doctor import build_report, format_report

    if getattr(args, "fleet", False):
        from ..workloads.comm.fleet import fleet_dict, format_fleet, gather_fleet
        from ..workloads.comm.torchrun import leave

        nodes = gather_fleet(lambda: build_report(nvml=nvml))
        if nodes is not None:
            print(json.dumps(fleet_dict(nodes), indent=2) if args.json else format_fleet(nodes))
        leave(0)
    report = build_report(nvml=nvml)
    print(json.dumps(report, indent=2) if args.json else format_report(report))
    return 0


def peak_command(args) -> int:
    """Measure, print, and record the clean figures (a noisy one is said, never stored)."""
    from ..core.environment import environment
    from ..workloads.peak import measure_peak, record_peaks

    report = stoppable(args, lambda: measure_peak(
        device=args.device, precisions=args.precision, on_progress=lambda done, total, what:
        print(f"[{done}/{total}] {what}", file=sys.stderr)), "stopped; nothing recorded")
    print(json.dumps(report.to_dict(), indent=2) if args.json else report.format())
    if args.no_store:
        return 0
    noisy = report.noisy
    clean = [p for p in report.tflops if p not in noisy] + ([] if "copy" in noisy else ["copy"])
    if clean:
        path = record_peaks(report, environment(report.device))
        print(f"peaks recorded in {path} ({', '.join(clean)}): tile points on this device now "
              "report % of them", file=sys.stderr)
    if noisy:
        print(f"not recorded, noisy: {', '.join(noisy)} (a noisy figure is no reference; "
              "measure again with less other work running)", file=sys.stderr)
    return 0


def diff_command(args) -> int:
    from ..core.envdiff import diff_files, format_diff

    result = diff_files(args.a, args.b)
    print(json.dumps(result.to_dict(), indent=2) if args.json else format_diff(result))
    return 0


def health_command(args) -> int:
    """Memory health, NCCL settings, DCGM, (--stress) the stress flags; exit codes: the module's."""
    from ..core.nccl_env import nccl_settings
    from ..workloads.dcgm import dcgm_status, run_quick_diag
    from ..workloads.health import format_health, health_report
    from ..workloads.stress import stress_report

    report = health_report()  # read only; stress_report checks its thresholds before measuring
    stress = None
    if args.stress:
        done = []

        def show(card) -> None:
            done.append(card)
            print(f"[{len(done)}] {card.device}: {card.matmul_tflops or 0:.4g} TFLOP/s "
                  f"{card.precision}, copy {card.copy_gbs or 0:.4g} GB/s", file=sys.stderr)

        stress = stress_report(args.device, threshold=args.threshold,
                               datasheet_threshold=args.datasheet_threshold,
                               budget_s=args.budget_s, on_card=show)
    settings = nccl_settings()
    dcgm = dcgm_status()
    diag = run_quick_diag() if args.dcgm else None
    if args.json:
        print(json.dumps({"health": report, "nccl": settings, "dcgm": {**dcgm, "diag": diag},
                          "stress": stress.to_dict() if stress else None}, indent=2))
    else:
        print(format_health(report))
        print("\nNCCL environment (read, never set here; NCCL_DEBUG=INFO shows the transport "
              "each connection uses):")
        for v in settings:
            print(f"  {v['name']}={v['value'] if v['value'] is not None else '(unset)'}: "
                  f"{v['what']}")
        print(f"\nDCGM: {dcgm['advice']}")
        if diag:
            print(f"\n{diag['command']} (exit {diag['returncode']}):\n{diag['output'].rstrip()}")
        if stress:
            print("\nStress run (a throughput check, not a memory test):\n" + stress.format())
    drain = any(g["verdict"] == "drain" for g in report["gpus"])
    return 1 if drain or (stress and stress.flags) or (diag and diag["returncode"]) else 0
