"""a800lab: an interactive GPU-tuning lab for NVIDIA A800-class accelerators.

    import a800lab
    df = a800lab.load_results("runs.jsonl")       # a sweep recorded with `python -m a800lab sweep`

Panels live in `a800lab.widgets`, plots in `a800lab.figures.sweep`, the measurement core in
`a800lab.core`. Imports point one way: widgets -> plots -> workloads -> core.
"""

from .core.results import load_results

__version__ = "0.1.0"
__all__ = ["load_results", "__version__"]
