"""What the command families share: option groups (shapes, a run's budget, threads and output,
tile fields, training fields), the checks argparse cannot make, and the printers (one line per
point, progress, the CPU thread note).

    shape_options(parser); run_options(parser); tile_options(parser)   # when building parsers
    check_run_options(args)                  # ValueError for a bad budget, thread count, --out
    check_store(path)                        # a tuner's --store, before anything is tuned
    show_record(record)                      # the line every sweep prints per point (stderr)
    run_sweep_command(point, axes, args, device, workload="matmul")   # the sweeps' run loop
"""

from __future__ import annotations

import argparse
import math
import sys

from ..core.cancel import Cancelled
from ..core.precision import PRECISIONS
from ..core.units import format_bytes

TILE_OPTIONS = ("block_m", "block_n", "block_k", "group_m", "num_warps", "num_stages")
TILE_HELP = ("rows of C per thread block (the tile's M)", "columns of C per thread block",
             "depth of each step along k", "tiles grouped along M for L2 reuse (1: row order)",
             "warps per thread block", "pipeline stages of the loads (software pipelining)")
TILE_CHOICES = ("schedule", "loads", "fp8_acc")  # the Triton kernel's named choices
MATMUL_PRECISION_HELP = f"one or more of {', '.join(PRECISIONS[1:])} (default fp32)"
TRAIN_PRECISION_HELP = "fp32, tf32, fp16 (+ GradScaler), bf16 or bf16_pure (default fp32)"


def shape_options(parser: argparse.ArgumentParser, *, many: bool = True) -> None:
    """--size (square problems) or --m/--n/--k."""
    nargs = "+" if many else None
    parser.add_argument("--size", type=int, nargs=nargs, help="square problems m=n=k")
    for dim, what in (("m", "rows of A and C"), ("n", "columns of B and C"),
                      ("k", "the shared dimension: columns of A, rows of B")):
        parser.add_argument(f"--{dim}", type=int, nargs=nargs, help=f"{what} (with the other two)")


def run_options(parser: argparse.ArgumentParser, *, out_required: bool = True) -> None:
    """--device, --budget-s, --threads and --out."""
    parser.add_argument("--device", default="auto", help="auto, cpu or cuda[:N]")
    parser.add_argument("--budget-s", type=float, default=0.3, help="timing budget per point")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch CPU threads during the run (default on CPU: all usable "
                             "cores but one; on a GPU: torch's own)")
    parser.add_argument("--out", required=out_required, help="JSON Lines file to append to")


def resume_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--no-resume", action="store_true", help="re-measure points in --out")


def tile_options(parser: argparse.ArgumentParser) -> None:
    """--backend and one option per tile field (each a list of values)."""
    parser.add_argument("--backend", default="auto",
                        help="auto (triton on a GPU, cpu_blocked on CPU), triton, cpu_blocked "
                             "or torch (cuBLAS, no tile fields)")
    for name, what in zip(TILE_OPTIONS, TILE_HELP, strict=True):
        parser.add_argument(f"--{name.replace('_', '-')}", dest=name, type=int, nargs="+",
                            help=what)


def tile_choice_options(parser: argparse.ArgumentParser) -> None:
    """The Triton kernel's named choices: --schedule, --loads, --fp8-acc (each a list)."""
    from ..workloads.matmul import FP8_ACCUMULATION, LOADS, SCHEDULES

    parser.add_argument("--schedule", nargs="+", choices=SCHEDULES,
                        help="tile (one program per tile) and/or persistent (one per SM)")
    parser.add_argument("--loads", nargs="+", choices=LOADS,
                        help="pointer and/or tma (tensor descriptors, Hopper sm_90 on)")
    parser.add_argument("--fp8-acc", nargs="+", choices=FP8_ACCUMULATION,
                        help="fp8 only: precise (every 32-deep product into fp32, cuBLAS's "
                             "default) or fast (Triton's default on sm_90)")


def train_options(parser: argparse.ArgumentParser, *, many: bool = True) -> None:
    """The training spec's options (a list of values each for a sweep)."""
    nargs = "+" if many else None
    parser.add_argument("--model", nargs=nargs, help="mlp, transformer or cnn (default: mlp)")
    parser.add_argument("--model-size", nargs=nargs,
                        help="tiny, small, medium or large (default: tiny on a CPU, medium on "
                             "a GPU)")
    parser.add_argument("--accum-steps", type=int, nargs=nargs,
                        help="micro-batches per optimizer step (default 1)")
    parser.add_argument("--optimizer", nargs=nargs, help="adamw or sgd (default adamw)")
    parser.add_argument("--checkpointing", nargs=nargs, choices=["off", "on"],
                        help="activation checkpointing (default off)")
    parser.add_argument("--lr", type=float, default=None,
                        help="learning rate (default: the preset's, 1e-2 tiny ... 3e-4 large)")


# ---- checks argparse cannot make ------------------------------------------------------------
def check_run_options(args) -> None:
    """Refuse bad run options before anything runs."""
    from ..core.results import check_writable

    if not (math.isfinite(args.budget_s) and args.budget_s > 0):
        raise ValueError(f"--budget-s {args.budget_s} must be a finite number of seconds > 0, "
                         "e.g. 0.3")
    if args.threads is not None and args.threads < 1:
        raise ValueError(f"--threads {args.threads} must be at least 1")
    if args.out is not None:
        check_writable(args.out)


def check_store(path) -> None:
    """--store: a file the tuned configs can be written to, refused before anything is tuned."""
    from pathlib import Path

    from ..core.results import check_writable

    if Path(path).is_dir():
        raise ValueError(f"--store {path} is a folder; give a file, e.g. "
                         f"--store {Path(path) / 'tuned.json'}")
    try:
        check_writable(path)
    except ValueError as exc:
        raise ValueError(f"--store: {exc}") from None


def threads_for(args, device: str) -> int | None:
    """--threads, else on CPU all usable cores but one (said on stderr), else torch's own."""
    if args.threads is not None or device != "cpu":
        return args.threads
    from ..core.noise import default_cpu_threads

    threads = default_cpu_threads()
    print(f"CPU: {threads} torch thread(s), a core left for the rest of the machine "
          "(--threads N to change)", file=sys.stderr)
    return threads


def shape_axes(args) -> dict:
    """{"size": [...]} or {"m": [...], "n": [...], "k": [...]} from the shape options."""
    given = {name: getattr(args, name) for name in ("size", "m", "n", "k")
             if getattr(args, name) is not None}  # 0 is a value (refused later), not "absent"
    if "size" in given and len(given) > 1:
        args.command_parser.error("give either --size (square) or --m/--n/--k, not both")
    if "size" in given:
        return {"size": given["size"]}
    if len(given) == 3:
        return given
    args.command_parser.error("give --size, or all of --m, --n and --k")


def cpu_notes(precisions, device: str) -> None:
    """On a CPU, say up front which precisions will be slow there."""
    from ..workloads.matmul import cpu_slowdown_note

    if device != "cpu":
        return
    for name in precisions:
        note = cpu_slowdown_note(name)
        if note:
            print(f"note: {note}", file=sys.stderr)


# ---- printers -------------------------------------------------------------------------------
def show_progress(done: int, total: int, eta_s: float | None) -> None:
    eta = "" if eta_s is None else f", about {eta_s:.0f} s left"
    print(f"[{done}/{total}{eta}]", file=sys.stderr)


def show_record(record) -> None:
    """One line per point: (label,) params, outcome, rate and spread; `!` and the reasons
    when noisy."""
    line = f"  {record.label + ' ' if record.label else ''}{record.params}: {record.outcome}"
    if record.throughput:
        line += f" {record.throughput:.3g} {record.throughput_unit}"
    if record.noise:
        line += f" (IQR {100 * record.noise['iqr_over_median']:.0f}% of median)"
    if record.message:
        line += f" {record.message}"
    if record.noise.get("noisy"):
        line = "!" + line[1:] + "\n    ! " + "\n    ! ".join(record.noise["reasons"])
    print(line, file=sys.stderr)


def show_trial(trial) -> None:
    """One line per max-batch trial: stage, micro-batch x accumulation, outcome, peak."""
    peak = "" if trial.peak_bytes is None else f" peak {format_bytes(trial.peak_bytes)}"
    predicted = "" if trial.predicted_bytes is None else \
        f" (predicted {format_bytes(trial.predicted_bytes)})"
    message = f" {trial.message}" if trial.message and trial.outcome != "ok" else ""
    print(f"  {trial.stage} {trial.batch_size} x {trial.accum_steps}: {trial.outcome}{peak}"
          f"{predicted}{message}", file=sys.stderr)


def summary_line(res, out) -> str:
    noisy = sum(bool(r.noise.get("noisy")) for r in res.records)
    flagged = f", {noisy} noisy (marked !)" if noisy else ""
    return f"{len(res.records)} points measured{flagged}, {res.skipped} already in {out}"


def run_sweep_command(point, axes: dict, args, device: str, *, workload: str,
                      fixed: dict | None = None) -> int:
    """A sweep subcommand's run: points appended to --out with a line each, Ctrl-C keeping
    what was measured, and the summary line."""
    from ..core.sweep import run_sweep

    try:
        res = run_sweep(point, axes, fixed=fixed, workload=workload, out=args.out,
                        device=device, resume=not args.no_resume,
                        sample_telemetry=args.telemetry,
                        torch_threads=threads_for(args, device),
                        on_progress=show_progress, on_result=show_record)
    except (KeyboardInterrupt, Cancelled):
        print(f"stopped; every finished point is in {args.out}", file=sys.stderr)
        return 130
    print(summary_line(res, args.out), file=sys.stderr)
    return 0
