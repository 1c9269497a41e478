"""a800lab: an interactive GPU-tuning lab for NVIDIA A800-class accelerators.

    import a800lab
    df = a800lab.load_results("runs.jsonl")       # a sweep recorded with `python -m a800lab sweep`

Panels live in `a800lab.widgets`, figures in `a800lab.figures`, what is measured in
`a800lab.workloads` (its labs' faces: `.tiles`, `.training`, `.comm`), the measurement core in
`a800lab.core`. Imports point one way: widgets, cli -> report -> figures -> workloads -> core.
"""

from .core.results import load_results

__version__ = "0.1.0"
__all__ = ["load_results", "__version__"]
