"""`check tiles`: the compiler's verdict on a tile grid for any card, on any machine (no GPU),
one line per config (a800lab.workloads.tiles.plan); compiles are cached."""

import json
import sys

from ..core.knobs import levers, tuner_axes
from .sweep import ONE_PRECISION_HELP, MatmulSpec


def add_parsers(commands) -> None:
    other = "overrides --size for that dimension"
    commands.add("tiles", group="check", run=check_tiles_command,
                 help="the compiler's verdict on every tile config for a card, without the card: "
                      "shared memory, registers, spills, occupancy, waves",
                 options="card precision SHAPE LEVERS+ json", spec=lambda: MatmulSpec,
                 card={"required": True, "help": "a card of the datasheet table (A800, A100, "
                       "H100, H800, H200, L40S, ...) or an architecture (sm_80, sm_89, sm_90)"},
                 precision={"default": "bf16", "help": ONE_PRECISION_HELP},
                 size={"default": 4096, "help": "square problem m=n=k (4096)"}, m=other,
                 n=other, k=other, json="print the rows as JSON",
                 **{name: "default: the tuner's grid" for name in tuner_axes(MatmulSpec, "cuda")})


def check_tiles_command(args) -> int:
    from ..core.specs import resolve_target
    from ..workloads.tiles.plan import format_plan, plan_tiles

    target = resolve_target(args.card)
    m, n, k = (getattr(args, d) or args.size for d in ("m", "n", "k"))
    axes = {name: list(dict.fromkeys(getattr(args, name))) for name in levers(MatmulSpec)
            if name != "fp8_acc" and getattr(args, name)}
    if args.fp8_acc and len(args.fp8_acc) > 1:
        raise ValueError("check tiles takes one --fp8-acc (precise or fast); run it twice to "
                         "compare them")

    def progress(done: int, total: int) -> None:
        if done == 1 or done == total or done % 8 == 0:
            print(f"[{done}/{total}] compiled or recalled for {target.label}", file=sys.stderr)

    plan = plan_tiles(target, args.precision, m, n, k, axes=axes,
                      fp8_acc=args.fp8_acc[0] if args.fp8_acc else None, on_config=progress)
    if args.json:
        print(json.dumps({"target": target.label, "sm_count": target.sm_count,
                          "precision": plan.precision, "shape": list(plan.shape),
                          "source": plan.source, "rows": plan.rows}, indent=2))
    else:
        print(format_plan(plan))
    return 0
