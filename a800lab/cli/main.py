"""The parser table: every command family registers its sub-commands here, and `main()` looks
the chosen one up and runs it.

    from a800lab.cli import main, build_parser
    main(["sweep", "matmul", "--size", "1024", "--out", "runs.jsonl"])    # returns the exit code
    build_parser().parse_args(["comm", "ddp", "--out", "ddp.jsonl"])     # e.g. to check a recipe
    print(commands_markdown())     # every command and its options: docs/commands.md's table

A family module offers `add_parsers(commands)` and calls `commands.add(name, run=..., help=...,
group=...)` for each of its commands; `group` nests it ("sweep", "tune", "check", "comm"). Each
command's parser takes only its own options, so a foreign option ("--block-m" to `sweep matmul`)
is refused by that parser, naming the command. Bad values raise ValueError in the command, which
exits 2 with the message, like argparse does.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings

from ..core.results import LabNotice
from . import chapters, check, comm, machine, report, serve, sweep, train

FAMILIES = (machine, sweep, check, train, serve, comm, report, chapters)
GROUPS = {
    "sweep": "run a sweep headless and write JSON Lines (matmul, tiles, train, serve, decode, "
             "concurrency)",
    "tune": "find the fastest config by successive halving (tiles, train: stored and reused; "
            "serve: under a p99 target)",
    "check": "compile-only checks for any card, no GPU needed: the compiler's verdict on tile "
             "configs (tiles)",
    "comm": "collectives over message sizes (algbw, busbw) or a DDP step (comm hooks, no_sync, "
            "buckets) on N ranks: gloo on CPUs, NCCL on GPUs; under torchrun every process is "
            "a rank",
}
# `tune --size ...` (before `tune` had sub-commands) means `tune tiles --size ...`
DEFAULT_IN_GROUP = {"tune": "tiles"}


def _show_notice(show):
    """A LabNotice as the lab's own one line on stderr; any other warning as Python shows it."""
    def showwarning(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, LabNotice):
            print(f"a800lab: note: {message}", file=sys.stderr)
        else:
            show(message, category, filename, lineno, file, line)
    return showwarning


class Commands:
    """Where families add their commands: the top level and the groups nested under it."""

    def __init__(self, parser: argparse.ArgumentParser):
        self._top = parser.add_subparsers(dest="command", required=True, metavar="command")
        self._groups: dict[str, argparse._SubParsersAction] = {}

    def add(self, name: str, *, run, help: str, group: str | None = None
            ) -> argparse.ArgumentParser:
        """A command's parser; `run(args)` returns the exit code."""
        where = self._top if group is None else self._group(group)
        parser = where.add_parser(name, help=help, description=help)
        parser.set_defaults(run=run, command_parser=parser)
        return parser

    def _group(self, name: str) -> argparse._SubParsersAction:
        if name not in self._groups:
            parent = self._top.add_parser(name, help=GROUPS[name], description=GROUPS[name])
            self._groups[name] = parent.add_subparsers(dest=name.replace("-", "_"),
                                                       required=True, metavar=name)
        return self._groups[name]


def build_parser() -> argparse.ArgumentParser:
    """The whole command line's parser (tests parse the deploy recipes' commands with it)."""
    from .. import __main__

    parser = argparse.ArgumentParser(prog="a800lab", description=__main__.__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = Commands(parser)
    for family in FAMILIES:
        family.add_parsers(commands)
    return parser


def _commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    """(words, parser) of every runnable command, in the parser table's order."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _commands(sub, (*path, name))
            return
    yield path, parser


def commands_markdown() -> str:
    """Every command, what it does and its options (help text and default) as Markdown: the
    reference in docs/commands.md, kept equal to this by a test."""
    lines = []
    for words, parser in _commands(build_parser()):
        formatter = parser._get_formatter()
        lines += ["", f"### `{' '.join(words)}`", "", parser.description, "",
                  "| option | default | what it sets |", "|---|---|---|"]
        for action in parser._actions:
            if action.dest in ("help", "run", "command_parser"):
                continue
            default = action.default
            if isinstance(default, list):
                default = " ".join(map(str, default))
            default = "required" if action.required and action.option_strings else \
                f"`{default}`" if default not in (None, False) else ""
            help_text = formatter._expand_help(action) if action.help else ""
            row = (f"`{formatter._format_action_invocation(action)}`", default, help_text)
            lines.append("| " + " | ".join(c.replace("|", "\\|") for c in row) + " |")
    return "\n".join(lines).strip()


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) > 1 and argv[0] in DEFAULT_IN_GROUP and argv[1].startswith("-") and \
            argv[1] not in ("-h", "--help"):
        argv.insert(1, DEFAULT_IN_GROUP[argv[0]])
    args, extra = build_parser().parse_known_args(argv)
    if extra:
        args.command_parser.error(f"unrecognized arguments: {' '.join(extra)} (see "
                                  f"{args.command_parser.prog} --help)")
    try:
        with warnings.catch_warnings():
            warnings.showwarning = _show_notice(warnings.showwarning)
            return args.run(args)
    except ValueError as exc:  # bad input: say what and exit like argparse does
        print(f"a800lab: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `... | head` closed our stdout: nothing more to say
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 -- the interpreter closes it at exit
        return 0
