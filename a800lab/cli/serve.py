"""The serving lab on the command line: `sweep serve`, `sweep load`, `sweep decode`, `sweep
concurrency`, `sweep generate` and `tune serve`; `--user-model` is the training commands' file,
its output (batch, ...); for `sweep generate` a file defining make_generator(). The lab is
imported when one of its commands runs, never to build the parser."""

import functools
import itertools
import sys

from ..core.checks import positive_float, positive_int
from ..core.precision import check_supported
from ..core.sweep import grid
from . import options
from .train import user_module, user_task

PRECISION_HELP = "fp32, tf32 (GPU), fp16 or bf16 (default fp32)"
MODEL = "model model_size user_model"
CONFIG = "batch_size+ precision+ compile+ graphs+ channels_last+"
ARRIVAL = "arrival burstiness trace duration_s"
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
    commands.add("load", group="sweep", run=sweep_load_command,
                 help="requests arriving on their own clock at a dynamic batcher (open loop): "
                      "latency from each request's arrival (p50/p90/p99), queue and service "
                      "apart, whether the server kept up, over offered rates",
                 options=f"{MODEL} rate+ load+ {ARRIVAL} max_batch+ max_delay_ms+ "
                         "request_size precision+ compile+ graphs+ channels_last+ SWEEP",
                 **MODEL_HELP, max_batch={"default": [8], "help": "the batcher's largest "
                                          "batches, requests (default 8)"},
                 max_delay_ms={"default": [0.0], "help": "how long the batcher may hold the "
                                                         "oldest request for more, ms "
                                                         "(default 0)"},
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
                 help="the config and dynamic batcher with the most goodput: the highest "
                      "request rate whose p99 (from each request's arrival) meets --p99-ms, "
                      "offered again on its own; --offline: the most samples/s whose batch "
                      "p99 meets it (closed loop); prints the code to paste",
                 options=f"p99_ms percentile offline {MODEL} {CONFIG} max_batch+ "
                         f"max_delay_ms+ {ARRIVAL} requests RUN json", **MODEL_HELP,
                 p99_ms={"type": float, "required": True,
                         "help": "the latency target, milliseconds: of a request from its "
                                 "arrival (online), of a request batch (--offline)",
                         "check": lambda ms: positive_float("p99_ms", ms, "50 (milliseconds)")},
                 offline={"action": "store_true",
                          "help": "the closed-loop question: request batches back to back"},
                 batch_size="request batch sizes (--offline)", precision=PRECISION_HELP,
                 max_batch="the batcher's largest batches (online; default 1 4 16 64, and "
                           "256 on a GPU)",
                 max_delay_ms="the batcher's delays, ms (online; default 0 and a tenth of "
                              "the target)",
                 duration_s="seconds of arrivals per rate tried (online; default 1 on a CPU, "
                            "2.5 on a GPU; the winner twice as long)",
                 out={"required": False}, json="print the outcome as JSON too")
    commands.add("generate", group="sweep", run=sweep_generate_command,
                 help="generation under load: requests with drawn prompt and output lengths "
                      "arriving at --rate, served by static or continuous batching; TTFT, TPOT "
                      "(p50 and p99) and tokens/s per point",
                 options="rate+ arrival burstiness trace prompt_tokens output_tokens "
                         "scheduler max_batch+ duration_s model_size user_model precision "
                         "device threads out no_resume telemetry",
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
    from ..workloads.models.presets import preset
    from ..workloads.serving import spec as serving
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
    from ..workloads.serving import spec as serving
    from ..workloads.serving.point import serve_point

    task = user_task(args.user_model, args.device, serving.check_serving_task)
    axes = config_axes(args, task, args.batch_size, args.precision)
    point = functools.partial(serve_point, task=task, device=args.device,
                              budget_s=args.budget_s, **_requests(args))
    options.cpu_notes([p for p in axes["precision"] if p != "tf32"], args.device)
    return options.run_sweep_command(point, axes, args, workload="serve")


def sweep_decode_command(args) -> int:
    from ..workloads.models.presets import preset
    from ..workloads.serving import spec as serving
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
    from ..workloads.serving import spec as serving
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


def sweep_load_command(args) -> int:
    from ..workloads.serving import spec as serving
    from ..workloads.serving.arrivals import Arrivals
    from ..workloads.serving.load import Batcher, default_duration_s, load_point, schedule_for

    task = user_task(args.user_model, args.device, serving.check_serving_task)
    if args.rate is not None and args.load is not None:
        raise ValueError("give --rate (requests/s) or --load (fractions of the capacity), "
                         "not both")
    if args.rate is None and args.load is None and args.arrival != "trace":
        raise ValueError("give the offered rates: --rate R [R ...] in requests/s, or --load "
                         "F [F ...] as fractions of the closed-loop capacity (e.g. 0.5 0.9)")
    batches = [positive_int("max_batch", b, "8") for b in _listed(args.max_batch, 8)]
    size = 1 if args.request_size is None else positive_int("request_size", args.request_size,
                                                            "1")
    axes = config_axes(args, task, [b * size for b in batches], args.precision)
    axes["max_batch"] = batches
    del axes["batch_size"]
    axes["max_delay_ms"] = _listed(args.max_delay_ms, 0.0)
    fixed = {"arrival": args.arrival, "duration_s": args.duration_s}
    if args.duration_s is None and args.arrival != "trace":
        fixed["duration_s"] = default_duration_s(args.device)
    fixed.update({k: v for k, v in (("burstiness", args.burstiness), ("trace", args.trace),
                                    ("request_size", args.request_size))
                  if v is not None and not (k == "burstiness" and args.arrival != "gamma")})
    if args.load is not None:
        axes["load"] = [positive_float("load", x, "0.5") for x in _listed(args.load, 0.5)]
    elif args.rate is not None:
        axes["rate_rps"] = _listed(args.rate, 100.0)
    for rate in axes.get("rate_rps", [None]):  # a schedule too short for a p99: refused now
        arrivals = Arrivals(args.arrival, rate if rate is not None or args.arrival == "trace"
                            else 1.0, fixed["duration_s"], args.burstiness, args.trace)
        if rate is not None or args.arrival == "trace":
            schedule_for(arrivals)
    for batch, delay in itertools.product(axes["max_batch"], axes["max_delay_ms"]):
        Batcher(batch, delay, size)
    point = functools.partial(load_point, task=task, device=args.device,
                              budget_s=args.budget_s)
    options.cpu_notes([p for p in axes["precision"] if p != "tf32"], args.device)
    return options.run_sweep_command(point, axes, args, workload="load",
                                     fixed={k: v for k, v in fixed.items() if v is not None})


def tune_serve_command(args) -> int:
    from ..workloads.serving import spec as serving
    task = user_task(args.user_model, args.device, serving.check_serving_task)
    if args.offline:
        return _tune_offline(args, task)
    if args.batch_size is not None:
        raise ValueError("--batch-size is the closed loop's axis (--offline); online the "
                         "batcher forms the batches: give --max-batch")
    from ..workloads.serving.arrivals import Arrivals
    from ..workloads.serving.load import Batcher
    from ..workloads.serving.online import default_batcher_axes, tune_online

    given = config_axes(args, task, [1], args.precision)
    axes = {k: v for k, v in given.items()
            if k not in ("model", "batch_size") and getattr(args, k, None) is not None}
    batchers = {k: [positive_int(k, v, "8") if k == "max_batch" else v
                    for v in getattr(args, k)]
                for k in ("max_batch", "max_delay_ms") if getattr(args, k) is not None}
    shown = {**default_batcher_axes(args.device, args.p99_ms), **batchers, **axes}
    for batch, delay in itertools.product(shown["max_batch"], shown["max_delay_ms"]):
        Batcher(batch, delay)  # a bad value: one line before anything runs
    Arrivals(args.arrival, None if args.arrival == "trace" else 1.0,
             1.0 if args.duration_s is None else args.duration_s, args.burstiness, args.trace)
    print(f"tuning {args.user_model or args.model} online for p{args.percentile:g} <= "
          f"{args.p99_ms:g} ms on {args.device} ({args.arrival} arrivals): "
          f"{', '.join(f'{k} {v}' for k, v in shown.items())}", file=sys.stderr)
    outcome = options.stoppable(args, lambda: tune_online(
        args.p99_ms, task, model=args.model, size=given["size"][0], axes=axes,
        batcher_axes=batchers, percentile=args.percentile, arrival=args.arrival,
        burstiness=args.burstiness, trace=args.trace, duration_s=args.duration_s,
        device=args.device, budget_s=args.budget_s, out=args.out,
        on_trial=options.show_record), "stopped" + options.kept(args.out))
    return options.answer(outcome, args.json, {
        "target_ms": args.p99_ms, "percentile": args.percentile,
        "goodput_rps": outcome.goodput_rps, "p99_ms": outcome.remeasured.get("p99_ms"),
        "winner": outcome.winner, "remeasured": outcome.remeasured,
        "closed_loop_choice": outcome.closed_choice,
        "goodput_per_config": [{**s["config"], "capacity_rps": s["capacity_rps"],
                                "goodput_rps": s["found"].goodput_rps}
                               for s in outcome.searches]})


def _tune_offline(args, task) -> int:
    from ..workloads.serving.tune import default_axes, tune_serve

    for name in ("max_batch", "max_delay_ms"):
        if getattr(args, name) is not None:
            raise ValueError(f"--{name.replace('_', '-')} sets the online batcher; --offline "
                             "times request batches back to back: give --batch-size")
    if args.percentile != 99:
        raise ValueError(f"--percentile {args.percentile:g}: --offline judges the p99 of a "
                         "request batch; drop --offline to tune another percentile online")
    given = config_axes(args, task, args.batch_size, args.precision)
    axes = {k: v for k, v in given.items() if k != "model" and getattr(args, k, None) is not None}
    tried = {**default_axes(args.device), **axes}
    print(f"tuning {args.user_model or args.model} for p99 <= {args.p99_ms:g} ms on "
          f"{args.device}: {', '.join(f'{k} {v}' for k, v in tried.items())}", file=sys.stderr)
    outcome = options.stoppable(args, lambda: tune_serve(
        args.p99_ms, task, model=args.model, size=given["size"][0], axes=axes,
        device=args.device, budget_s=args.budget_s, out=args.out, on_trial=options.show_record,
        **_requests(args)), "stopped" + options.kept(args.out))
    return options.answer(outcome, args.json, {
        "p99_ms": args.p99_ms, "winner": outcome.winner, "remeasured": outcome.remeasured,
        "frontier": outcome.frontier})


def sweep_generate_command(args) -> int:
    from ..workloads.models.task import CUSTOM
    from ..workloads.serving import spec as serving
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
