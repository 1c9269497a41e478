"""a800lab: an interactive GPU-tuning lab for NVIDIA A800-class accelerators; panels in
`a800lab.widgets`, figures in `a800lab.figures`, the command line `python -m a800lab --help`.

    df = a800lab.load_results("runs.jsonl")       # a sweep recorded with `python -m a800lab sweep`
"""

from .core.results import load_results

__version__ = "0.1.0"
__all__ = ["load_results", "__version__"]
