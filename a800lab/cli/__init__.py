"""The command line, `python -m a800lab ...`: the parser table (main.py), the options and
printers every family shares (options.py), and one module per command family:

    machine.py   doctor, peak, diff, health
    sweep.py     sweep matmul, sweep tiles, tune tiles
    train.py     sweep train, max-batch
    comm.py      comm collectives, comm ddp
    report.py    report (and report --compare)
    chapters.py  chapters (copies of the notebooks to run)
"""

from .main import build_parser, main

__all__ = ["build_parser", "main"]
