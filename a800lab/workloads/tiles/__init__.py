"""The tile lab (chapter 02): one matmul tiled by hand, its configs checked, tuned and modelled.

    from a800lab.workloads.tiles import tiled_matmul_point, check_config, quantise
    from a800lab.workloads.tiles.tune import tune     # tune is also its module's name

Every name below is importable from here (each module is imported when a name of it is first
used):

    point.py         tiled_matmul_point over three back ends: triton, torch (cuBLAS) and the
                     CPU stand-in (cpu_blocked); default_tile_backend(device), backend_label
    config.py        check_config (shared memory and registers against the card), smem_limit,
                     export_config (the triton.Config to paste), alignment_hints
    facts.py         tile_facts, tile_facts_grid: the compiler's verdict for any card, no GPU
    plan.py          plan_tiles, format_plan, compare_targets: a grid planned for a card
    occupancy.py     Occupancy: blocks per SM and what limits them
    tune.py          tune(): the fastest tile of a grid by successive halving, stored and reused;
                     config_grid, default_grid
    quantisation.py  quantise: tile and wave quantisation (the share of tile work and of wave
                     slots used); sm_count_of

The Triton kernel itself (kernel.py: launch_tile_matmul, kernel_call) is not on this face: it
is imported on first use, and TRITON_INTERPRET=1 must be set before that import to run it under
the Triton interpreter on a CPU.
"""

from ...core.face import face

__getattr__, __dir__, __all__ = face(__name__, {
    "point": "backend_label default_tile_backend tiled_matmul_point",
    "config": "alignment_hints check_config export_config smem_limit",
    "facts": "tile_facts tile_facts_grid",
    "plan": "compare_targets format_plan plan_tiles",
    "occupancy": "Occupancy",
    "tune": "config_grid default_grid",
    "quantisation": "quantise sm_count_of",
})
