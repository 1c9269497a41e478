"""The training lab on the command line: `sweep train`, `max-batch`, `profile`, `tune train`;
`--user-model FILE.py` (or a module) defines make_model() and make_batch(batch_size). The lab is
imported when one of its commands runs, never to build the parser."""

import functools
import json
import sys

from ..core.knobs import knobs, levers
from ..core.sweep import grid
from . import options
from .options import FLAG, FOLDER

SPEC = "model model_size accum_steps optimizer checkpointing lr"  # the training spec's options


def train_spec():
    from ..workloads.training.spec import TrainSpec

    return TrainSpec


def add_parsers(commands) -> None:
    commands.add("train", group="sweep", run=sweep_train_command, spec=train_spec,
                 help="training steps over batch, accumulation, precision, optimizer and "
                      "checkpointing",
                 options="model+ model_size+ user_model accum_steps+ optimizer+ "
                         "checkpointing+ lr precision+ batch_size+ train_steps SWEEP LEVERS+",
                 train_steps="optimizer steps per point before timing, for its loss curve "
                             "(default 20 on a CPU, 50 on a GPU)")
    commands.add("max-batch", run=max_batch_command, spec=train_spec,
                 help="the largest micro-batch of a training step that fits (grow, bisect, verify)",
                 options=f"{SPEC} precision target_batch limit_mib margin device threads out",
                 target_batch="an effective batch to plan as micro-batch x accumulation",
                 out={"help": "JSON Lines file to append the result to", "required": False})
    commands.add("profile", run=profile_command, spec=train_spec,
                 help="where a training step's time goes (torch.profiler): device time by "
                      "category, idle, launch gaps, top ops, a Perfetto trace",
                 options=f"{SPEC} user_model precision batch_size LEVERS steps warmup_steps "
                         "memory device threads out json",
                 steps={"type": int, "default": 3, "help": "profiled steps (default 3)"},
                 warmup_steps={"type": int, "default": 3, "help": "steps before profiling: "
                               "optimizer state, compilation (default 3)"},
                 memory={**FLAG, "help": "also one step's memory over time by category "
                         "(torch's memory profiler): the peak and what was live at it, "
                         "memory_timeline.json"},
                 out={**FOLDER, "default": "prof",
                      "help": "folder for trace.json, profile.json and memory_timeline.json "
                              "(default prof/)"},
                 json="print profile.json instead")
    commands.add("train", group="tune", run=tune_train_command, spec=train_spec,
                 help="the fastest training config for a target effective batch: precision x "
                      "micro-batch x accumulation x checkpointing x compile x optimizer (successive"
                      " halving; every candidate verified; the winner stored and reused)",
                 options="model model_size user_model target_batch precision+ checkpointing+ "
                         "LEVERS+ optimizer lr limit_mib margin RUN store force json",
                 target_batch={"required": True},
                 precision="precisions to try (default: fp32 on a CPU; bf16 fp16 tf32 on a GPU)",
                 checkpointing="activation checkpointing to try (default: off on)",
                 out={"required": False},
                 lr="learning rate (default: the preset's, 1e-3 for your model)",
                 json="print the stored entry as JSON too")


def user_task(where: str | None, device: str, check):
    """The Task of a --user-model file or module, dry-run by `check(task, device)`, or None;
    whatever is wrong with it is one line (ValueError) naming the file and the fault."""
    from ..workloads.models.user_model import load_user_task

    return None if where is None else load_user_task(where, device, check,
                                                     label=f"--user-model {where}")


def _lever_values(args, also: tuple = ()) -> dict:
    """The lever options given, and those named in `also`, once each (only those given: a sweep
    without them keeps its old point keys)."""
    given = {name: getattr(args, name, None) for name in (*levers(train_spec()), *also)}
    return {name: list(dict.fromkeys(v if isinstance(v, list) else [v]))
            for name, v in given.items() if v is not None}


def train_values(args) -> dict:
    """TrainSpec field -> the value(s) given (lists for a sweep), defaults filled in; every
    combination is checked (ValueError) before anything runs. With --user-model the model is
    "custom" (your file's), its levers checked against it, not a preset."""
    from ..workloads.models.levers import lever_unavailable
    from ..workloads.models.presets import preset
    from ..workloads.models.task import CUSTOM
    from ..workloads.training.spec import TrainSpec, check_precision

    custom = getattr(args, "user_model", None) is not None
    if custom and (args.model is not None or args.model_size is not None):
        raise ValueError("--user-model is the model: drop --model and --model-size")
    values = {name: options.field_value(args, TrainSpec, name, many=True) for name, k in
              knobs(TrainSpec).items() if (k.cli or name) in vars(args) and not k.lever
              and name != "lr"}  # this command's spec options, the levers apart
    if custom:
        values.update(model=[CUSTOM], size=[CUSTOM])
    values.update(_lever_values(args))
    for point in grid(values):
        spec = TrainSpec(**point, lr=args.lr)
        check_precision(point["precision"], args.device)
        if not custom:
            preset(point["model"], point["size"])
        refusal = lever_unavailable(spec, args.device)
        if refusal:
            raise ValueError(refusal)
    return values


def sweep_train_command(args) -> int:
    from ..workloads.models.task import check_task
    from ..workloads.training.point import train_point
    from ..workloads.training.spec import matmul_precision_of

    task = user_task(args.user_model, args.device, check_task)
    axes = train_values(args)
    train_steps = args.train_steps or (20 if args.device == "cpu" else 50)
    point = functools.partial(train_point, task=task, device=args.device,
                              budget_s=args.budget_s, train_steps=train_steps, lr=args.lr)
    precisions = dict.fromkeys(matmul_precision_of(p) for p in axes["precision"])
    options.cpu_notes(list(precisions), args.device)
    return options.run_sweep_command(point, axes, args, workload="train")


def _limit_and_margin(args) -> tuple[int | None, float]:
    from ..workloads.training.max_batch import DEFAULT_MARGIN

    limit = None if args.limit_mib is None else int(args.limit_mib * 2**20)
    return limit, DEFAULT_MARGIN if args.margin is None else args.margin


def max_batch_command(args) -> int:
    from ..workloads.training.max_batch import find_max_batch_for
    from ..workloads.training.spec import TrainSpec

    spec = TrainSpec(**{k: v[0] for k, v in train_values(args).items()}, lr=args.lr)
    limit, margin = _limit_and_margin(args)
    print(f"max batch of {spec.model} ({spec.size}, {spec.precision}, {spec.optimizer}, "
          f"checkpointing {'on' if spec.checkpointing else 'off'}) on {args.device}",
          file=sys.stderr)
    result = options.stoppable(args, lambda: find_max_batch_for(
        spec, device=args.device, limit_bytes=limit, margin=margin,
        target_batch=args.target_batch, on_trial=options.show_trial), "stopped; nothing written")
    print(result.summary(), file=sys.stderr)
    line = json.dumps({"spec": spec.to_dict(), **result.to_dict()})
    if args.out is not None:
        with open(args.out, "a", encoding="utf-8") as f:
            f.write(line + "\n")
    print(line)
    return 0 if result.batch_size else 1


def profile_command(args) -> int:
    from ..workloads.models.task import check_task
    from ..workloads.training.profile import profile_step
    from ..workloads.training.spec import TrainSpec, matmul_precision_of

    task = user_task(args.user_model, args.device, check_task)
    spec = TrainSpec(**{k: v[0] for k, v in train_values(args).items()}, lr=args.lr)
    options.cpu_notes([matmul_precision_of(spec.precision)], args.device)
    print(f"profiling {'your model' if task else spec.model} on {args.device}: "
          f"{args.warmup_steps} warm-up steps, then {args.steps} profiled", file=sys.stderr)
    report = options.stoppable(args, lambda: profile_step(
        spec, task, device=args.device, steps=args.steps, warmup_steps=args.warmup_steps,
        out=args.out, memory=args.memory), "stopped; nothing written")
    print(json.dumps(report.to_dict(), indent=1) if args.json else report.summary())
    return 0


def tune_train_command(args) -> int:
    from ..workloads.models.task import check_task
    from ..workloads.training.tune import CLEAR, noise_clause, storing_clause, tune_train

    task = user_task(args.user_model, args.device, check_task)
    model, optimizer = (options.field_value(args, train_spec(), n) for n in ("model", "optimizer"))
    axes = _lever_values(args, also=("precision", "checkpointing"))
    limit, margin = _limit_and_margin(args)
    store = options.store_path(args.store)
    print(f"tuning {args.user_model or model} for an effective batch of "
          f"{args.target_batch} on {args.device}", file=sys.stderr)
    outcome = options.stoppable(args, lambda: tune_train(
        task, model=model, size=args.model_size, target_batch=args.target_batch,
        axes=axes, optimizer=optimizer, lr=args.lr, device=args.device, limit_bytes=limit,
        margin=margin, budget_s=args.budget_s, store=store, out=args.out, force=args.force,
        on_trial=options.show_record, on_stage=lambda text: print(text, file=sys.stderr)),
        "stopped; nothing stored" + options.kept(args.out))
    if outcome.reused:
        options.say_reused(outcome.entry, store)
    elif not outcome.entry:
        print(outcome.summary(), file=sys.stderr)
        return 1
    elif outcome.entry["stored"]:  # a ranking inside the noise is said once, in the summary
        stored = storing_clause(outcome.entry, store)
        clear = noise_clause(outcome.entry) == CLEAR
        print(f"{outcome.search.verdict}; {stored}" if clear else stored, file=sys.stderr)
    return options.answer(outcome, args.json, outcome.entry)
