"""The serving lab on the command line: `sweep serve`, `sweep load`, `sweep decode`, `sweep
concurrency`, `sweep generate` and `tune serve`; `--user-model` is the training commands' file,
its output (batch, ...); for `sweep generate` a file defining make_generator(). The lab is
imported when one of its commands runs, never to build the parser."""

import functools
import sys

from ..core.knobs import levers, on_device
from ..core.sweep import grid
from . import options
from .options import field_value
from .train import user_task

MODEL = "model model_size user_model"
CONFIG = "batch_size+ precision+ LEVERS+"  # LEVERS: ServeSpec's
ARRIVAL = "arrival burstiness trace duration_s"


def serving_specs(*names: str):
    """A command's spec classes by name (their fields are its options; a later one's field
    wins), imported only when the command is the one given."""
    def specs() -> tuple:
        from ..workloads.serving import arrivals, decode, generate, load, spec

        found = (spec.ServeSpec, spec.ServeRun, arrivals.Arrivals, load.Batcher,
                 decode.DecodeSpec, generate.GenerateSpec)
        return tuple(next(c for c in found if c.__name__ == name) for name in names)
    return specs


def add_parsers(commands) -> None:
    commands.add("serve", group="sweep", run=sweep_serve_command,
                 spec=serving_specs("ServeSpec", "ServeRun"),
                 help="inference latency (p50/p90/p99) and samples/s over batch size, "
                      "precision, compile, CUDA graphs and layout",
                 options=f"{MODEL} {CONFIG} requests SWEEP",
                 batch_size={"default": [1, 8, 64], "help": "request batch sizes (default 1 8 64)"})
    commands.add("load", group="sweep", run=sweep_load_command,
                 spec=serving_specs("ServeSpec", "ServeRun", "Arrivals", "Batcher"),
                 help="requests arriving on their own clock at a dynamic batcher (open loop): "
                      "latency from each request's arrival (p50/p90/p99), queue and service "
                      "apart, whether the server kept up, over offered rates",
                 options=f"{MODEL} rate+ load+ {ARRIVAL} max_batch+ max_delay_ms+ "
                         "request_size precision+ LEVERS+ SWEEP",
                 rate="offered request rates, requests/s (or --load)")
    commands.add("decode", group="sweep", run=sweep_decode_command,
                 spec=serving_specs("ServeSpec", "DecodeSpec"),
                 help="token generation from a static KV cache: time per token, tokens/s and "
                      "the memory-bandwidth bound, over batch size",
                 options="model_size+ batch_size+ precision+ prompt_tokens new_tokens SWEEP",
                 batch_size={"default": [1, 4, 16],
                             "help": "sequences decoded together (default 1 4 16)"})
    commands.add("concurrency", group="sweep", run=sweep_concurrency_command,
                 spec=serving_specs("ServeSpec", "ServeRun"),
                 help="N request streams sharing the device: samples/s and p99 per N, and "
                      "whether MPS is active (read only)",
                 options=f"{MODEL} streams+ mode batch_size precision requests SWEEP",
                 streams={"default": [1, 2, 4], "help": "concurrent streams (default 1 2 4)"})
    commands.add("serve", group="tune", run=tune_serve_command,
                 spec=serving_specs("ServeSpec", "ServeRun", "Arrivals", "Batcher"),
                 help="the config and dynamic batcher with the most goodput: the highest "
                      "request rate whose p99 (from each request's arrival) meets --p99-ms, "
                      "offered again on its own; --offline: the most samples/s whose batch "
                      "p99 meets it (closed loop); prints the code to paste",
                 options=f"p99_ms percentile offline {MODEL} {CONFIG} max_batch+ "
                         f"max_delay_ms+ {ARRIVAL} requests RUN json",
                 p99_ms={"required": True,
                         "help": "the latency target, milliseconds: of a request from its "
                                 "arrival (online), of a request batch (--offline)"},
                 offline={"action": "store_true",
                          "help": "the closed-loop question: request batches back to back"},
                 batch_size="request batch sizes (--offline)",
                 max_batch="the batcher's largest batches (online; default 1 4 16 64, and "
                           "256 on a GPU)",
                 max_delay_ms="the batcher's delays, ms (online; default 0 and a tenth of "
                              "the target)",
                 duration_s="seconds of arrivals per rate tried (online; default 1 on a CPU, "
                            "2.5 on a GPU; the winner twice as long)",
                 out={"required": False}, json="print the outcome as JSON too")
    commands.add("generate", group="sweep", run=sweep_generate_command,
                 spec=serving_specs("ServeSpec", "Arrivals", "GenerateSpec"),
                 help="generation under load: requests with drawn prompt and output lengths "
                      "arriving at --rate, served by static or continuous batching; TTFT, TPOT "
                      "(p50 and p99) and tokens/s per point",
                 options="rate+ arrival burstiness trace prompt_tokens output_tokens "
                         "scheduler+ max_batch+ duration_s model_size user_model precision "
                         "device threads out no_resume telemetry",
                 rate="offered request rates, requests/s (default: 100 on a CPU, 20 on a GPU)",
                 scheduler={"default": ["static", "continuous"],
                            "help": "static (a batch runs until its longest request ends) "
                                    "and/or continuous (a finished slot is refilled at the next "
                                    "step) (default both)"},
                 model_size="transformer preset size (default: small on a CPU, gpt2_small on "
                            "a GPU)",
                 user_model="your generator: a .py file defining make_generator() (the "
                            "protocol: a800lab/workloads/serving/kv.py)")


def config_axes(args, task, batch_size=None) -> dict:
    """The grid of serving configs given (lists; None: the options' or the defaults); every
    combination is checked (ValueError) before anything runs."""
    from ..workloads.models.presets import preset
    from ..workloads.serving import spec as serving
    spec = serving.ServeSpec
    model = field_value(args, spec, "model")
    axes = {"model": [task.name if task else model],
            "size": [serving.serving_size(model, args.model_size, args.device, task)],
            "batch_size": batch_size or field_value(args, spec, "batch_size", True),
            **{name: field_value(args, spec, name, True) for name in ("precision", *levers(spec))}}
    if task is None:
        preset(axes["model"][0], axes["size"][0])
    for point in grid(axes):
        reason = serving.serving_unavailable(serving.ServeSpec(**point), args.device)
        if reason:
            raise ValueError(reason)
    return axes


def sweep_serve_command(args) -> int:
    from ..workloads.serving import spec as serving
    from ..workloads.serving.point import serve_point

    task = user_task(args.user_model, args.device, serving.check_serving_task)
    axes = config_axes(args, task)
    point = functools.partial(serve_point, task=task, device=args.device,
                              budget_s=args.budget_s,
                              requests=field_value(args, serving.ServeRun, "requests"))
    options.cpu_notes([p for p in axes["precision"] if p != "tf32"], args.device)
    return options.run_sweep_command(point, axes, args, workload="serve")


def sweep_decode_command(args) -> int:
    from ..core.precision import check_supported
    from ..workloads.models.presets import preset
    from ..workloads.serving.decode import DecodeSpec, decode_point
    from ..workloads.serving.spec import ServeSpec

    axes = {"size": field_value(args, DecodeSpec, "size", True),
            **{name: field_value(args, ServeSpec, name, True) for name in ("batch_size",
                                                                     "precision")}}
    for size in axes["size"]:
        preset("transformer", size)
    for p in axes["precision"]:
        check_supported(p, args.device)
    fixed = {k: v for k in ("prompt_tokens", "new_tokens") if (v := getattr(args, k)) is not None}
    point = functools.partial(decode_point, device=args.device, budget_s=args.budget_s)
    return options.run_sweep_command(point, axes, args, workload="decode", fixed=fixed)


def sweep_concurrency_command(args) -> int:
    from ..workloads.serving import spec as serving
    from ..workloads.serving.concurrency import concurrency_point

    task = user_task(args.user_model, args.device, serving.check_serving_task)
    axes = config_axes(args, task)
    for key in levers(serving.ServeSpec):
        axes.pop(key)
    axes["streams"] = list(dict.fromkeys(args.streams))
    point = functools.partial(concurrency_point, task=task, device=args.device,
                              requests=field_value(args, serving.ServeRun, "requests"))
    return options.run_sweep_command(point, axes, args, workload="concurrency",
                                     fixed={"mode": field_value(args, serving.ServeRun, "mode")})


def sweep_load_command(args) -> int:
    from ..workloads.serving import spec as serving
    from ..workloads.serving.arrivals import Arrivals
    from ..workloads.serving.load import Batcher, default_duration_s, load_point, schedule_for

    task = user_task(args.user_model, args.device, serving.check_serving_task)
    if args.rate is not None and args.load is not None:
        raise ValueError("give --rate (requests/s) or --load (fractions of the capacity), "
                         "not both")
    arrival, burstiness = (field_value(args, Arrivals, k) for k in ("arrival", "burstiness"))
    if args.rate is None and args.load is None and arrival != "trace":
        raise ValueError("give the offered rates: --rate R [R ...] in requests/s, or --load "
                         "F [F ...] as fractions of the closed-loop capacity (e.g. 0.5 0.9)")
    batches = field_value(args, Batcher, "max_batch", True)
    size = field_value(args, Batcher, "request_size")
    axes = config_axes(args, task, [b * size for b in batches])
    axes["max_batch"] = batches
    del axes["batch_size"]
    axes["max_delay_ms"] = field_value(args, Batcher, "max_delay_ms", True)
    fixed = {"arrival": arrival, "duration_s": args.duration_s}
    if args.duration_s is None and arrival != "trace":
        fixed["duration_s"] = default_duration_s(args.device)
    fixed.update({k: v for k, v in (("burstiness", burstiness), ("trace", args.trace),
                                    ("request_size", args.request_size))
                  if v is not None and not (k == "burstiness" and arrival != "gamma")})
    if args.load is not None:
        axes["load"] = list(dict.fromkeys(args.load))
    elif args.rate is not None:
        axes["rate_rps"] = list(dict.fromkeys(args.rate))
    for rate in axes.get("rate_rps", [None]):  # a schedule too short for a p99: refused now
        arrivals = Arrivals(arrival, rate if rate is not None or arrival == "trace"
                            else 1.0, fixed["duration_s"], burstiness, args.trace)
        if rate is not None or arrival == "trace":
            schedule_for(arrivals)
    point = functools.partial(load_point, task=task, device=args.device,
                              budget_s=args.budget_s)
    options.cpu_notes([p for p in axes["precision"] if p != "tf32"], args.device)
    return options.run_sweep_command(point, axes, args, workload="load",
                                     fixed={k: v for k, v in fixed.items() if v is not None})


def tune_serve_command(args) -> int:
    from ..workloads.serving import spec as serving
    from ..workloads.serving.arrivals import Arrivals

    for spec_class, names in ((serving.ServeSpec, "model"), (Arrivals, "arrival burstiness"),
                              (serving.ServeRun, "percentile requests")):
        for name in names.split():  # the defaults, said and passed on
            setattr(args, name, field_value(args, spec_class, name))
    task = user_task(args.user_model, args.device, serving.check_serving_task)
    if args.offline:
        return _tune_offline(args, task)
    if args.batch_size is not None:
        raise ValueError("--batch-size is the closed loop's axis (--offline); online the "
                         "batcher forms the batches: give --max-batch")
    from ..workloads.serving.online import default_batcher_axes, tune_online

    given = config_axes(args, task, [1])
    axes = {k: v for k, v in given.items()
            if k not in ("model", "batch_size") and getattr(args, k, None) is not None}
    batchers = {k: getattr(args, k) for k in ("max_batch", "max_delay_ms")
                if getattr(args, k) is not None}
    shown = {**default_batcher_axes(args.device, args.p99_ms), **batchers, **axes}
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
    given = config_axes(args, task)
    axes = {k: v for k, v in given.items() if k != "model" and getattr(args, k, None) is not None}
    tried = {**default_axes(args.device), **axes}
    print(f"tuning {args.user_model or args.model} for p99 <= {args.p99_ms:g} ms on "
          f"{args.device}: {', '.join(f'{k} {v}' for k, v in tried.items())}", file=sys.stderr)
    outcome = options.stoppable(args, lambda: tune_serve(
        args.p99_ms, task, model=args.model, size=given["size"][0], axes=axes,
        device=args.device, budget_s=args.budget_s, out=args.out, on_trial=options.show_record,
        requests=args.requests), "stopped" + options.kept(args.out))
    return options.answer(outcome, args.json, {
        "p99_ms": args.p99_ms, "winner": outcome.winner, "remeasured": outcome.remeasured,
        "frontier": outcome.frontier})


def sweep_generate_command(args) -> int:
    from ..core.precision import check_supported
    from ..workloads.models.task import CUSTOM
    from ..workloads.serving.arrivals import Arrivals
    from ..workloads.serving.generate import (
        GenerateSpec,
        generate_point,
        generator_context,
        requests_schedule,
    )
    from ..workloads.serving.spec import ServeSpec

    defaults = on_device(GenerateSpec, args.device)
    make = _user_generator(args.user_model)
    size = CUSTOM if make else args.model_size or defaults.size
    arrival, burstiness = (field_value(args, Arrivals, k) for k in ("arrival", "burstiness"))
    axes = {"rate_rps": [None] if arrival == "trace" and args.rate is None else
            list(dict.fromkeys(args.rate or [defaults.rate_rps])),
            "scheduler": list(dict.fromkeys(args.scheduler)),
            "max_batch": field_value(args, GenerateSpec, "max_batch", True)}
    fixed = {"size": size, "arrival": arrival, "burstiness": burstiness,
             "trace": args.trace, "duration_s": args.duration_s,
             "precision": field_value(args, ServeSpec, "precision"),
             **{k: field_value(args, GenerateSpec, k) for k in ("prompt_tokens", "output_tokens")}}
    check_supported(fixed["precision"], args.device)
    context = generator_context(size, make, args.device)  # user faults: one line, now
    for point in grid(axes):  # every bad value refused before anything runs
        GenerateSpec(point["scheduler"], point["max_batch"], fixed["prompt_tokens"],
                     fixed["output_tokens"]).fit(*context)
        requests_schedule(arrival, point["rate_rps"], args.duration_s, burstiness,
                          args.trace, 0, args.device)
    point = functools.partial(generate_point, generator=make, device=args.device)
    options.cpu_notes([fixed["precision"]], args.device)
    return options.run_sweep_command(point, axes, args, workload="generate", fixed=fixed)


def _user_generator(where: str | None):
    """make_generator of a --user-model file or module, or None."""
    from ..workloads.models.user_model import load_user_module

    if where is None:
        return None
    make = getattr(load_user_module(where, f"--user-model {where}"), "make_generator", None)
    if not callable(make):
        raise ValueError(f"--user-model {where} defines no make_generator(): give a file whose "
                         "make_generator() returns a generator (the protocol: "
                         "a800lab/workloads/serving/kv.py)")
    return make
