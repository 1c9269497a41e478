"""The matmul and tile labs on the command line: `sweep matmul`, `sweep tiles`, `tune tiles`.

    python -m a800lab sweep matmul --size 1024 4096 --precision fp32 bf16 --out runs.jsonl
    python -m a800lab sweep tiles --size 4096 --precision bf16 --block-m 64 128 256 \
        --block-n 64 128 256 --out tiles.jsonl        # the tile kernel (CPU: its stand-in)
    python -m a800lab tune tiles --size 4096 --precision bf16 [--out trials.jsonl]
    python -m a800lab sweep tiles ... --schedule tile persistent --loads pointer tma  # Hopper

A sweep appends one JSON line per point as measured; the same command again resumes. On a GPU
both first ask the compiler about every config for this card (a800lab.workloads.tiles.facts,
cached) and say how many it refuses and why; refused configs are recorded with that reason and
never launched (`tune` leaves them out of the search). `tune tiles` (also spelt `tune`) finds the
fastest tile by successive halving, says when its lead is inside the noise, stores the winner per
device, shape and precision, and prints the `triton.Config(...)` to paste into your own
@triton.autotune. `check tiles` (a800lab.cli.check) asks the compiler without a GPU.
"""

from __future__ import annotations

import functools
import json
import sys

from ..core.cancel import Cancelled
from .options import (
    MATMUL_PRECISION_HELP,
    TILE_CHOICES,
    TILE_OPTIONS,
    check_run_options,
    check_store,
    cpu_notes,
    resume_options,
    run_options,
    run_sweep_command,
    shape_axes,
    shape_options,
    show_record,
    threads_for,
    tile_choice_options,
    tile_options,
)


def add_parsers(commands) -> None:
    matmul = commands.add("matmul", group="sweep", run=sweep_matmul_command,
                          help="torch.matmul (cuBLAS on a GPU) over shapes and precisions")
    _sweep_options(matmul)

    tiles = commands.add("tiles", group="sweep", run=sweep_tiles_command,
                         help="the lab's tile kernel over tile configs (on a CPU its labelled "
                              "stand-in); impossible configs recorded with the reason")
    _sweep_options(tiles)
    tile_options(tiles)
    tile_choice_options(tiles)

    tune = commands.add("tiles", group="tune", run=tune_tiles_command,
                        help="find the fastest tile config for one shape (successive halving; "
                             "the winner is stored and reused)")
    shape_options(tune, many=False)
    tune.add_argument("--precision", default="fp32", help="fp32, tf32, fp16, bf16 or fp8")
    tile_options(tune)
    tile_choice_options(tune)
    run_options(tune, out_required=False)
    tune.add_argument("--store", default=None,
                      help="tuned-config file (default $A800LAB_TUNED or ~/.cache/a800lab/"
                           "tuned.json)")
    tune.add_argument("--force", action="store_true", help="tune even when a result is stored")


def _sweep_options(parser) -> None:
    shape_options(parser)
    parser.add_argument("--precision", nargs="+", default=["fp32"], help=MATMUL_PRECISION_HELP)
    run_options(parser)
    resume_options(parser)
    parser.add_argument("--telemetry", action="store_true", help="sample NVML during each point")


def _square(run):
    """A point function of (m, n, k, ...) that also takes size=s for m=n=k=s."""
    def point(size=None, m=None, n=None, k=None, **rest):
        return run(m or size, n or size, k or size, **rest)
    return point


def _tile_axes(args, backend: str, precision: str) -> dict:
    """The tile options given. A value no combination of the given ones can use (a typo, a
    tile too large with every block_n given) exits before running, its error naming the values
    given; a combination that alone cannot run is measured as impossible, with the reason."""
    import itertools

    from ..workloads.matmul import MatmulSpec

    axes = {name: list(dict.fromkeys(getattr(args, name))) for name in
            (*TILE_OPTIONS, *TILE_CHOICES) if getattr(args, name)}
    if "fp8_acc" in axes and precision != "fp8":
        raise ValueError(f"--fp8-acc is fp8's accumulation choice; drop it for {precision}")
    if backend == "triton":
        _check_triton_here(args.device)
    first_error = None
    for combo in itertools.product(*axes.values()):
        try:
            MatmulSpec(64, 64, 64, precision, backend, **dict(zip(axes, combo, strict=True)))
            return axes
        except ValueError as exc:
            first_error = first_error or exc
    if first_error is not None:
        raise first_error
    return axes


def _check_triton_here(device: str) -> None:
    """The Triton kernel needs a CUDA GPU, or the Triton interpreter for correctness checks."""
    import os

    from ..core.backends import HAS_TRITON, resolve_device, why_unavailable

    if not HAS_TRITON:
        raise ValueError(f"--backend triton: {why_unavailable('triton')}")
    if not resolve_device(device).startswith("cuda") and \
            os.environ.get("TRITON_INTERPRET") != "1":
        raise ValueError("--backend triton needs a CUDA GPU (or TRITON_INTERPRET=1, the Triton "
                         "interpreter: correctness only, no GPU timing); on this machine use "
                         "--backend cpu_blocked, the kernel's CPU stand-in")


def _precisions(args, device: str) -> list[str]:
    """The canonical names given ("fp32" and "float32" are one precision), each supported."""
    from ..core.precision import check_supported, parse_precision

    precisions = list(dict.fromkeys(parse_precision(p).name for p in args.precision))
    for name in precisions:
        check_supported(name, device)
    return precisions


def _check_shapes(axes: dict) -> list[tuple[int, int, int, int]]:
    """Reject a bad shape before anything runs; returns each point's (m, n, k, torch calls
    of the CPU stand-in: one per tile and K step)."""
    from ..core.sweep import grid
    from ..workloads.matmul import MatmulSpec

    shapes = []
    for p in grid(axes):
        size = p.get("size")
        m, n, k = p.get("m", size), p.get("n", size), p.get("k", size)
        MatmulSpec(m, n, k, p["precision"])
        shapes.append((m, n, k, _stand_in_calls(m, n, k, p)))
    return shapes


def _stand_in_calls(m: int, n: int, k: int, tile: dict) -> int:
    if not tile.get("block_m"):
        return 1
    return (-(-m // tile["block_m"]) * -(-n // tile.get("block_n", tile["block_m"]))
            * -(-k // tile.get("block_k", 64)))


def _announce_cpu_duration(device: str, shapes, precisions, points: int, budget_s: float,
                           threads: int | None) -> bool:
    """On a CPU, say up front when the run will take minutes (and what to do); True if so."""
    from ..core.noise import default_cpu_threads
    from ..core.sweep import thread_count
    from ..workloads.matmul import cpu_duration_note

    if device != "cpu":
        return False
    with thread_count(threads or default_cpu_threads()):  # the threads the run will use
        note = cpu_duration_note(shapes, precisions, points=points, budget_s=budget_s)
    if note:
        print(f"note: {note}", file=sys.stderr)
    return bool(note)


def sweep_matmul_command(args) -> int:
    from ..core.backends import resolve_device
    from ..workloads.matmul import matmul_point

    check_run_options(args)
    device = resolve_device(args.device)
    precisions = _precisions(args, device)
    axes = {**shape_axes(args), "precision": precisions}
    shapes = _check_shapes(axes)
    cpu_notes(precisions, device)
    _announce_cpu_duration(device, shapes, precisions, len(shapes), args.budget_s,
                           args.threads)
    point = _square(functools.partial(matmul_point, device=device, budget_s=args.budget_s))
    return run_sweep_command(point, axes, args, device, workload="matmul")


def sweep_tiles_command(args) -> int:
    from ..core.backends import resolve_device
    from ..workloads.tiles.point import default_tile_backend, tiled_matmul_point

    check_run_options(args)
    device = resolve_device(args.device)
    precisions = _precisions(args, device)
    axes = {**shape_axes(args), "precision": precisions}
    backend = default_tile_backend(device) if args.backend == "auto" else args.backend
    for name in precisions:
        axes.update(_tile_axes(args, backend, name))
    shapes = _check_shapes(axes)
    cpu_notes(precisions, device)
    _announce_cpu_duration(device, shapes, precisions, len(shapes), args.budget_s,
                           args.threads)
    if backend == "triton" and device != "cpu":
        _say_refused(axes, backend, device)
    point = _square(functools.partial(tiled_matmul_point, device=device,
                                      budget_s=args.budget_s))
    return run_sweep_command(point, axes, args, device, workload="tiles",
                             fixed={"backend": backend})


def _say_refused(axes: dict, backend: str, device: str) -> None:
    """Ask the compiler about every config of the grid for this card first (cached), and say
    how many it refuses and why; the points record the same reasons without launching."""
    from ..core.sweep import grid
    from ..workloads.matmul import MatmulSpec
    from ..workloads.tiles.config import refused_configs

    specs = []
    for p in grid(axes):
        size = p.pop("size", None)
        m, n, k = p.pop("m", size), p.pop("n", size), p.pop("k", size)
        specs.append(MatmulSpec(m, n, k, p.pop("precision"), backend, **p))
    refused = refused_configs(specs, device)
    if refused:
        print(f"the compiler refuses {len(refused)} of {len(specs)} configs on {device} (recorded "
              f"with the reason, never launched); e.g. {next(iter(refused.values()))}",
              file=sys.stderr)


def tune_tiles_command(args) -> int:
    from ..core.backends import resolve_device
    from ..core.precision import check_supported, parse_precision
    from ..core.store import tuned_store_path
    from ..core.sweep import thread_count
    from ..workloads.matmul import MatmulSpec
    from ..workloads.tiles.config import export_config
    from ..workloads.tiles.point import default_tile_backend
    from ..workloads.tiles.tune import DEFAULT_AXES, config_grid, tune

    check_run_options(args)
    device = resolve_device(args.device)
    precision = parse_precision(args.precision).name
    check_supported(precision, device)
    shape = shape_axes(args)
    m, n, k = (shape["size"],) * 3 if "size" in shape else (shape["m"], shape["n"], shape["k"])
    backend = default_tile_backend(device) if args.backend == "auto" else args.backend
    if backend not in DEFAULT_AXES:
        raise ValueError(f"--backend {backend}: cuBLAS picks its own tiles; tune 'triton' on a "
                         "GPU or 'cpu_blocked' on the CPU")
    axes = _tile_axes(args, backend, precision)
    fp8_acc = axes.pop("fp8_acc", [None])
    if len(fp8_acc) > 1:
        raise ValueError("tune tiles takes one --fp8-acc (precise or fast): the two compute "
                         "different things, so tune each on its own")
    grid = config_grid({**DEFAULT_AXES[backend], **axes}, backend)
    store = args.store or tuned_store_path()
    check_store(store)
    print(f"tuning {m}x{n}x{k} {precision} on {device} ({backend}): {len(grid)} configs",
          file=sys.stderr)
    long_run = _announce_cpu_duration(device, [(m, n, k, max(_stand_in_calls(m, n, k, c)
                                                              for c in grid))],
                                      [precision], len(grid), args.budget_s, args.threads)

    def starting(config: dict, budget_s: float) -> None:  # a long trial shows it has begun
        print(f"  timing {config} for {budget_s:.3g} s ...", file=sys.stderr)

    try:
        with thread_count(threads_for(args, device)):
            outcome = tune(m, n, k, precision, backend, grid, device=device,
                           budget_s=args.budget_s, store=store, out=args.out, force=args.force,
                           on_trial=show_record, on_start=starting if long_run else None,
                           fp8_acc=fp8_acc[0])
    except (KeyboardInterrupt, Cancelled):
        print("stopped; nothing stored" + (f"; the trials are in {args.out}" if args.out
                                            else ""), file=sys.stderr)
        return 130
    entry = outcome.entry
    if outcome.reused:
        print(f"reused the result tuned at {entry['tuned_at']} from {store} (--force tunes "
              "again)", file=sys.stderr)
    elif not entry:
        search = outcome.search
        what = "not stored" if search is not None and search.best is not None else "no result"
        print(f"{what}: {search.verdict if search is not None else 'stopped'}",
              file=sys.stderr)
        return 1
    else:
        print(f"{outcome.search.verdict}; {len(outcome.records)} trials in "
              f"{outcome.search.wall_s:.1f} s; stored in {store}", file=sys.stderr)
    print(json.dumps({"best": entry["best"], "tflops": entry.get("tflops"),
                      "inside_noise": entry.get("inside_noise"), "verdict": entry["verdict"]},
                     indent=2))
    if backend == "triton":
        print(export_config(MatmulSpec(m, n, k, precision, backend, fp8_acc=fp8_acc[0],
                                       **entry["best"]))[1])
    return 0
