"""The tile lab (chapter 02): one matmul tiled by hand, its configs checked, tuned and modelled.

    from a800lab.workloads.tiles import tiled_matmul_point, check_config, quantise

Names: tiled_matmul_point, default_tile_backend, backend_label (point); check_config,
smem_limit, export_config, alignment_hints (config); tile_facts, tile_facts_grid (facts);
plan_tiles, format_plan, compare_targets (plan); Occupancy; config_grid, default_grid (tune:
`from a800lab.workloads.tiles.tune import tune`); quantise, sm_count_of (quantisation). The
Triton kernel (kernel.py) is imported on first use: set TRITON_INTERPRET=1 before that to run it
under the Triton interpreter.
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
