"""The serving lab on the command line: `sweep serve`, `sweep decode`, `sweep concurrency` and
`tune serve`; `--user-model` is the training commands' file, its output (batch, ...)."""

from __future__ import annotations

import functools
import json
import sys

from ..core.backends import resolve_device
from .options import (
    RUN,
    SWEEP,
    add_options,
    cpu_notes,
    kept,
    run_sweep_command,
    show_record,
    stoppable,
)
from .train import load_user_task

PRECISION_HELP = "fp32, tf32 (GPU), fp16 or bf16 (default fp32)"
MODEL = "model model_size user_model"
CONFIG = "batch_size+ precision+ compile+ graphs+ channels_last+"
OWN = {"model": {"default": "transformer",
                 "help": "transformer, cnn, mlp or resnet50 (default transformer)"},
       "model_size": "tiny ... large (default: tiny on a CPU, medium on a GPU)"}


def add_parsers(commands) -> None:
    serve = commands.add("serve", group="sweep", run=sweep_serve_command,
                         help="inference latency (p50/p90/p99) and samples/s over batch size, "
                              "precision, compile, CUDA graphs and layout")
    add_options(serve, f"{MODEL} {CONFIG} requests {SWEEP}", **OWN,
                batch_size={"default": [1, 8, 64], "help": "request batch sizes (default 1 8 64)"},
                precision={"default": ["fp32"], "help": PRECISION_HELP})

    decode = commands.add("decode", group="sweep", run=sweep_decode_command,
                          help="token generation from a static KV cache: time per token, "
                               "tokens/s and the memory-bandwidth bound, over batch size")
    add_options(decode, f"model_size+ batch_size+ precision+ prompt_tokens new_tokens {SWEEP}",
                model_size="transformer preset size (default: tiny on a CPU, gpt2_small on a GPU)",
                batch_size={"default": [1, 4, 16],
                            "help": "sequences decoded together (default 1 4 16)"},
                precision={"default": ["fp32"], "help": PRECISION_HELP},
                prompt_tokens={"type": int, "help": "prompt length"},
                new_tokens={"type": int, "help": "tokens generated"})

    streams = commands.add("concurrency", group="sweep", run=sweep_concurrency_command,
                           help="N request streams sharing the device: samples/s and p99 per "
                                "N, and whether MPS is active (read only)")
    add_options(streams, f"{MODEL} streams+ mode batch_size precision requests {SWEEP}", **OWN,
                streams={"type": int, "default": [1, 2, 4],
                         "help": "concurrent streams (default 1 2 4)"},
                mode={"choices": ["threads", "processes"], "default": "threads",
                      "help": "threads (own CUDA stream each) or processes (own CUDA context "
                              "each: what MPS shares)"},
                batch_size={"default": 8, "help": "request batch (default 8)"},
                precision={"default": "fp32", "help": PRECISION_HELP})

    tune = commands.add("serve", group="tune", run=tune_serve_command,
                        help="the config with the most samples/s whose p99 stays under "
                             "--p99-ms, re-measured on its own; prints the code to paste")
    add_options(tune, f"p99_ms {MODEL} {CONFIG} requests {RUN} json", **OWN,
                p99_ms={"type": float, "required": True,
                        "help": "the latency target: p99 of a request batch, milliseconds"},
                batch_size="request batch sizes", precision=PRECISION_HELP,
                out={"required": False}, json="print the outcome as JSON too")


def _task(args, device: str):
    """The --user-model's task, checked for serving, or None."""
    from ..workloads.serving.spec import check_serving_task

    task = load_user_task(args.user_model)
    if task is not None:
        check_serving_task(task, device)
    return task


def _listed(values, default) -> list:
    return list(dict.fromkeys(values)) if values else [default]


def config_axes(device: str, task, *, model: str, size: str | None, batch_size, precision,
                compile=None, graphs=None, channels_last=None) -> dict:
    """The grid of serving configs given (lists; None: the default); every combination is
    checked (ValueError) before anything runs."""
    from ..core.sweep import grid
    from ..workloads.serving.spec import (
        ServeSpec,
        serve_precision,
        serving_size,
        serving_unavailable,
    )
    from ..workloads.training.models import preset

    axes = {"model": [task.name if task else model],
            "size": [serving_size(model, size, device, task)],
            "batch_size": _listed(batch_size, 8),
            "precision": _listed([serve_precision(p) for p in precision or []], "fp32"),
            "compile": _listed(compile, "off"),
            "graphs": _listed([g == "on" for g in graphs or []], False),
            "channels_last": _listed([c == "on" for c in channels_last or []], False)}
    if task is None:
        preset(axes["model"][0], axes["size"][0])
    for point in grid(axes):
        reason = serving_unavailable(ServeSpec(**point), device)
        if reason:
            raise ValueError(reason)
    return axes


def _given(args) -> dict:
    """The model and config options of a command, for config_axes."""
    return {"model": args.model, "size": args.model_size, "batch_size": args.batch_size,
            "precision": args.precision, "compile": args.compile, "graphs": args.graphs,
            "channels_last": args.channels_last}


def _requests(args) -> dict:
    return {} if args.requests is None else {"requests": args.requests}


def sweep_serve_command(args) -> int:
    from ..workloads.serving.point import serve_point

    device = resolve_device(args.device)
    task = _task(args, device)
    axes = config_axes(device, task, **_given(args))
    point = functools.partial(serve_point, task=task, device=device, budget_s=args.budget_s,
                              **_requests(args))
    cpu_notes([p for p in axes["precision"] if p != "tf32"], device)
    return run_sweep_command(point, axes, args, device, workload="serve")


def sweep_decode_command(args) -> int:
    from ..core.precision import check_supported
    from ..workloads.serving.decode import CPU_DECODE, GPU_DECODE, decode_point
    from ..workloads.serving.spec import serve_precision
    from ..workloads.training.models import preset
    from ..workloads.training.spec import positive_int

    device = resolve_device(args.device)
    sizes = _listed(args.model_size, (CPU_DECODE if device == "cpu" else GPU_DECODE)["size"])
    for size in sizes:
        preset("transformer", size)
    axes = {"size": sizes, "batch_size": _listed(args.batch_size, 1),
            "precision": _listed([serve_precision(p) for p in args.precision], "fp32")}
    for b in axes["batch_size"]:
        positive_int("batch_size", b, "1")
    for p in axes["precision"]:
        check_supported(p, device)
    fixed = {k: positive_int(k, v, "16") for k in ("prompt_tokens", "new_tokens")
             if (v := getattr(args, k)) is not None}
    point = functools.partial(decode_point, device=device, budget_s=args.budget_s)
    return run_sweep_command(point, axes, args, device, workload="decode", fixed=fixed)


def sweep_concurrency_command(args) -> int:
    from ..workloads.serving.concurrency import concurrency_point
    from ..workloads.training.spec import positive_int

    device = resolve_device(args.device)
    task = _task(args, device)
    axes = config_axes(device, task, model=args.model, size=args.model_size,
                       batch_size=[args.batch_size], precision=[args.precision])
    for key in ("compile", "graphs", "channels_last"):
        axes.pop(key)
    axes["streams"] = [positive_int("streams", n, "4") for n in _listed(args.streams, 1)]
    point = functools.partial(concurrency_point, task=task, device=device, **_requests(args))
    return run_sweep_command(point, axes, args, device, workload="concurrency",
                             fixed={"mode": args.mode})


def tune_serve_command(args) -> int:
    from ..workloads.serving.tune import default_axes, tune_serve
    from ..workloads.training.spec import positive_float

    positive_float("p99_ms", args.p99_ms, "50 (milliseconds)")
    device = resolve_device(args.device)
    task = _task(args, device)
    options = _given(args)
    given = config_axes(device, task, **options)
    axes = {k: v for k, v in given.items() if options.get(k) is not None and k != "model"
            and k != "size"}
    grid = {**default_axes(device), **axes}
    print(f"tuning {args.user_model or args.model} for p99 <= {args.p99_ms:g} ms on {device}: "
          f"{', '.join(f'{k} {v}' for k, v in grid.items())}", file=sys.stderr)
    outcome = stoppable(args, device, lambda: tune_serve(
        args.p99_ms, task, model=args.model, size=given["size"][0], axes=axes, device=device,
        budget_s=args.budget_s, out=args.out, on_trial=show_record, **_requests(args)),
        "stopped" + kept(args.out))
    print(outcome.summary())
    if outcome.winner is not None:
        print("\n# the code to paste:\n" + outcome.snippet)
    if args.json:
        print(json.dumps({"p99_ms": args.p99_ms, "winner": outcome.winner,
                          "remeasured": outcome.remeasured, "frontier": outcome.frontier},
                         indent=1))
    return 0 if outcome.winner is not None else 1
