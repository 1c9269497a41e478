"""Occupancy: how many thread blocks of one kernel an SM holds at once, and what limits it (the
arithmetic of CUDA's occupancy calculator).

    occupancy(arch_limits((8, 0)), num_warps=8, registers_per_thread=255, smem_bytes=147456)
"""

from dataclasses import asdict, dataclass

from ...core.specs import ArchLimits

WARP_SIZE = 32


def _round_up(value: int, unit: int) -> int:
    return -(-value // unit) * unit


@dataclass(frozen=True)
class Occupancy:
    """Blocks per SM under each limit and overall."""

    blocks_per_sm: int
    by_smem: int
    by_registers: int
    by_warps: int
    by_blocks: int
    limited_by: str
    warps_per_sm: int

    def to_dict(self) -> dict:
        return asdict(self)


def occupancy(limits: ArchLimits, *, num_warps: int, registers_per_thread: int,
              smem_bytes: int, static_smem_bytes: int = 0) -> Occupancy:
    """Resident blocks per SM of a kernel with these resources on `limits`' architecture."""
    block_smem = _round_up(smem_bytes + static_smem_bytes + limits.smem_reserved_per_block_bytes,
                           limits.smem_unit_bytes)
    by_smem = limits.smem_per_sm_bytes // block_smem
    if smem_bytes + static_smem_bytes > limits.smem_per_block_optin_bytes:
        by_smem = 0
    registers_per_warp = _round_up(registers_per_thread * WARP_SIZE, limits.register_unit)
    # the hardware checks a block's registers as if its warps filled every quarter evenly
    warps_allocated = _round_up(num_warps, limits.sub_partitions)
    if registers_per_warp == 0:
        by_registers = limits.max_blocks_per_sm
    elif registers_per_warp * warps_allocated > limits.registers_per_block or \
            registers_per_thread > limits.max_registers_per_thread:
        by_registers = 0
    else:
        per_quarter = limits.registers_per_sm // limits.sub_partitions // registers_per_warp
        by_registers = per_quarter * limits.sub_partitions // num_warps
    by_warps = limits.max_warps_per_sm // num_warps
    limits_found = {"shared memory": by_smem, "registers": by_registers, "warps": by_warps,
                    "blocks per SM": limits.max_blocks_per_sm}
    limited_by = min(limits_found, key=limits_found.get)
    blocks = limits_found[limited_by]
    return Occupancy(blocks_per_sm=blocks, by_smem=by_smem, by_registers=by_registers,
                     by_warps=by_warps, by_blocks=limits.max_blocks_per_sm,
                     limited_by=limited_by, warps_per_sm=blocks * num_warps)
