"""The matmul and tile labs on the command line: `sweep matmul`, `sweep tiles`, `tune tiles`; on a
GPU tile configs the compiler refuses are recorded with the reason, never launched."""

import functools
import itertools
import json
import os
import sys

from ..core.knobs import knobs, levers
from ..core.noise import default_cpu_threads
from ..core.precision import PRECISIONS, check_supported
from ..core.sweep import grid, thread_count
from ..workloads.matmul import MatmulSpec
from . import options

ONE_PRECISION_HELP = "fp32, tf32, fp16, bf16 or fp8"
PRECISION_HELP = f"one or more of {', '.join(PRECISIONS[1:])} (default fp32)"
BACKEND = knobs(MatmulSpec)["backend"]
AUTO_BACKEND = {"default": "auto", "check": lambda v: v if v == "auto" else
                BACKEND.check("backend", v), "help": f"{BACKEND.help}: auto (triton on a GPU, "
                f"cpu_blocked on CPU), {', '.join(BACKEND.choices)}"}


def add_parsers(commands) -> None:
    precision = {"default": ["fp32"], "help": PRECISION_HELP}
    commands.add("matmul", group="sweep", run=functools.partial(_sweep, "matmul"),
                 help="torch.matmul (cuBLAS on a GPU) over shapes and precisions",
                 options="SHAPE+ precision+ SWEEP", precision=precision, spec=lambda: MatmulSpec)
    commands.add("tiles", group="sweep", run=functools.partial(_sweep, "tiles"),
                 help="the lab's tile kernel over tile configs (on a CPU its labelled stand-in); "
                      "impossible configs recorded with the reason",
                 options="SHAPE+ precision+ SWEEP TILES", precision=precision,
                 backend=AUTO_BACKEND, spec=lambda: MatmulSpec)
    commands.add("tiles", group="tune", run=tune_tiles_command,
                 help="find the fastest tile config for one shape (successive halving; the "
                      "winner is stored and reused)",
                 options="SHAPE precision TILES RUN store force", out={"required": False},
                 precision={"default": "fp32", "help": ONE_PRECISION_HELP},
                 backend=AUTO_BACKEND, spec=lambda: MatmulSpec)


def _backend(args) -> str:
    from ..workloads.tiles.point import default_tile_backend

    return default_tile_backend(args.device) if args.backend == "auto" else args.backend


def _tile_axes(args, backend: str, precision: str) -> dict:
    """The tile options given. A value no combination of them can use (a typo) is refused, its
    error naming the values given; a combination that cannot run is measured as impossible."""
    axes = {name: list(dict.fromkeys(getattr(args, name))) for name in levers(MatmulSpec)
            if getattr(args, name)}
    if backend == "triton":  # a CUDA GPU, or the Triton interpreter for correctness checks
        from ..core.backends import HAS_TRITON, why_unavailable

        if not HAS_TRITON:
            raise ValueError(f"--backend triton: {why_unavailable('triton')}")
        if not args.device.startswith("cuda") and os.environ.get("TRITON_INTERPRET") != "1":
            raise ValueError("--backend triton needs a CUDA GPU (or TRITON_INTERPRET=1, the "
                             "Triton interpreter: correctness only, no GPU timing); on this "
                             "machine use --backend cpu_blocked, the kernel's CPU stand-in")
    first_error = None
    for combo in itertools.product(*axes.values()):
        try:
            MatmulSpec(64, 64, 64, precision, backend, **dict(zip(axes, combo, strict=True)))
            return axes
        except ValueError as exc:
            first_error = first_error or exc
    raise first_error


def _precisions(names, device: str) -> list[str]:
    """The precisions given (canonical: the field's check), once each, each supported."""
    precisions = list(dict.fromkeys(names))
    for name in precisions:
        check_supported(name, device)
    return precisions


def _stand_in_calls(m: int, n: int, k: int, tile: dict) -> int:
    """Torch calls of the CPU stand-in for one product: one per tile and K step."""
    if not tile.get("block_m"):
        return 1
    return (-(-m // tile["block_m"]) * -(-n // tile.get("block_n", tile["block_m"]))
            * -(-k // tile.get("block_k", 64)))


def _spec(point: dict, backend: str = "torch") -> MatmulSpec:
    """A grid point as a spec (ValueError for a bad one); its tile fields with a tile backend."""
    size = point.get("size")
    tile = {k: v for k, v in point.items() if k not in ("size", "m", "n", "k", "precision")}
    return MatmulSpec(point.get("m", size), point.get("n", size), point.get("k", size),
                      point["precision"], backend, **(tile if backend != "torch" else {}))


def _announce_cpu_duration(args, shapes, precisions, points: int) -> bool:
    """On a CPU, say up front when the run will take minutes (and what to do); True if so."""
    from ..workloads.matmul import cpu_duration_note

    if args.device != "cpu":
        return False
    with thread_count(args.threads or default_cpu_threads()):  # the threads the run will use
        note = cpu_duration_note(shapes, precisions, points=points, budget_s=args.budget_s)
    if note:
        print(f"note: {note}", file=sys.stderr)
    return bool(note)


def _sweep(workload: str, args) -> int:
    from ..workloads.matmul import matmul_point
    from ..workloads.tiles.point import tiled_matmul_point

    precisions = _precisions(args.precision, args.device)
    axes = {**options.shape_axes(args), "precision": precisions}
    fixed = {"backend": _backend(args)} if workload == "tiles" else None
    for name in precisions if fixed else ():
        axes.update(_tile_axes(args, fixed["backend"], name))
    specs = [(_spec(p), p) for p in grid(axes)]  # a bad shape refused here, before running
    shapes = [(s.m, s.n, s.k, _stand_in_calls(s.m, s.n, s.k, p)) for s, p in specs]
    options.cpu_notes(precisions, args.device)
    _announce_cpu_duration(args, shapes, precisions, len(shapes))
    if fixed == {"backend": "triton"} and args.device != "cpu":
        # the compiler is asked about every config first (cached); the points record the
        # same reasons without launching
        from ..workloads.tiles.config import refused_configs

        tiles = [_spec(p, "triton") for p in grid(axes)]
        refused = refused_configs(tiles, args.device)
        if refused:
            print(f"the compiler refuses {len(refused)} of {len(tiles)} configs on "
                  f"{args.device} (recorded with the reason, never launched); e.g. "
                  f"{next(iter(refused.values()))}", file=sys.stderr)
    run = functools.partial(tiled_matmul_point if fixed else matmul_point, device=args.device,
                            budget_s=args.budget_s)

    def point(size=None, m=None, n=None, k=None, **rest):  # size=s: m=n=k=s
        return run(m or size, n or size, k or size, **rest)

    return options.run_sweep_command(point, axes, args, workload=workload, fixed=fixed)


def tune_tiles_command(args) -> int:
    from ..workloads.tiles.config import export_config
    from ..workloads.tiles.tune import DEFAULT_AXES, config_grid, tune

    (precision,) = _precisions([args.precision], args.device)
    shape = options.shape_axes(args)
    m, n, k = (shape["size"],) * 3 if "size" in shape else (shape["m"], shape["n"], shape["k"])
    backend = _backend(args)
    if backend not in DEFAULT_AXES:
        raise ValueError(f"--backend {backend}: cuBLAS picks its own tiles; tune 'triton' on a "
                         "GPU or 'cpu_blocked' on the CPU")
    axes = _tile_axes(args, backend, precision)
    fp8_acc = axes.pop("fp8_acc", [None])
    if len(fp8_acc) > 1:
        raise ValueError("tune tiles takes one --fp8-acc (precise or fast): the two compute "
                         "different things, so tune each on its own")
    configs = config_grid({**DEFAULT_AXES[backend], **axes}, backend)
    store = options.store_path(args.store)
    print(f"tuning {m}x{n}x{k} {precision} on {args.device} ({backend}): {len(configs)} configs",
          file=sys.stderr)
    calls = max(_stand_in_calls(m, n, k, c) for c in configs)
    long_run = _announce_cpu_duration(args, [(m, n, k, calls)], [precision], len(configs))

    def starting(config: dict, budget_s: float) -> None:  # a long trial shows it has begun
        print(f"  timing {config} for {budget_s:.3g} s ...", file=sys.stderr)

    outcome = options.stoppable(args, lambda: tune(
        m, n, k, precision, backend, configs, device=args.device, budget_s=args.budget_s,
        store=store, out=args.out, force=args.force, on_trial=options.show_record,
        on_start=starting if long_run else None, fp8_acc=fp8_acc[0]),
        "stopped; nothing stored" + options.kept(args.out))
    entry, search = outcome.entry, outcome.search
    if outcome.reused:
        options.say_reused(entry, store)
    elif not entry:
        what = "not stored" if search is not None and search.best is not None else "no result"
        print(f"{what}: {search.verdict if search is not None else 'stopped'}", file=sys.stderr)
        return 1
    else:
        print(f"{search.verdict}; {len(outcome.records)} trials in {search.wall_s:.1f} s; "
              f"stored in {store}", file=sys.stderr)
    print(json.dumps({"best": entry["best"], "tflops": entry.get("tflops"),
                      "inside_noise": entry.get("inside_noise"), "verdict": entry["verdict"]},
                     indent=2))
    if backend == "triton":
        print(export_config(MatmulSpec(m, n, k, precision, backend, fp8_acc=fp8_acc[0],
                                       **entry["best"]))[1])
    return 0
