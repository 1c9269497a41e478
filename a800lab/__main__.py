"""Command line: `python -m a800lab doctor|peak|sweep|tune ...` (also installed as `a800lab`).

    python -m a800lab doctor [--json]                  environment and topology report
    python -m a800lab peak [--json]                    achievable matmul rate and copy bandwidth
    python -m a800lab sweep matmul --size 1024 4096 --precision fp32 bf16 --out runs.jsonl
    python -m a800lab sweep tiles --size 4096 --precision bf16 --block-m 64 128 256 \
        --block-n 64 128 256 --out tiles.jsonl        # the tile kernel (CPU: its stand-in)
    python -m a800lab tune --size 4096 --precision bf16 [--out trials.jsonl]
                                                       # fastest tile, stored and reused
    python -m a800lab sweep train --model transformer --batch-size 8 32 128 \
        --precision fp32 bf16 --accum-steps 1 4 --out train.jsonl   # training steps
    python -m a800lab max-batch --model transformer --precision bf16 --target-batch 1024
                                                       # largest micro-batch, verified
    python -m a800lab diff a800/runs.jsonl h200/runs.jsonl [--json]
                                                       # what differs between two machines
    python -m a800lab health [--stress] [--json]       # ECC, remapped rows, NCCL settings;
                                                       # --stress flags slow cards
    python -m a800lab comm collectives --op all_reduce all_gather --size 1K 1M 64M \
        --out comm.jsonl                               # algbw/busbw on 2 gloo ranks or all GPUs
    python -m a800lab comm ddp --hook allreduce fp16_compress powersgd --out ddp.jsonl
    torchrun --nproc-per-node 8 -m a800lab comm collectives --size 1M 1G --out comm.jsonl
                                                       # every process a rank, any node count
    python -m a800lab report [--quick | --full] [--out report/]
                                                       # the guide's claims and this box's
                                                       # health: report.html + report.json
    python -m a800lab report --compare a800-box/ h200-box/    # two reports side by side

A sweep appends one JSON line per point as it is measured; run the same command again to resume
(points already in the file for this environment are skipped). Ctrl-C stops after saving what was
measured. `tune` prints the winner (and, for the Triton kernel, the `triton.Config(...)` line to
paste into your own @triton.autotune) and says when its lead is inside the measurement noise.
Each point prints one line; a `!` marks a noisy point and says why (timing spread, CPU
oversubscription). Open the file in a notebook with `a800lab.load_results("runs.jsonl")`.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import sys

from .core.cancel import Cancelled

TILE_OPTIONS = ("block_m", "block_n", "block_k", "group_m", "num_warps", "num_stages")
TRAIN_OPTIONS = ("model", "model_size", "batch_size", "accum_steps", "optimizer",
                 "checkpointing", "train_steps", "lr")


def _shape_options(parser: argparse.ArgumentParser, *, many: bool = True) -> None:
    nargs = "+" if many else None
    parser.add_argument("--size", type=int, nargs=nargs, help="square problems m=n=k")
    for dim in ("m", "n", "k"):
        parser.add_argument(f"--{dim}", type=int, nargs=nargs)


def _run_options(parser: argparse.ArgumentParser, *, out_required: bool = True) -> None:
    parser.add_argument("--device", default="auto", help="auto, cpu or cuda[:N]")
    parser.add_argument("--budget-s", type=float, default=0.3, help="timing budget per point")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch CPU threads during the run (default on CPU: all usable "
                             "cores but one; on a GPU: torch's own)")
    parser.add_argument("--out", required=out_required, help="JSON Lines file to append to")


def _tile_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--backend", default="auto",
                        help="auto (triton on a GPU, cpu_blocked on CPU), triton, cpu_blocked "
                             "or torch (cuBLAS, no tile fields)")
    for name in TILE_OPTIONS:
        parser.add_argument(f"--{name.replace('_', '-')}", dest=name, type=int, nargs="+")


def _train_options(parser: argparse.ArgumentParser, *, many: bool = True) -> None:
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


def build_parser() -> argparse.ArgumentParser:
    """The whole command line's parser (tests parse the deploy recipes' commands with it)."""
    parser = argparse.ArgumentParser(prog="a800lab", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    doctor = sub.add_parser("doctor", help="environment and topology report with advice")
    doctor.add_argument("--json", action="store_true", help="print JSON instead of a table")

    peak = sub.add_parser("peak", help="measure achievable matmul TFLOP/s and copy bandwidth")
    peak.add_argument("--json", action="store_true")
    peak.add_argument("--device", default="auto", help="auto, cpu or cuda[:N]")
    peak.add_argument("--precision", nargs="+", default=None, help="default: the device's set")
    peak.add_argument("--no-store", action="store_true",
                      help="do not record the peaks (by default tile points report %% of them)")

    sweep = sub.add_parser("sweep", help="run a sweep headless and write JSON Lines")
    sweep.add_argument("workload", choices=["matmul", "tiles", "train"],
                       help="matmul: torch.matmul over shapes and precisions; tiles: the tile "
                            "kernel over tile configs; train: training steps over batch, "
                            "accumulation, precision, optimizer and checkpointing")
    _shape_options(sweep)
    sweep.add_argument("--precision", nargs="+", default=["fp32"])
    _tile_options(sweep)
    _run_options(sweep)
    sweep.add_argument("--no-resume", action="store_true", help="re-measure points in --out")
    sweep.add_argument("--telemetry", action="store_true", help="sample NVML during each point")
    _train_options(sweep)
    sweep.add_argument("--batch-size", type=int, nargs="+",
                       help="train: micro-batch sizes (default 32)")
    sweep.add_argument("--train-steps", type=int, default=None,
                       help="train: optimizer steps per point before timing, for its loss curve "
                            "(default 20 on a CPU, 50 on a GPU)")

    max_batch = sub.add_parser("max-batch", help="the largest micro-batch of a training step "
                                                 "that fits (grow, bisect, verify)")
    _train_options(max_batch, many=False)
    max_batch.add_argument("--precision", default="fp32")
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

    tune = sub.add_parser("tune", help="find the fastest tile config for one shape (successive "
                                       "halving; the winner is stored and reused)")
    _shape_options(tune, many=False)
    tune.add_argument("--precision", default="fp32")
    _tile_options(tune)
    _run_options(tune, out_required=False)
    tune.add_argument("--store", default=None,
                      help="tuned-config file (default $A800LAB_TUNED or ~/.cache/a800lab/"
                           "tuned.json)")
    tune.add_argument("--force", action="store_true", help="tune even when a result is stored")

    diff = sub.add_parser("diff", help="compare two results files or two doctor reports: what "
                                        "differs, what it means, throughputs side by side")
    diff.add_argument("a", help="results file (JSON Lines) or doctor report (doctor --json)")
    diff.add_argument("b", help="the same from the other machine")
    diff.add_argument("--json", action="store_true", help="print JSON instead of text")

    health = sub.add_parser("health", help="GPU memory health (ECC, remapped rows, retired "
                                           "pages) and NCCL settings; --stress flags slow cards")
    health.add_argument("--json", action="store_true", help="print JSON instead of text")
    health.add_argument("--stress", action="store_true",
                        help="also time a matmul and a copy on each card and flag cards below "
                             "their siblings or datasheet")
    health.add_argument("--device", nargs="+", default=None,
                        help="cards to stress (default: every visible GPU, else the CPU)")
    health.add_argument("--threshold", type=float, default=0.1,
                        help="flag a card this fraction below its siblings' median (0.1)")
    health.add_argument("--datasheet-threshold", type=float, default=0.4,
                        help="flag a card this fraction below its datasheet (0.4)")
    health.add_argument("--budget-s", type=float, default=0.3, help="timing budget per card")

    _comm_options(sub.add_parser(
        "comm", help="collectives over message sizes (algbw, busbw) or a DDP step (comm hooks, "
                     "no_sync, buckets) on N ranks: gloo on CPUs, NCCL on GPUs; under torchrun "
                     "every process is a rank"))
    from .report_cli import add_parser as add_report_parser

    add_report_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "doctor":
            from .core.doctor import main as doctor_main

            return doctor_main(["--json"] if args.json else [])
        if args.command == "peak":
            return _peak(args)
        if args.command == "diff":
            return _diff(args)
        if args.command == "health":
            return _health(args)
        if args.command == "max-batch":
            return _max_batch(args)
        if args.command == "report":
            from . import report_cli

            report_cli.check(args, parser)
            return report_cli.main(args, show_point=_show)
        _check_run_options(args)
        if args.command == "comm":
            return _comm(args)
        if args.command == "tune":
            return _tune(args, parser)
        if args.workload == "train":
            return _sweep_train(args, parser)
        given = [f"--{n.replace('_', '-')}" for n in TRAIN_OPTIONS
                 if getattr(args, n, None) is not None]
        if given:
            parser.error(f"{given} apply to 'sweep train'")
        return _sweep(args, parser)
    except ValueError as exc:  # bad input: say what and exit like argparse does
        print(f"a800lab: error: {exc}", file=sys.stderr)
        return 2


def _peak(args) -> int:
    from .core.environment import environment
    from .core.peak import measure_peak
    from .core.peak_store import record_peaks

    report = measure_peak(device=args.device, precisions=args.precision,
                          on_progress=lambda done, total, what: print(
                              f"[{done}/{total}] {what}", file=sys.stderr))
    print(json.dumps(report.to_dict(), indent=2) if args.json else report.format())
    if not args.no_store:
        path = record_peaks(report, environment(report.device))
        print(f"peaks recorded in {path}: tile points on this device now report % of them",
              file=sys.stderr)
    return 0


def _diff(args) -> int:
    from .core.envdiff import diff_files, format_diff

    result = diff_files(args.a, args.b)
    print(json.dumps(result.to_dict(), indent=2) if args.json else format_diff(result))
    return 0


def _health(args) -> int:
    """Memory health, NCCL settings and (--stress) the stress flags; exit 1 when a GPU should
    be drained or a card is flagged."""
    from .core.nccl_env import nccl_settings
    from .workloads.health import format_health, health_report
    from .workloads.stress import check_thresholds, stress_report

    if args.stress:
        check_thresholds(args.threshold, args.datasheet_threshold)
        if not (math.isfinite(args.budget_s) and args.budget_s > 0):
            raise ValueError(f"--budget-s {args.budget_s} must be a number of seconds > 0")
    report = health_report()
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
    if args.json:
        print(json.dumps({"health": report, "nccl": settings,
                          "stress": stress.to_dict() if stress else None}, indent=2))
    else:
        print(format_health(report))
        print("\nNCCL environment (read, never set here; NCCL_DEBUG=INFO shows the transport "
              "each connection uses):")
        for v in settings:
            print(f"  {v['name']}={v['value'] if v['value'] is not None else '(unset)'}: "
                  f"{v['what']}")
        if stress:
            print("\nStress run:\n" + stress.format())
    drain = any(g["verdict"] == "drain" for g in report["gpus"])
    return 1 if drain or (stress and stress.flags) else 0


def _check_run_options(args) -> None:
    """Refuse bad run options before anything runs."""
    from .core.results import check_writable

    if not (math.isfinite(args.budget_s) and args.budget_s > 0):
        raise ValueError(f"--budget-s {args.budget_s} must be a finite number of seconds > 0, "
                         "e.g. 0.3")
    if args.threads is not None and args.threads < 1:
        raise ValueError(f"--threads {args.threads} must be at least 1")
    if args.out is not None:
        check_writable(args.out)


def _threads_for(args, device: str) -> int | None:
    """--threads, else on CPU all usable cores but one (said on stderr), else torch's own."""
    if args.threads is not None or device != "cpu":
        return args.threads
    from .core.noise import default_cpu_threads

    threads = default_cpu_threads()
    print(f"CPU: {threads} torch thread(s), a core left for the rest of the machine "
          "(--threads N to change)", file=sys.stderr)
    return threads


def _shape_axes(args, parser) -> dict:
    """{"size": [...]} or {"m": [...], "n": [...], "k": [...]} from the shape options."""
    if args.size and (args.m or args.n or args.k):
        parser.error("give either --size (square) or --m/--n/--k, not both")
    if args.size:
        return {"size": args.size}
    if args.m and args.n and args.k:
        return {"m": args.m, "n": args.n, "k": args.k}
    parser.error("give --size, or all of --m, --n and --k")


def _square(run):
    """A point function of (m, n, k, ...) that also takes size=s for m=n=k=s."""
    def point(size=None, m=None, n=None, k=None, **rest):
        return run(m or size, n or size, k or size, **rest)
    return point


def _tile_axes(args, backend: str, precision: str) -> dict:
    """The tile options given, each value checked on its own (a typo exits before running)."""
    from .workloads.matmul import MatmulSpec

    axes = {name: list(dict.fromkeys(getattr(args, name))) for name in TILE_OPTIONS
            if getattr(args, name)}
    for name, values in axes.items():
        for value in values:
            MatmulSpec(64, 64, 64, precision, backend, **{name: value})
    return axes


def _sweep(args, parser) -> int:
    from .core.backends import resolve_device
    from .core.precision import check_supported, parse_precision
    from .core.sweep import grid
    from .workloads.matmul import MatmulSpec, cpu_slowdown_note, matmul_point
    from .workloads.tiled_matmul import default_backend, tiled_matmul_point

    device = resolve_device(args.device)
    # "fp32" and "float32" are one precision: canonical names, each measured once
    precisions = list(dict.fromkeys(parse_precision(p).name for p in args.precision))
    for name in precisions:
        check_supported(name, device)
    axes = {**_shape_axes(args, parser), "precision": precisions}
    if args.workload == "tiles":
        backend = default_backend(device) if args.backend == "auto" else args.backend
        fixed = {"backend": backend}
        for name in precisions:
            axes.update(_tile_axes(args, backend, name))
        point = _square(functools.partial(tiled_matmul_point, device=device,
                                          budget_s=args.budget_s))
    else:
        given = [f"--{n.replace('_', '-')}" for n in TILE_OPTIONS if getattr(args, n)]
        if given or args.backend != "auto":
            parser.error(f"{given or ['--backend']} apply to 'sweep tiles'; 'sweep matmul' "
                         "times torch.matmul, whose tiles cuBLAS chooses")
        fixed = {}
        point = _square(functools.partial(matmul_point, device=device, budget_s=args.budget_s))
    for p in grid(axes):  # reject a bad shape before anything runs
        size = p.get("size")
        MatmulSpec(p.get("m", size), p.get("n", size), p.get("k", size), p["precision"])
    if device == "cpu":
        for name in precisions:
            note = cpu_slowdown_note(name)
            if note:
                print(f"note: {note}", file=sys.stderr)
    return _run_sweep(point, axes, args, device, workload=args.workload, fixed=fixed)


def _tune(args, parser) -> int:
    from .core.backends import resolve_device
    from .core.precision import check_supported, parse_precision
    from .core.sweep import thread_count
    from .workloads.matmul import MatmulSpec
    from .workloads.tile_config import export_config
    from .workloads.tile_tuning import DEFAULT_AXES, config_grid, default_store_path, tune
    from .workloads.tiled_matmul import default_backend

    device = resolve_device(args.device)
    precision = parse_precision(args.precision).name
    check_supported(precision, device)
    shape = _shape_axes(args, parser)
    m, n, k = (shape["size"],) * 3 if "size" in shape else (shape["m"], shape["n"], shape["k"])
    backend = default_backend(device) if args.backend == "auto" else args.backend
    if backend not in DEFAULT_AXES:
        raise ValueError(f"--backend {backend}: cuBLAS picks its own tiles; tune 'triton' on a "
                         "GPU or 'cpu_blocked' on the CPU")
    grid = config_grid({**DEFAULT_AXES[backend], **_tile_axes(args, backend, precision)},
                       backend)
    store = args.store or default_store_path()
    print(f"tuning {m}x{n}x{k} {precision} on {device} ({backend}): {len(grid)} configs",
          file=sys.stderr)
    try:
        with thread_count(_threads_for(args, device)):
            outcome = tune(m, n, k, precision, backend, grid, device=device,
                           budget_s=args.budget_s, store=store, out=args.out, force=args.force,
                           on_trial=_show)
    except (KeyboardInterrupt, Cancelled):
        print("stopped; nothing stored" + (f"; the trials are in {args.out}" if args.out
                                            else ""), file=sys.stderr)
        return 130
    entry = outcome.entry
    if outcome.reused:
        print(f"reused the result tuned at {entry['tuned_at']} from {store} (--force tunes "
              "again)", file=sys.stderr)
    elif not entry:
        print(f"no result: {outcome.search.verdict}", file=sys.stderr)
        return 1
    else:
        print(f"{outcome.search.verdict}; {len(outcome.records)} trials in "
              f"{outcome.search.wall_s:.1f} s; stored in {store}", file=sys.stderr)
    print(json.dumps({"best": entry["best"], "tflops": entry.get("tflops"),
                      "inside_noise": entry.get("inside_noise"), "verdict": entry["verdict"]},
                     indent=2))
    if backend == "triton":
        print(export_config(MatmulSpec(m, n, k, precision, backend, **entry["best"]))[1])
    return 0


def _train_values(args, device: str, *, many: bool = True) -> dict:
    """TrainSpec field -> the value(s) given, defaults filled in; every combination is checked
    (ValueError) before anything runs."""
    from .core.sweep import grid
    from .workloads.training import TrainSpec, canonical_precision, check_precision
    from .workloads.training_models import default_size, preset

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


def _sweep_train(args, parser) -> int:
    from .core.backends import resolve_device
    from .workloads.matmul import cpu_slowdown_note
    from .workloads.training import train_point

    given = [f"--{n.replace('_', '-')}" for n in ("size", "m", "n", "k", *TILE_OPTIONS)
             if getattr(args, n)]
    if given or args.backend != "auto":
        parser.error(f"{given or ['--backend']} apply to 'sweep matmul' and 'sweep tiles'; "
                     "'sweep train' takes --model, --model-size, --batch-size, --accum-steps, "
                     "--precision, --optimizer, --checkpointing")
    device = resolve_device(args.device)
    axes = _train_values(args, device)
    train_steps = args.train_steps if args.train_steps is not None else \
        (20 if device == "cpu" else 50)
    if train_steps < 1:
        raise ValueError(f"--train-steps {train_steps} must be at least 1")
    point = functools.partial(train_point, device=device, budget_s=args.budget_s,
                              train_steps=train_steps, lr=args.lr)
    if device == "cpu":
        for name in axes["precision"]:
            note = cpu_slowdown_note("bf16" if name == "bf16_pure" else name)
            if note:
                print(f"note: {note}", file=sys.stderr)
    return _run_sweep(point, axes, args, device, workload="train")


def _max_batch(args) -> int:
    from .core.backends import resolve_device
    from .core.results import check_writable
    from .core.sweep import thread_count
    from .workloads.max_batch import DEFAULT_MARGIN, find_max_batch_for
    from .workloads.training import TrainSpec

    device = resolve_device(args.device)
    values = _train_values(args, device, many=False)
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
        with thread_count(_threads_for(args, device)):
            result = find_max_batch_for(spec, device=device, limit_bytes=limit, margin=margin,
                                        target_batch=args.target_batch, on_trial=_show_trial)
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


COMM_DDP_OPTIONS = ("hook", "accum_steps", "sync", "bucket_cap_mb", "powersgd_rank",
                    "start_iter", "train_steps")
_SIZE_UNITS = {"": 1, "K": 2**10, "KIB": 2**10, "M": 2**20, "MIB": 2**20, "G": 2**30,
               "GIB": 2**30}


def _comm_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("bench", choices=["collectives", "ddp"],
                        help="collectives: all_reduce, all_gather, reduce_scatter, broadcast, "
                             "hierarchical_all_reduce over sizes; ddp: a DDP training step")
    parser.add_argument("--op", nargs="+", default=None,
                        help="collectives (default all_reduce)")
    parser.add_argument("--size", nargs="+", default=None,
                        help="message sizes in bytes, or with K/M/G (binary: 1K = 1024); "
                             "default 1K 16K 256K 4M on CPUs, 1K to 1G by 4x on GPUs")
    parser.add_argument("--dtype", default="fp32", help="fp32, fp16 or bf16")
    parser.add_argument("--ranks-per-node", type=int, default=None,
                        help="hierarchical_all_reduce: ranks per node (default: under torchrun "
                             "LOCAL_WORLD_SIZE, else all ranks on one node)")
    parser.add_argument("--hook", nargs="+", default=None,
                        help="ddp: allreduce, fp16_compress, bf16_compress, powersgd")
    parser.add_argument("--accum-steps", type=int, nargs="+", default=None,
                        help="ddp: micro-batches per optimizer step")
    parser.add_argument("--sync", nargs="+", default=None,
                        help="ddp: no_sync (once per step) or every_micro_batch")
    parser.add_argument("--bucket-cap-mb", type=float, nargs="+", default=None)
    parser.add_argument("--powersgd-rank", type=int, nargs="+", default=None)
    parser.add_argument("--start-iter", type=int, nargs="+", default=None,
                        help="ddp: PowerSGD's plain all-reduce steps before compressing (>= 2)")
    parser.add_argument("--train-steps", type=int, default=None,
                        help="ddp: optimizer steps before timing (default 20 on a CPU, 50 on "
                             "GPUs)")
    parser.add_argument("--nproc", type=int, default=None,
                        help="ranks to start here (default 2 on a CPU, one per GPU); under "
                             "torchrun, torchrun decides")
    parser.add_argument("--timeout-s", type=float, default=120.0,
                        help="a point taking longer ends the run: its group counts as hung")
    _run_options(parser)
    parser.add_argument("--no-resume", action="store_true", help="re-measure points in --out")


def _size_bytes(text: str) -> int:
    """"4096", "4K", "64MiB", "1G" -> bytes (binary units)."""
    value = text.strip().upper()
    digits = value.rstrip("KMGIB")
    unit = value[len(digits):]
    if not digits.isdigit() or unit not in _SIZE_UNITS:
        raise ValueError(f"--size {text!r}: give bytes or a number with K, M or G, e.g. 64M")
    return int(digits) * _SIZE_UNITS[unit]


def _comm_plan(args, backend: str) -> tuple[str, dict, dict]:
    """(workload, axes, settings) from the options, refusing ones of the other bench."""
    settings = {"budget_s": args.budget_s}
    if args.bench == "collectives":
        given = [f"--{n.replace('_', '-')}" for n in COMM_DDP_OPTIONS
                 if getattr(args, n) is not None]
        if given:
            raise ValueError(f"{given} apply to 'comm ddp'")
        sizes = [_size_bytes(s) for s in args.size] if args.size else \
            [2**e for e in range(10, 31 if backend == "nccl" else 23, 2 if backend == "nccl"
                                 else 4)]
        axes = {"op": args.op or ["all_reduce"], "size_bytes": sizes, "dtype": [args.dtype]}
        if args.ranks_per_node is not None:
            axes["ranks_per_node"] = [args.ranks_per_node]
        return "comm", axes, settings
    if args.op or args.size or args.ranks_per_node is not None:
        raise ValueError("--op, --size and --ranks-per-node apply to 'comm collectives'")
    train_steps = args.train_steps or (50 if backend == "nccl" else 20)
    if train_steps < 1:
        raise ValueError(f"--train-steps {train_steps} must be at least 1")
    axes = {name: getattr(args, name) for name in COMM_DDP_OPTIONS[:-1]
            if getattr(args, name) is not None} or {"hook": ["allreduce"]}
    return "ddp", axes, {**settings, "train_steps": train_steps}


def _comm(args) -> int:
    import os

    import torch

    from .core.backends import resolve_device
    from .core.launcher import RankGroupError
    from .workloads.comm_runs import plan_points, run_comm, run_comm_here, under_torchrun

    backend = "nccl" if resolve_device(args.device).startswith("cuda") else "gloo"
    workload, axes, settings = _comm_plan(args, backend)
    if not (math.isfinite(args.timeout_s) and args.timeout_s > 0):
        raise ValueError(f"--timeout-s {args.timeout_s} must be a number of seconds > 0")
    here = under_torchrun()
    if here and args.nproc is not None:
        raise ValueError("--nproc: under torchrun, torchrun starts the ranks (--nproc-per-node)")
    if here and workload == "comm" and "hierarchical_all_reduce" in axes["op"] and \
            args.ranks_per_node is None:
        axes["ranks_per_node"] = [int(os.environ.get("LOCAL_WORLD_SIZE", "1"))]
    nproc = int(os.environ["WORLD_SIZE"]) if here else \
        args.nproc or (torch.cuda.device_count() if backend == "nccl" else 2)
    plan_points(workload, axes, None, nproc, backend)  # a bad value exits before any rank
    threads = args.threads or 1
    if backend == "gloo" and args.threads is None:
        from .core.noise import default_cpu_threads

        threads = max(1, default_cpu_threads() // (1 if here else nproc))
        if os.environ.get("RANK", "0") == "0" or not here:
            print(f"CPU: {threads} torch thread(s) per rank, a core left for the rest of the "
                  "machine (--threads N per rank to change)", file=sys.stderr)
    try:
        if here:
            os.environ.setdefault("A800LAB_THREADS", str(threads))
            os.environ.setdefault("A800LAB_TIMEOUT_S", str(args.timeout_s))
            res = run_comm_here(workload, axes, settings=settings, out=args.out,
                                resume=not args.no_resume, backend=backend,
                                on_progress=_progress, on_result=_show)
            if int(os.environ["RANK"]) != 0:
                return 0
        else:
            res = run_comm(workload, axes, world_size=nproc, backend=backend,
                           settings=settings, out=args.out, resume=not args.no_resume,
                           timeout_s=args.timeout_s, threads=threads,
                           on_progress=_progress, on_result=_show)
    except (KeyboardInterrupt, Cancelled):
        print(f"stopped; every finished point is in {args.out}", file=sys.stderr)
        return 130
    except RankGroupError as exc:
        print(f"a800lab: error: {exc}\nevery finished point is in {args.out}", file=sys.stderr)
        return 1
    noisy = sum(bool(r.noise.get("noisy")) for r in res.records)
    flagged = f", {noisy} noisy (marked !)" if noisy else ""
    print(f"{len(res.records)} points measured{flagged}, {res.skipped} already in {args.out}",
          file=sys.stderr)
    return 0


def _show_trial(trial) -> None:
    """One line per max-batch trial: stage, micro-batch x accumulation, outcome, peak."""
    peak = "" if trial.peak_bytes is None else f" peak {trial.peak_bytes / 2**20:.1f} MiB"
    predicted = "" if trial.predicted_bytes is None else \
        f" (predicted {trial.predicted_bytes / 2**20:.1f} MiB)"
    message = f" {trial.message}" if trial.message and trial.outcome != "ok" else ""
    print(f"  {trial.stage} {trial.batch_size} x {trial.accum_steps}: {trial.outcome}{peak}"
          f"{predicted}{message}", file=sys.stderr)


def _run_sweep(point, axes: dict, args, device: str, *, workload: str,
               fixed: dict | None = None) -> int:
    """A sweep subcommand's run: points appended to --out with a line each, Ctrl-C keeping
    what was measured, and the summary line."""
    from .core.sweep import run_sweep

    try:
        res = run_sweep(point, axes, fixed=fixed, workload=workload, out=args.out,
                        device=device, resume=not args.no_resume,
                        sample_telemetry=args.telemetry,
                        torch_threads=_threads_for(args, device),
                        on_progress=_progress, on_result=_show)
    except (KeyboardInterrupt, Cancelled):
        print(f"stopped; every finished point is in {args.out}", file=sys.stderr)
        return 130
    noisy = sum(bool(r.noise.get("noisy")) for r in res.records)
    flagged = f", {noisy} noisy (marked !)" if noisy else ""
    print(f"{len(res.records)} points measured{flagged}, {res.skipped} already in {args.out}",
          file=sys.stderr)
    return 0


def _progress(done: int, total: int, eta_s: float | None) -> None:
    eta = "" if eta_s is None else f", about {eta_s:.0f} s left"
    print(f"[{done}/{total}{eta}]", file=sys.stderr)


def _show(record) -> None:
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


if __name__ == "__main__":
    sys.exit(main())
