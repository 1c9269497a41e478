"""Plan tiles for a card you do not have: the compiler's verdict on every config of a grid, with
occupancy, waves and the quantisation model's ranking.

    print(format_plan(plan_tiles("A800", "bf16", 4096, 4096, 4096)))  # `a800lab check tiles`
"""

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import pandas as pd

from ...core.specs import Target
from ..matmul import DEFAULT_TILES, MatmulSpec
from .facts import TileFacts, as_target, tile_facts_grid
from .quantisation import quantise
from .tune import DEFAULT_AXES, config_grid


@dataclass
class TilePlan:
    """The verdicts for one target, precision and shape, one row per config."""

    target: Target
    precision: str
    shape: tuple[int, int, int]
    rows: list[dict] = field(default_factory=list)

    @property
    def source(self) -> str:
        return next((row["source"] for row in self.rows if "compiler" in row["source"] or
                     "estimate" in row["source"]), self.rows[0]["source"] if self.rows else "")

    @property
    def fitting(self) -> list[dict]:
        return [row for row in self.rows if row["fits"]]

    def frame(self) -> pd.DataFrame:
        return pd.DataFrame(self.rows)


def describe_tile(tile) -> str:
    """"128x256x64 8w 3s" (+ " persistent", " tma", " fp8-fast") of a spec or a config."""
    get = tile.get if isinstance(tile, Mapping) else lambda name: getattr(tile, name, None)
    text = (f"{get('block_m')}x{get('block_n')}x{get('block_k')} {get('num_warps')}w "
            f"{get('num_stages')}s")
    return text + "".join(label for name, value, label in (
        ("schedule", "persistent", " persistent"), ("loads", "tma", " tma"),
        ("fp8_acc", "fast", " fp8-fast")) if get(name) == value)


def plan_tiles(target: str | Target, precision: str, m: int, n: int, k: int, *,
               axes: Mapping[str, Sequence] | None = None,
               configs: Sequence[Mapping] | None = None, fp8_acc: str | None = None,
               cache=None, on_config: Callable[[int, int], None] | None = None) -> TilePlan:
    """Compile (or recall) every config for `target` and model it at m x n x k. `axes`
    overrides axes of the tuner's default grid, `configs` replaces it."""
    target = as_target(target)
    grid = list(configs) if configs is not None else config_grid(
        {**DEFAULT_AXES["triton"], **(axes or {})}, "triton")
    defaults = {f: DEFAULT_TILES["triton"][f] for f in ("schedule", "loads")}
    specs, refused = [], []
    for config in grid:
        try:
            specs.append(MatmulSpec(m, n, k, precision, "triton", fp8_acc=fp8_acc,
                                    **{**defaults, **config}))
        except ValueError as exc:  # wrong on every card (e.g. the accumulator's registers)
            refused.append({"config": describe_tile(config), **config, "fits": False,
                            "reason": f"the lab's check, on every card: {str(exc).split(';')[0]}",
                            "source": "a800lab.workloads.matmul.MatmulSpec", "exact": True})
    done = itertools.count(1)
    seen = None if on_config is None else lambda *_: on_config(next(done), len(specs))
    facts = tile_facts_grid(specs, target, cache=cache, on_config=seen)
    plan = TilePlan(target, MatmulSpec(m, n, k, precision).precision, (m, n, k))
    plan.rows = [_row(spec, fact, target) for spec, fact in zip(specs, facts, strict=True)]
    plan.rows += refused
    return plan


def compare_targets(targets: Sequence[str | Target], precision: str, m: int, n: int, k: int,
                    *, configs: Sequence[Mapping] | None = None,
                    fields: Sequence[str] = ("fits", "smem_bytes", "registers", "mma",
                                             "blocks_per_sm", "waves")) -> pd.DataFrame:
    """One row per config, `fields` side by side per target."""
    frames = {}
    for target in targets:
        plan = plan_tiles(target, precision, m, n, k, configs=configs)
        frames[plan.target.label] = plan.frame().set_index("config")[list(fields)]
    return pd.concat(frames, axis=1)


def _row(spec: MatmulSpec, facts: TileFacts, target: Target) -> dict:
    row = {"config": describe_tile(spec), **spec.tile, "fits": facts.fits,
           "reason": facts.reason, "smem_bytes": facts.smem_bytes,
           "static_smem_bytes": facts.static_smem_bytes,
           "smem_limit_bytes": facts.smem_limit_bytes, "registers": facts.registers,
           "spill_bytes": facts.spill_bytes, "pipeline": facts.pipeline, "mma": facts.mma,
           "blocks_per_sm": facts.blocks_per_sm,
           "limited_by": facts.occupancy.get("limited_by", ""), "waves": None,
           "predicted_efficiency": None, "source": facts.source, "exact": facts.exact}
    if facts.fits and target.sm_count:
        # a persistent kernel runs one program per SM: its "waves" are rounds of that loop
        per_sm = 1 if spec.schedule == "persistent" else facts.blocks_per_sm
        q = quantise(spec.m, spec.n, spec.k, spec.block_m, spec.block_n, spec.block_k,
                     sm_count=target.sm_count, blocks_per_sm=per_sm)
        row.update(waves=q.waves, predicted_efficiency=q.predicted_efficiency)
    return row


def format_plan(plan: TilePlan) -> str:
    """The plan as the text table `a800lab check tiles` prints, best predicted first."""
    m, n, k = plan.shape
    sms = (f"{plan.target.sm_count} SMs" if plan.target.sm_count else
           "SM count unknown: name a card (e.g. H100 SXM5 80GB) for waves")
    lines = [f"{plan.target.label}, {sms}; {plan.precision} {m}x{n}x{k}; {len(plan.fitting)} of "
             f"{len(plan.rows)} configs fit", f"facts: {plan.source}"]
    if any(not row["exact"] for row in plan.rows):
        lines.append("  (an estimate: install Triton for the compiler's own figures)")
    header = (f"{'config':<32} {'fits':<4} {'smem B':>9} {'regs':>4} {'spill':>5} "
              f"{'pipeline':<8} {'mma':<8} {'blk/SM':>6} {'limit':<13} {'waves':>5} "
              f"{'pred':>5}")
    lines += ["", header, "-" * len(header)]
    order = sorted(plan.rows, key=lambda r: (not r["fits"], -(r.get("predicted_efficiency") or 0)))
    for row in order:
        if not row["fits"]:
            lines.append(f"{row['config']:<32} no   {row['reason']}")
            continue
        spill = "-" if row["spill_bytes"] is None else f"{row['spill_bytes']}B"
        regs = "-" if row["registers"] is None else str(row["registers"])
        waves = "-" if row["waves"] is None else str(row["waves"])
        pred = "-" if row["predicted_efficiency"] is None else \
            f"{row['predicted_efficiency']:.2f}"
        lines.append(f"{row['config']:<32} yes  {row['smem_bytes']:>9,} {regs:>4} "
                     f"{spill:>5} {row['pipeline']:<8} {row['mma'][:8]:<8} "
                     f"{row['blocks_per_sm']:>6} {row['limited_by']:<13} {waves:>5} {pred:>5}")
    lines += ["", "smem B: the dynamic shared memory a launch asks for (metadata.shared); spill: "
              "local memory per thread; blk/SM: resident blocks per SM (limited by the 'limit' "
              "column); pred: tile x wave quantisation efficiency at this shape (1.00 = no "
              "padding, full waves), not a speed"]
    return "\n".join(lines)
