"""The training lab on the command line: `sweep train`, `max-batch`, `profile`, `tune train`.

    python -m a800lab sweep train --model transformer --batch-size 8 32 128 \
        --precision fp32 bf16 --accum-steps 1 4 --out train.jsonl   # training steps
    python -m a800lab max-batch --model transformer --precision bf16 --target-batch 1024
    python -m a800lab profile --model transformer --precision bf16 --batch-size 32 --out prof/
    python -m a800lab tune train --model transformer --target-batch 256
    python -m a800lab tune train --user-model my_model.py --target-batch 256   # your model

`max-batch` prints one JSON line (the verified answer and, with --target-batch, the plan as
micro-batch x accumulation steps) and exits 1 when no micro-batch fits. `profile` prints where
a step's time goes and writes prof/trace.json (Perfetto, chrome://tracing) and prof/
profile.json. `tune train` prints the winner, the frontier of samples/s vs peak memory and the
code to paste; it exits 1 when no config survives. `--user-model FILE.py` (or a module name)
is a file defining make_model() and make_batch(batch_size) (and optionally loss_fn), the
contract of TrainingExplorer.
"""

from __future__ import annotations

import functools
import json
import math
import os
import sys

from ..core.cancel import Cancelled
from .options import (
    TRAIN_PRECISION_HELP,
    check_run_options,
    check_store,
    cpu_notes,
    resume_options,
    run_options,
    run_sweep_command,
    show_record,
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
    lever_options(train)

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

    profile = commands.add("profile", run=profile_command,
                           help="where a training step's time goes (torch.profiler): device time "
                                "by category, idle, launch gaps, top ops, a Perfetto trace")
    train_options(profile, many=False)
    user_model_option(profile)
    profile.add_argument("--precision", default="fp32", help=TRAIN_PRECISION_HELP)
    profile.add_argument("--batch-size", type=int, default=32, help="micro-batch (default 32)")
    lever_options(profile, many=False)
    profile.add_argument("--steps", type=int, default=3, help="profiled steps (default 3)")
    profile.add_argument("--warmup-steps", type=int, default=3,
                         help="steps before profiling: optimizer state, compilation (default 3)")
    profile.add_argument("--device", default="auto", help="auto, cpu or cuda[:N]")
    profile.add_argument("--threads", type=int, default=None,
                         help="torch CPU threads (default on CPU: all usable cores but one)")
    profile.add_argument("--out", default="prof",
                         help="folder for trace.json and profile.json (default prof/)")
    profile.add_argument("--json", action="store_true", help="print profile.json instead")

    tune = commands.add("train", group="tune", run=tune_train_command,
                        help="the fastest training config for a target effective batch: "
                             "precision x micro-batch x accumulation x checkpointing x compile "
                             "x optimizer (successive halving; every candidate verified; the "
                             "winner stored and reused)")
    tune.add_argument("--model", default="mlp", help="mlp, transformer or cnn (default: mlp)")
    tune.add_argument("--model-size", default=None,
                      help="tiny, small, medium or large (default: tiny on a CPU, medium on a "
                           "GPU)")
    user_model_option(tune)
    tune.add_argument("--target-batch", type=int, required=True,
                      help="the effective batch every candidate trains with")
    tune.add_argument("--precision", nargs="+", default=None,
                      help="precisions to try (default: fp32 on a CPU; bf16 fp16 tf32 on a GPU)")
    tune.add_argument("--checkpointing", nargs="+", choices=["off", "on"], default=None,
                      help="activation checkpointing to try (default: off on)")
    lever_options(tune, tune=True)
    tune.add_argument("--optimizer", default="adamw", help="adamw or sgd (default adamw)")
    tune.add_argument("--lr", type=float, default=None,
                      help="learning rate (default: the preset's, 1e-3 for your model)")
    tune.add_argument("--limit-mib", type=float, default=None,
                      help="memory to fit in, MiB (default: 256 on a CPU, the GPU's free memory)")
    tune.add_argument("--margin", type=float, default=None,
                      help="share of the limit kept free (default 0.1)")
    run_options(tune, out_required=False)
    tune.add_argument("--store", default=None,
                      help="tuned-config file (default $A800LAB_TUNED or ~/.cache/a800lab/"
                           "tuned.json)")
    tune.add_argument("--force", action="store_true", help="tune even when a result is stored")
    tune.add_argument("--json", action="store_true", help="print the stored entry as JSON too")


LEVERS_HELP = {
    "compile": "torch.compile: off, default, reduce-overhead (CUDA graphs; GPU only), "
               "max-autotune (default off)",
    "optimizer_impl": "optimizer implementation: default (torch picks), for-loop, foreach, "
                      "fused",
    "attention": "SDPA back end of the transformer: default, math, flash, efficient, cudnn",
    "channels_last": "NHWC layout for a convolutional model: off or on (default off)",
}


def lever_options(parser, *, many: bool = True, tune: bool = False) -> None:
    """--compile, --optimizer-impl, --attention, --channels-last (lists for a sweep or the
    tuner)."""
    nargs = "+" if many or tune else None
    for name, text in LEVERS_HELP.items():
        kwargs = {"choices": ["off", "on"]} if name == "channels_last" else {}
        parser.add_argument(f"--{name.replace('_', '-')}", dest=name, nargs=nargs,
                            default=None, help=text, **kwargs)


def user_model_option(parser) -> None:
    parser.add_argument("--user-model", default=None,
                        help="your model: a .py file (or module) defining make_model() and "
                             "make_batch(batch_size), optionally loss_fn(outputs, targets)")


def user_task(where: str | None, device: str):
    """The Task of a --user-model file or module (checked with a training dry run), or None."""
    from ..workloads.training.task import check_task

    task = load_user_task(where)
    if task is not None:
        check_task(task, device)
    return task


def load_user_task(where: str | None):
    """The Task of a --user-model file or module, unchecked, or None."""
    if where is None:
        return None
    from ..workloads.training.task import custom_task

    module = _user_module(where)
    missing = [n for n in ("make_model", "make_batch") if not callable(getattr(module, n, None))]
    if missing:
        raise ValueError(f"--user-model {where} defines no {' or '.join(missing)}(): give a "
                         "file with make_model() and make_batch(batch_size)")
    return custom_task(module.make_model, module.make_batch, getattr(module, "loss_fn", None),
                       getattr(module, "accuracy_fn", None))


def _user_module(where: str):
    """The --user-model module, loaded; anything that stops it loading is one line
    (ValueError) naming the value and what to give instead."""
    import importlib
    import importlib.util
    import traceback
    from pathlib import Path

    path = Path(where).expanduser()
    give = "give a .py file defining make_model() and make_batch(batch_size), or a module name"
    if path.is_dir():
        raise ValueError(f"--user-model {where} is a folder; {give}")
    if not path.exists() and (path.suffix == ".py" or "/" in where or os.sep in where):
        raise ValueError(f"--user-model {where}: no such file; {give}")
    if path.is_file() and path.suffix != ".py":
        raise ValueError(f"--user-model {where} is not a .py file; {give}")
    try:
        if path.suffix != ".py":
            return importlib.import_module(where)
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    except SyntaxError as exc:
        raise ValueError(f"--user-model {where}, line {exc.lineno}: {exc.msg}; fix the file "
                         "and run again") from None
    except ModuleNotFoundError as exc:
        if where == exc.name or where.startswith(f"{exc.name}."):
            raise ValueError(f"--user-model {where}: no such file or module; {give}") from None
        raise ValueError(f"--user-model {where} imports {exc.name}, which is not installed "
                         "here; install it or remove the import") from None
    except Exception as exc:  # the user's own code failed while loading: where, in one line
        frames = traceback.extract_tb(exc.__traceback__)
        own = [f for f in frames if Path(f.filename).resolve() == path.resolve()]
        at = (own or frames)[-1]
        raise ValueError(f"--user-model {where} failed while loading ({at.filename}, line "
                         f"{at.lineno}): {type(exc).__name__}: {exc}") from None


def _lever_values(args) -> dict:
    """The lever options given (only those: a sweep without them keeps its old point keys)."""
    out = {}
    for name in LEVERS_HELP:
        given = getattr(args, name, None)
        if given is None:
            continue
        values = given if isinstance(given, list) else [given]
        out[name] = [v == "on" for v in values] if name == "channels_last" else values
    return out


def train_values(args, device: str, *, many: bool = True) -> dict:
    """TrainSpec field -> the value(s) given, defaults filled in; every combination is checked
    (ValueError) before anything runs."""
    from ..core.sweep import grid
    from ..workloads.training.levers import lever_unavailable
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
    values.update(_lever_values(args))
    values = {k: list(dict.fromkeys(v)) for k, v in values.items()}
    for point in grid(values):
        spec = TrainSpec(**point, lr=args.lr)
        check_precision(point["precision"], device)
        preset(point["model"], point["size"])
        refusal = lever_unavailable(spec, device)
        if refusal:
            raise ValueError(refusal)
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


def profile_command(args) -> int:
    from ..core.backends import resolve_device
    from ..core.results import check_folder
    from ..core.sweep import thread_count
    from ..workloads.training.profile import profile_step
    from ..workloads.training.spec import TrainSpec, matmul_precision_of

    device = resolve_device(args.device)
    if args.threads is not None and args.threads < 1:
        raise ValueError(f"--threads {args.threads} must be at least 1")
    check_folder(args.out, "--out")
    task = user_task(args.user_model, device)
    values = train_values(args, device, many=False)
    if task is not None:
        values.update(model=["custom"], size=["custom"])
    spec = TrainSpec(**{k: v[0] for k, v in values.items()}, batch_size=args.batch_size,
                     lr=args.lr)
    cpu_notes([matmul_precision_of(spec.precision)], device)
    print(f"profiling {'your model' if task else spec.model} on {device}: "
          f"{args.warmup_steps} warm-up steps, then "
          f"{args.steps} profiled", file=sys.stderr)
    try:
        with thread_count(threads_for(args, device)):
            report = profile_step(spec, task, device=device, steps=args.steps,
                                  warmup_steps=args.warmup_steps, out=args.out)
    except (KeyboardInterrupt, Cancelled):
        print("stopped; nothing written", file=sys.stderr)
        return 130
    print(json.dumps(report.to_dict(), indent=1) if args.json else report.summary())
    return 0


def tune_train_command(args) -> int:
    from ..core.backends import resolve_device
    from ..core.store import tuned_store_path
    from ..core.sweep import thread_count
    from ..workloads.training.max_batch import DEFAULT_MARGIN
    from ..workloads.training.spec import canonical_precision
    from ..workloads.training.tune import tune_train

    check_run_options(args)
    device = resolve_device(args.device)
    task = user_task(args.user_model, device)
    axes = _lever_values(args)
    if args.precision:
        axes["precision"] = list(dict.fromkeys(canonical_precision(p) for p in args.precision))
    if args.checkpointing:
        axes["checkpointing"] = list(dict.fromkeys(c == "on" for c in args.checkpointing))
    limit = None
    if args.limit_mib is not None:
        if not (math.isfinite(args.limit_mib) and args.limit_mib > 0):
            raise ValueError(f"--limit-mib {args.limit_mib} must be a number of MiB > 0")
        limit = int(args.limit_mib * 2**20)
    margin = DEFAULT_MARGIN if args.margin is None else args.margin
    if not 0 <= margin < 1:
        raise ValueError(f"--margin {margin} must be in [0, 1), e.g. 0.1")
    store = args.store or tuned_store_path()
    check_store(store)
    name = args.user_model or args.model
    print(f"tuning {name} for an effective batch of {args.target_batch} on {device}",
          file=sys.stderr)
    try:
        with thread_count(threads_for(args, device)):
            outcome = tune_train(task, model=args.model, size=args.model_size,
                                 target_batch=args.target_batch, axes=axes,
                                 optimizer=args.optimizer, lr=args.lr, device=device,
                                 limit_bytes=limit, margin=margin, budget_s=args.budget_s,
                                 store=store, out=args.out, force=args.force,
                                 on_trial=show_record,
                                 on_stage=lambda text: print(text, file=sys.stderr))
    except (KeyboardInterrupt, Cancelled):
        print("stopped; nothing stored" + (f"; the trials are in {args.out}" if args.out
                                            else ""), file=sys.stderr)
        return 130
    if outcome.reused:
        print(f"reused the result tuned at {outcome.entry['tuned_at']} from {store} (--force "
              "tunes again)", file=sys.stderr)
    elif not outcome.entry:
        print(outcome.summary(), file=sys.stderr)
        return 1
    elif outcome.entry["stored"]:
        print(f"{outcome.search.verdict}; stored in {store}", file=sys.stderr)
    print(outcome.summary())
    print("\n# the code to paste:\n" + outcome.snippet)
    if args.json:
        print(json.dumps(outcome.entry, indent=1))
    return 0
