"""The serving lab on the command line: `sweep serve`, `sweep decode`, `sweep concurrency`,
`sweep generate` and `tune serve`; `--user-model` is the training commands' file, its output
(batch, ...); for `sweep generate` a file defining make_generator()."""

import functools
import json
import sys

from ..core.precision import check_supported
from ..core.sweep import grid
from ..workloads.serving import spec as serving
from ..workloads.training.models import preset
from ..workloads.training.spec import positive_float, positive_int
from ..workloads.training.task import CUSTOM
from . import options
from .train import user_module, user_task

PRECISION_HELP = "fp32, tf32 (GPU), fp16 or bf16 (default fp32)"
MODEL = "model model_size user_model"
CONFIG = "batch_size+ precision+ compile+ graphs+ channels_last+"
MODEL_HELP = {"model": {"default": "transformer",
                        "help": "transformer, cnn, mlp or resnet50 (default transformer)"},
              "model_size": "tiny ... large (default: tiny on a CPU, medium on a GPU)"}


def add_parsers(commands) -> None:
    commands.add("serve", group="sweep", run=sweep_serve_command,
                 help="inference latency (p50/p90/p99) and samples/s over batch size, "
                      "precision, compile, CUDA graphs and layout",
                 options=f"{MODEL} {CONFIG} requests SWEEP", **MODEL_HELP,
                 batch_size={"default": [1, 8, 64], "help": "request batch sizes (default 1 8 64)"},
                 precision={"default": ["fp32"], "help": PRECISION_HELP})
    commands.add("decode", group="sweep", run=sweep_decode_command,
                 help="token generation from a static KV cache: time per token, tokens/s and "
                      "the memory-bandwidth bound, over batch size",
                 options="model_size+ batch_size+ precision+ prompt_tokens new_tokens SWEEP",
                 model_size="transformer preset size (default: tiny on a CPU, gpt2_small on a GPU)",
                 batch_size={"default": [1, 4, 16],
                             "help": "sequences decoded together (default 1 4 16)"},
                 precision={"default": ["fp32"], "help": PRECISION_HELP},
                 prompt_tokens={"type": int, "help": "prompt length"},
                 new_tokens={"type": int, "help": "tokens generated"})
    commands.add("concurrency", group="sweep", run=sweep_concurrency_command,
                 help="N request streams sharing the device: samples/s and p99 per N, and "
                      "whether MPS is active (read only)",
                 options=f"{MODEL} streams+ mode batch_size precision requests SWEEP",
                 **MODEL_HELP, streams={"type": int, "default": [1, 2, 4],
                                        "help": "concurrent streams (default 1 2 4)"},
                 mode={"choices": ["threads", "processes"], "default": "threads",
                       "help": "threads (own CUDA stream each) or processes (own CUDA context "
                               "each: what MPS shares)"},
                 batch_size={"default": 8, "help": "request batch (default 8)"},
                 precision={"default": "fp32", "help": PRECISION_HELP})
    commands.add("serve", group="tune", run=tune_serve_command,
                 help="the config with the most samples/s whose p99 stays under --p99-ms, "
                      "re-measured on its own; prints the code to paste",
                 options=f"p99_ms {MODEL} {CONFIG} requests RUN json", **MODEL_HELP,
                 p99_ms={"type": float, "required": True,
                         "help": "the latency target: p99 of a request batch, milliseconds",
                         "check": lambda ms: positive_float("p99_ms", ms, "50 (milliseconds)")},
                 batch_size="request batch sizes", precision=PRECISION_HELP,
                 out={"required": False}, json="print the outcome as JSON too")
    commands.add("generate", group="sweep", run=sweep_generate_command,
                 help="generation under load: requests with drawn prompt and output lengths "
                      "arriving at --rate, served by static or continuous batching; TTFT, TPOT "
                      "(p50 and p99) and tokens/s per point",
                 options="rate arrival burstiness trace prompt_tokens output_tokens scheduler "
                         "max_batch duration_s model_size user_model precision device threads out "
                         "no_resume telemetry",
                 rate="offered request rates, requests/s (default: 100 on a CPU, 20 on a GPU)",
                 prompt_tokens={"help": "prompt lengths: N, or LO:HI drawn uniformly (default: "
                                        "4:16 on a CPU, 32:256 on a GPU)"},
                 output_tokens={"help": "tokens generated per request: N or LO:HI (default: "
                                        "2:40 on a CPU, 32:256 on a GPU)"},
                 scheduler={"nargs": "+", "default": ["static", "continuous"],
                            "help": "static (a batch runs until its longest request ends) "
                                    "and/or continuous (a finished slot is refilled at the next "
                                    "step) (default both)"},
                 max_batch="sequences decoded together at most (default: 8 on a CPU, 16 on a "
                           "GPU)",
                 model_size="transformer preset size (default: small on a CPU, gpt2_small on "
                            "a GPU)",
                 user_model="your generator: a .py file defining make_generator() (the "
                            "protocol: a800lab/workloads/serving/kv.py)",
                 precision={"default": "fp32", "help": PRECISION_HELP})


def _listed(values, default) -> list:
    return list(dict.fromkeys(values)) if values else [default]


def config_axes(args, task, batch_size, precision) -> dict:
    """The grid of serving configs given (lists; None: the default); every combination is
    checked (ValueError) before anything runs."""
    axes = {"model": [task.name if task else args.model],
            "size": [serving.serving_size(args.model, args.model_size, args.device, task)],
            "batch_size": _listed(batch_size, 8),
            "precision": _listed([serving.serve_precision(p) for p in precision or []], "fp32"),
            "compile": _listed(getattr(args, "compile", None), "off"),
            **{name: _listed([v == "on" for v in getattr(args, name, None) or []], False)
               for name in ("graphs", "channels_last")}}
    if task is None:
        preset(axes["model"][0], axes["size"][0])
    for point in grid(axes):
        reason = serving.serving_unavailable(serving.ServeSpec(**point), args.device)
        if reason:
            raise ValueError(reason)
    return axes


def _requests(args) -> dict:
    return {} if args.requests is None else {"requests": args.requests}


def sweep_serve_command(args) -> int:
    from ..workloads.serving.point import serve_point

    task = user_task(args.user_model, args.device, serving.check_serving_task)
    axes = config_axes(args, task, args.batch_size, args.precision)
    point = functools.partial(serve_point, task=task, device=args.device,
                              budget_s=args.budget_s, **_requests(args))
    options.cpu_notes([p for p in axes["precision"] if p != "tf32"], args.device)
    return options.run_sweep_command(point, axes, args, workload="serve")


def sweep_decode_command(args) -> int:
    from ..workloads.serving.decode import CPU_DECODE, GPU_DECODE, decode_point

    default = (CPU_DECODE if args.device == "cpu" else GPU_DECODE)["size"]
    axes = {"size": _listed(args.model_size, default), "batch_size": _listed(args.batch_size, 1),
            "precision": _listed([serving.serve_precision(p) for p in args.precision], "fp32")}
    for size in axes["size"]:
        preset("transformer", size)
    for b in axes["batch_size"]:
        positive_int("batch_size", b, "1")
    for p in axes["precision"]:
        check_supported(p, args.device)
    fixed = {k: positive_int(k, v, "16") for k in ("prompt_tokens", "new_tokens")
             if (v := getattr(args, k)) is not None}
    point = functools.partial(decode_point, device=args.device, budget_s=args.budget_s)
    return options.run_sweep_command(point, axes, args, workload="decode", fixed=fixed)


def sweep_concurrency_command(args) -> int:
    from ..workloads.serving.concurrency import concurrency_point

    task = user_task(args.user_model, args.device, serving.check_serving_task)
    axes = config_axes(args, task, [args.batch_size], [args.precision])
    for key in ("compile", "graphs", "channels_last"):
        axes.pop(key)
    axes["streams"] = [positive_int("streams", n, "4") for n in _listed(args.streams, 1)]
    point = functools.partial(concurrency_point, task=task, device=args.device,
                              **_requests(args))
    return options.run_sweep_command(point, axes, args, workload="concurrency",
                                     fixed={"mode": args.mode})


def tune_serve_command(args) -> int:
    from ..workloads.serving.tune import default_axes, tune_serve

    task = user_task(args.user_model, args.device, serving.check_serving_task)
    given = config_axes(args, task, args.batch_size, args.precision)
    axes = {k: v for k, v in given.items() if k != "model" and getattr(args, k, None) is not None}
    tried = {**default_axes(args.device), **axes}
    print(f"tuning {args.user_model or args.model} for p99 <= {args.p99_ms:g} ms on "
          f"{args.device}: {', '.join(f'{k} {v}' for k, v in tried.items())}", file=sys.stderr)
    outcome = options.stoppable(args, lambda: tune_serve(
        args.p99_ms, task, model=args.model, size=given["size"][0], axes=axes,
        device=args.device, budget_s=args.budget_s, out=args.out, on_trial=options.show_record,
        **_requests(args)), "stopped" + options.kept(args.out))
    print(outcome.summary())
    if outcome.winner is not None:
        print("\n# the code to paste:\n" + outcome.snippet)
    if args.json:
        print(json.dumps({"p99_ms": args.p99_ms, "winner": outcome.winner,
                          "remeasured": outcome.remeasured, "frontier": outcome.frontier},
                         indent=1))
    return 0 if outcome.winner is not None else 1


def sweep_generate_command(args) -> int:
    from ..workloads.serving.generate import (
        GenerateSpec,
        generate_defaults,
        generate_point,
        generator_context,
        requests_schedule,
    )

    defaults = generate_defaults(args.device)
    make = _user_generator(args.user_model)
    size = CUSTOM if make else args.model_size or defaults["size"]
    trace_as_is = args.arrival == "trace" and args.rate is None
    axes = {"rate_rps": [None] if trace_as_is else [
                positive_float("rate", r, "100 (requests/s)")
                for r in _listed(args.rate, defaults["rate_rps"])],
            "scheduler": _listed(args.scheduler, "continuous"),
            "max_batch": [positive_int("max_batch", b, "8")
                          for b in _listed(args.max_batch, defaults["max_batch"])]}
    fixed = {"size": size, "arrival": args.arrival, "burstiness": args.burstiness,
             "trace": args.trace, "duration_s": args.duration_s,
             "precision": serving.serve_precision(args.precision),
             **{k: getattr(args, k) or defaults[k] for k in ("prompt_tokens", "output_tokens")}}
    check_supported(fixed["precision"], args.device)
    context = generator_context(size, make, args.device)  # user faults: one line, now
    for point in grid(axes):  # every bad value refused before anything runs
        GenerateSpec(point["scheduler"], point["max_batch"], fixed["prompt_tokens"],
                     fixed["output_tokens"]).fit(*context)
        requests_schedule(args.arrival, point["rate_rps"], args.duration_s, args.burstiness,
                          args.trace, 0, args.device)
    point = functools.partial(generate_point, generator=make, device=args.device)
    options.cpu_notes([fixed["precision"]], args.device)
    return options.run_sweep_command(point, axes, args, workload="generate", fixed=fixed)


def _user_generator(where: str | None):
    """make_generator of a --user-model file or module, or None."""
    if where is None:
        return None
    make = getattr(user_module(where), "make_generator", None)
    if not callable(make):
        raise ValueError(f"--user-model {where} defines no make_generator(): give a file whose "
                         "make_generator() returns a generator (the protocol: "
                         "a800lab/workloads/serving/kv.py)")
    return make
