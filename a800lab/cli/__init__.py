"""The command line, `python -m a800lab ...`: the parser table (main.py), what the families share
(options.py) and one module per command family; every command in docs/commands.md."""

from .main import build_parser, main

__all__ = ["build_parser", "main"]
