"""The serving lab on the command line: `sweep serve`, `sweep decode`, `sweep concurrency` and
`tune serve`.

    python -m a800lab sweep serve --model transformer --batch-size 1 8 64 \
        --precision fp32 bf16 --out serve.jsonl          # p50/p90/p99 and samples/s per config
    python -m a800lab sweep decode --batch-size 1 4 16 --precision bf16 --out decode.jsonl
    python -m a800lab sweep concurrency --streams 1 2 4 --batch-size 8 --out streams.jsonl
    python -m a800lab tune serve --p99-ms 10 --model transformer      # the code to paste
    python -m a800lab tune serve --p99-ms 10 --user-model my_model.py   # your model

`--user-model FILE.py` (or a module) defines make_model() and make_batch(batch_size), the file
the training commands take; its output must be (batch, ...). Every value is checked before
anything runs (a bad one exits 2 naming it). `tune serve` exits 1 when no config meets the
target in its re-measurement.
"""

from __future__ import annotations

import functools
import json
import sys

from ..core.cancel import Cancelled
from .options import (
    check_run_options,
    cpu_notes,
    resume_options,
    run_options,
    run_sweep_command,
    show_record,
    threads_for,
)
from .train import load_user_task, user_model_option

PRECISION_HELP = "fp32, tf32 (GPU), fp16 or bf16 (default fp32)"


def add_parsers(commands) -> None:
    serve = commands.add("serve", group="sweep", run=sweep_serve_command,
                         help="inference latency (p50/p90/p99) and samples/s over batch size, "
                              "precision, compile, CUDA graphs and layout")
    _model_options(serve)
    _config_options(serve)
    _sweep_options(serve)

    decode = commands.add("decode", group="sweep", run=sweep_decode_command,
                          help="token generation from a static KV cache: time per token, "
                               "tokens/s and the memory-bandwidth bound, over batch size")
    decode.add_argument("--model-size", nargs="+", default=None,
                        help="transformer preset size (default: tiny on a CPU, gpt2_small on "
                             "a GPU)")
    decode.add_argument("--batch-size", type=int, nargs="+", default=[1, 4, 16],
                        help="sequences decoded together (default 1 4 16)")
    decode.add_argument("--precision", nargs="+", default=["fp32"], help=PRECISION_HELP)
    decode.add_argument("--prompt-tokens", type=int, default=None, help="prompt length")
    decode.add_argument("--new-tokens", type=int, default=None, help="tokens generated")
    _sweep_options(decode, requests=False)

    streams = commands.add("concurrency", group="sweep", run=sweep_concurrency_command,
                           help="N request streams sharing the device: samples/s and p99 per "
                                "N, and whether MPS is active (read only)")
    _model_options(streams)
    streams.add_argument("--streams", type=int, nargs="+", default=[1, 2, 4],
                         help="concurrent streams (default 1 2 4)")
    streams.add_argument("--mode", choices=["threads", "processes"], default="threads",
                         help="threads (own CUDA stream each) or processes (own CUDA context "
                              "each: what MPS shares)")
    streams.add_argument("--batch-size", type=int, default=8, help="request batch (default 8)")
    streams.add_argument("--precision", default="fp32", help=PRECISION_HELP)
    _sweep_options(streams)

    tune = commands.add("serve", group="tune", run=tune_serve_command,
                        help="the config with the most samples/s whose p99 stays under "
                             "--p99-ms, re-measured on its own; prints the code to paste")
    tune.add_argument("--p99-ms", type=float, required=True,
                      help="the latency target: p99 of a request batch, milliseconds")
    _model_options(tune)
    _config_options(tune, defaults=False)
    _requests_option(tune)
    run_options(tune, out_required=False)
    tune.add_argument("--json", action="store_true", help="print the outcome as JSON too")


def _model_options(parser) -> None:
    parser.add_argument("--model", default="transformer",
                        help="transformer, cnn, mlp or resnet50 (default transformer)")
    parser.add_argument("--model-size", default=None,
                        help="tiny ... large (default: tiny on a CPU, medium on a GPU)")
    user_model_option(parser)


def _config_options(parser, *, defaults: bool = True) -> None:
    """--batch-size, --precision, --compile, --graphs, --channels-last (lists)."""
    parser.add_argument("--batch-size", type=int, nargs="+", default=[1, 8, 64] if defaults
                        else None, help="request batch sizes" + (" (default 1 8 64)" if
                                                                 defaults else ""))
    parser.add_argument("--precision", nargs="+", default=["fp32"] if defaults else None,
                        help=PRECISION_HELP)
    parser.add_argument("--compile", nargs="+", default=None,
                        help="torch.compile: off, default, reduce-overhead (GPU), max-autotune")
    parser.add_argument("--graphs", nargs="+", choices=["off", "on"], default=None,
                        help="capture the forward as a CUDA graph (GPU)")
    parser.add_argument("--channels-last", nargs="+", choices=["off", "on"], default=None,
                        help="NHWC layout (image models)")


def _requests_option(parser) -> None:
    parser.add_argument("--requests", type=int, default=None,
                        help="requests timed per point, at least (default 200; >= 100)")


def _sweep_options(parser, *, requests: bool = True) -> None:
    """--requests, the run options, --no-resume and --telemetry of a serving sweep."""
    if requests:
        _requests_option(parser)
    run_options(parser)
    resume_options(parser)
    parser.add_argument("--telemetry", action="store_true", help="sample NVML during each point")


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
    from ..core.backends import resolve_device
    from ..workloads.serving.point import serve_point

    check_run_options(args)
    device = resolve_device(args.device)
    task = _task(args, device)
    axes = config_axes(device, task, **_given(args))
    point = functools.partial(serve_point, task=task, device=device, budget_s=args.budget_s,
                              **_requests(args))
    cpu_notes([p for p in axes["precision"] if p != "tf32"], device)
    return run_sweep_command(point, axes, args, device, workload="serve")


def sweep_decode_command(args) -> int:
    from ..core.backends import resolve_device
    from ..core.precision import check_supported
    from ..workloads.serving.decode import CPU_DECODE, GPU_DECODE, decode_point
    from ..workloads.serving.spec import serve_precision
    from ..workloads.training.models import preset
    from ..workloads.training.spec import positive_int

    check_run_options(args)
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
    from ..core.backends import resolve_device
    from ..workloads.serving.concurrency import concurrency_point
    from ..workloads.training.spec import positive_int

    check_run_options(args)
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
    from ..core.backends import resolve_device
    from ..core.sweep import thread_count
    from ..workloads.serving.tune import default_axes, tune_serve
    from ..workloads.training.spec import positive_float

    positive_float("p99_ms", args.p99_ms, "50 (milliseconds)")
    check_run_options(args)
    device = resolve_device(args.device)
    task = _task(args, device)
    options = _given(args)
    given = config_axes(device, task, **options)
    axes = {k: v for k, v in given.items() if options.get(k) is not None and k != "model"
            and k != "size"}
    grid = {**default_axes(device), **axes}
    size = given["size"][0]
    name = args.user_model or args.model
    print(f"tuning {name} for p99 <= {args.p99_ms:g} ms on {device}: "
          f"{', '.join(f'{k} {v}' for k, v in grid.items())}", file=sys.stderr)
    try:
        with thread_count(threads_for(args, device)):
            outcome = tune_serve(args.p99_ms, task, model=args.model, size=size, axes=axes,
                                 device=device, budget_s=args.budget_s, out=args.out,
                                 on_trial=show_record, **_requests(args))
    except (KeyboardInterrupt, Cancelled):
        print("stopped" + (f"; the trials are in {args.out}" if args.out else ""),
              file=sys.stderr)
        return 130
    print(outcome.summary())
    if outcome.winner is not None:
        print("\n# the code to paste:\n" + outcome.snippet)
    if args.json:
        print(json.dumps({"p99_ms": args.p99_ms, "winner": outcome.winner,
                          "remeasured": outcome.remeasured, "frontier": outcome.frontier},
                         indent=1))
    return 0 if outcome.winner is not None else 1
