"""Tile and wave quantisation of a tiled matmul: why N=1537 runs slower than N=1536 (padded
edge tiles, and a last wave leaving SMs idle).

    q = quantise(m=1792, n=1792, k=4096, block_m=256, block_n=128, block_k=32, sm_count=108)
    q.tiles, q.waves, q.predicted_efficiency     # 98 tiles, 1 wave, tile x wave efficiency
"""

import math
from dataclasses import asdict, dataclass

from ...core.checks import positive_int
from ...core.specs import family_rows


@dataclass(frozen=True)
class Quantisation:
    """How one shape and tile fill the GPU."""

    m: int
    n: int
    k: int
    block_m: int
    block_n: int
    block_k: int
    sm_count: int
    blocks_per_sm: int = 1

    def __post_init__(self) -> None:
        for name in ("m", "n", "k", "block_m", "block_n", "block_k", "sm_count",
                     "blocks_per_sm"):
            object.__setattr__(self, name, positive_int(name, getattr(self, name)))

    @property
    def tiles_m(self) -> int:
        return math.ceil(self.m / self.block_m)

    @property
    def tiles_n(self) -> int:
        return math.ceil(self.n / self.block_n)

    @property
    def tiles(self) -> int:
        """Output tiles launched (thread blocks)."""
        return self.tiles_m * self.tiles_n

    @property
    def k_steps(self) -> int:
        """Iterations of the K loop per tile."""
        return math.ceil(self.k / self.block_k)

    @property
    def tile_efficiency(self) -> float:
        """Useful share of the work the tiles do: m*n*k over the padded m*n*k."""
        padded = (self.tiles_m * self.block_m) * (self.tiles_n * self.block_n) * (
            self.k_steps * self.block_k)
        return self.m * self.n * self.k / padded

    @property
    def wave_size(self) -> int:
        """Tiles that run at once: one per SM per resident block."""
        return self.sm_count * self.blocks_per_sm

    @property
    def waves(self) -> int:
        return math.ceil(self.tiles / self.wave_size)

    @property
    def last_wave_occupancy(self) -> float:
        """Share of the last wave's slots that hold a tile (1.0: the last wave is full)."""
        return (self.tiles - (self.waves - 1) * self.wave_size) / self.wave_size

    @property
    def wave_efficiency(self) -> float:
        """Share of all wave slots that hold a tile."""
        return self.tiles / (self.waves * self.wave_size)

    @property
    def predicted_efficiency(self) -> float:
        """Relative throughput: tile_efficiency * wave_efficiency (1.0 = nothing wasted)."""
        return self.tile_efficiency * self.wave_efficiency

    def to_dict(self) -> dict:
        derived = ("tiles", "k_steps", "tile_efficiency", "waves", "wave_size",
                   "last_wave_occupancy", "wave_efficiency", "predicted_efficiency")
        return {**asdict(self), **{name: getattr(self, name) for name in derived}}


quantise = Quantisation  # the lab's verb for it: quantise(m, n, k, block_m, ..., sm_count)


def sm_count_of(card: str) -> int:
    """SM count of a card ("NVIDIA A800-SXM4-80GB", or a family whose rows agree: "A800")."""
    rows = family_rows(card)
    counts = {row.name: row.sm_count for row in rows}
    if len(set(counts.values())) == 1:
        return next(iter(counts.values()))
    known = f"its rows differ: {counts}" if counts else "the datasheet table does not know it"
    raise ValueError(f"no single SM count for {card!r}: {known}; pass sm_count= (e.g. "
                     "torch.cuda.get_device_properties(0).multi_processor_count)")
