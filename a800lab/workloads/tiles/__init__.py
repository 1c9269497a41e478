"""The tile lab (chapter 02): one matmul tiled by hand, its configs checked, tuned and modelled.

    from a800lab.workloads.tiles import tiled_matmul_point, check_config, quantise

Each name below is imported from its module on first use (tune() lives in .tune), and so is the
Triton kernel (kernel.py): set TRITON_INTERPRET=1 before that to run it under the interpreter.
"""

from ...core.face import face

_NAMES = {
    ".point": "backend_label default_tile_backend tiled_matmul_point",
    ".config": "alignment_hints check_config export_config smem_limit",
    ".facts": "tile_facts tile_facts_grid",
    ".plan": "compare_targets format_plan plan_tiles",
    ".occupancy": "Occupancy",
    ".tune": "config_grid default_grid",
    ".quantisation": "quantise sm_count_of",
}
__getattr__, __dir__, __all__ = face(__name__, _NAMES)
