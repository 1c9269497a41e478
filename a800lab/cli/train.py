"""The training lab on the command line: `sweep train` and `max-batch`.

    python -m a800lab sweep train --model transformer --batch-size 8 32 128 \
        --precision fp32 bf16 --accum-steps 1 4 --out train.jsonl   # training steps
    python -m a800lab max-batch --model transformer --precision bf16 --target-batch 1024

`max-batch` prints one JSON line (the verified answer and, with --target-batch, the plan as
micro-batch x accumulation steps) and exits 1 when no micro-batch fits.
"""

from __future__ import annotations

import functools
import json
import math
import sys

from ..core.cancel import Cancelled
from .options import (
    TRAIN_PRECISION_HELP,
    check_run_options,
    cpu_notes,
    resume_options,
    run_options,
    run_sweep_command,
    show_trial,
    threads_for,
    train_options,
)


def add_parsers(commands) -> None:
    train = commands.add("train", group="sweep", run=sweep_train_command,
                         help="training steps over batch, accumulation, precision, optimizer "
                              "and checkpointing")
    train_options(train)
    train.add_argument("--precision", nargs="+", default=None, help=TRAIN_PRECISION_HELP)
    train.add_argument("--batch-size", type=int, nargs="+",
                       help="micro-batch sizes (default 32)")
    train.add_argument("--train-steps", type=int, default=None,
                       help="optimizer steps per point before timing, for its loss curve "
                            "(default 20 on a CPU, 50 on a GPU)")
    run_options(train)
    resume_options(train)
    train.add_argument("--telemetry", action="store_true", help="sample NVML during each point")

    max_batch = commands.add("max-batch", run=max_batch_command,
                             help="the largest micro-batch of a training step that fits (grow, "
                                  "bisect, verify)")
    train_options(max_batch, many=False)
    max_batch.add_argument("--precision", default="fp32", help=TRAIN_PRECISION_HELP)
    max_batch.add_argument("--target-batch", type=int, default=None,
                           help="an effective batch to plan as micro-batch x accumulation")
    max_batch.add_argument("--limit-mib", type=float, default=None,
                           help="memory to fit in, MiB (default: 256 on a CPU, the GPU's free "
                                "memory; smaller on a GPU plans for a smaller card)")
    max_batch.add_argument("--margin", type=float, default=None,
                           help="share of the limit kept free (default 0.1)")
    max_batch.add_argument("--device", default="auto", help="auto, cpu or cuda[:N]")
    max_batch.add_argument("--threads", type=int, default=None,
                           help="torch CPU threads (default on CPU: all usable cores but one)")
    max_batch.add_argument("--out", default=None, help="JSON Lines file to append the result to")


def train_values(args, device: str, *, many: bool = True) -> dict:
    """TrainSpec field -> the value(s) given, defaults filled in; every combination is checked
    (ValueError) before anything runs."""
    from ..core.sweep import grid
    from ..workloads.training.models import default_size, preset
    from ..workloads.training.spec import TrainSpec, canonical_precision, check_precision

    def listed(given, default):  # a sweep's options are lists, max-batch's single values
        if given is None:
            return [default]
        return list(given) if many else [given]

    values = {
        "model": listed(args.model, "mlp"),
        "size": listed(args.model_size, default_size(device)),
        "accum_steps": listed(args.accum_steps, 1),
        "precision": [canonical_precision(p) for p in listed(args.precision, "fp32")],
        "optimizer": listed(args.optimizer, "adamw"),
        "checkpointing": [c == "on" for c in listed(args.checkpointing, "off")],
    }
    if many:
        values["batch_size"] = listed(args.batch_size, 32)
    values = {k: list(dict.fromkeys(v)) for k, v in values.items()}
    for point in grid(values):
        TrainSpec(**point, lr=args.lr)
        check_precision(point["precision"], device)
        preset(point["model"], point["size"])
    return values


def sweep_train_command(args) -> int:
    from ..core.backends import resolve_device
    from ..workloads.training.point import train_point
    from ..workloads.training.spec import matmul_precision_of

    check_run_options(args)
    device = resolve_device(args.device)
    axes = train_values(args, device)
    train_steps = args.train_steps if args.train_steps is not None else \
        (20 if device == "cpu" else 50)
    if train_steps < 1:
        raise ValueError(f"--train-steps {train_steps} must be at least 1")
    point = functools.partial(train_point, device=device, budget_s=args.budget_s,
                              train_steps=train_steps, lr=args.lr)
    cpu_notes(list(dict.fromkeys(matmul_precision_of(p) for p in axes["precision"])), device)
    return run_sweep_command(point, axes, args, device, workload="train")


def max_batch_command(args) -> int:
    from ..core.backends import resolve_device
    from ..core.results import check_writable
    from ..core.sweep import thread_count
    from ..workloads.training.max_batch import DEFAULT_MARGIN, find_max_batch_for
    from ..workloads.training.spec import TrainSpec

    device = resolve_device(args.device)
    values = train_values(args, device, many=False)
    spec = TrainSpec(**{k: v[0] for k, v in values.items()}, lr=args.lr)
    margin = DEFAULT_MARGIN if args.margin is None else args.margin
    if not 0 <= margin < 1:
        raise ValueError(f"--margin {margin} must be in [0, 1), e.g. 0.1")
    limit = None
    if args.limit_mib is not None:
        if not (math.isfinite(args.limit_mib) and args.limit_mib > 0):
            raise ValueError(f"--limit-mib {args.limit_mib} must be a number of MiB > 0")
        limit = int(args.limit_mib * 2**20)
    if args.target_batch is not None and args.target_batch < 1:
        raise ValueError(f"--target-batch {args.target_batch} must be at least 1")
    if args.threads is not None and args.threads < 1:
        raise ValueError(f"--threads {args.threads} must be at least 1")
    if args.out is not None:
        check_writable(args.out)
    print(f"max batch of {spec.model} ({spec.size}, {spec.precision}, {spec.optimizer}, "
          f"checkpointing {'on' if spec.checkpointing else 'off'}) on {device}", file=sys.stderr)
    try:
        with thread_count(threads_for(args, device)):
            result = find_max_batch_for(spec, device=device, limit_bytes=limit, margin=margin,
                                        target_batch=args.target_batch, on_trial=show_trial)
    except (KeyboardInterrupt, Cancelled):
        print("stopped; nothing written", file=sys.stderr)
        return 130
    print(result.summary(), file=sys.stderr)
    line = json.dumps({"spec": spec.to_dict(), **result.to_dict()})
    if args.out is not None:
        with open(args.out, "a", encoding="utf-8") as f:
            f.write(line + "\n")
    print(line)
    return 0 if result.batch_size else 1
