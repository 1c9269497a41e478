"""The parser table: each family's `add_parsers(commands)` registers its commands; `main(argv)`
runs the chosen one and returns its exit code; `commands_markdown()` writes docs/commands.md."""

import argparse
import itertools
import os
import sys
import warnings

from ..core.results import LabNotice
from . import chapters, check, comm, machine, report, serve, sweep, train
from .options import Stopped, add_options, run_checks

FAMILIES = (machine, sweep, check, train, serve, comm, report, chapters)
USAGE = """\
The lab headless: `a800lab COMMAND --help` shows a command's options, docs/commands.md all.

A sweep appends one JSON line per point as it is measured; run the same command again to resume
(points already in the file for this environment are skipped). Ctrl-C stops after saving what was
measured. Each point prints one line; a `!` marks a noisy point and says why (timing spread, CPU
oversubscription). Open the file in a notebook with `a800lab.load_results("runs.jsonl")`."""
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


class Commands:
    """Where families add their commands: the top level and the groups nested under it."""

    def __init__(self, parser: argparse.ArgumentParser, wanted: tuple[str, ...] | None = None):
        self._wanted = wanted  # the command words given: only that command gets its options
        self._top = parser.add_subparsers(dest="command", required=True, metavar="command")
        self._groups: dict[str, argparse._SubParsersAction] = {}

    def add(self, name: str, *, run, help: str, group: str | None = None, options: str = "",
            parser_options: dict | None = None, spec=None, **own):
        """A command's parser with `options` (options.add_options; `spec()` imports its lab's
        spec class, only when the command is the one given); `run(args)` -> exit code;
        `parser_options`: the parser's own keywords (prefix_chars, add_help)."""
        if group is not None and group not in self._groups:
            parent = self._top.add_parser(group, help=GROUPS[group], description=GROUPS[group])
            self._groups[group] = parent.add_subparsers(dest=group, required=True,
                                                        metavar=group)
        parser = self._groups.get(group, self._top).add_parser(name, help=help, description=help,
                                                                **(parser_options or {}))
        parser.set_defaults(run=run, command_parser=parser, checks={}, parser_for=build_parser)
        path = (name,) if group is None else (group, name)
        if self._wanted is None or self._wanted[:len(path)] == path:
            add_options(parser, options, spec, **own)
        return parser


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The whole table; given `argv`, the options of its command only (a lab is imported when
    its command is the one given)."""
    parser = argparse.ArgumentParser(prog="a800lab", description=USAGE,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    words = None if argv is None else tuple(itertools.takewhile(
        lambda word: not word.startswith("-"), argv))
    commands = Commands(parser, words)
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
    """Every command, what it does and its options (help text and default), in Markdown."""
    lines = []
    for words, parser in _commands(build_parser()):
        formatter = parser._get_formatter()
        lines += ["", f"### `{' '.join(words)}`", "", parser.description, "",
                  "| option | default | what it sets |", "|---|---|---|"]
        for action in parser._actions:
            if action.dest == "help":
                continue
            default = action.default
            default = " ".join(map(str, default)) if isinstance(default, list) else default
            default = "required" if action.required and action.option_strings else \
                f"`{default}`" if default not in (None, False) else ""
            help_text = formatter._expand_help(action) if action.help else ""
            row = (f"`{formatter._format_action_invocation(action)}`", default, help_text)
            lines.append("| " + " | ".join(c.replace("|", "\\|") for c in row) + " |")
    return "\n".join(lines).strip()


def _show_notice(show):
    """A LabNotice as the lab's own one line on stderr; any other warning as Python shows it."""
    def showwarning(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, LabNotice):
            print(f"a800lab: note: {message}", file=sys.stderr)
        else:
            show(message, category, filename, lineno, file, line)
    return showwarning


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args, extra = build_parser(argv).parse_known_args(argv)
    if extra:
        args.command_parser.error(f"unrecognized arguments: {' '.join(extra)} (see "
                                  f"{args.command_parser.prog} --help)")
    try:
        run_checks(args)  # before anything runs
        with warnings.catch_warnings():
            warnings.showwarning = _show_notice(warnings.showwarning)
            return args.run(args)
    except ValueError as exc:  # bad input: say what and exit like argparse does
        print(f"a800lab: error: {exc}", file=sys.stderr)
        return 2
    except Stopped as exc:  # Ctrl-C: what was kept
        print(exc, file=sys.stderr)
        return 130
    except BrokenPipeError:  # `... | head` closed our stdout: nothing more to say
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 -- the interpreter closes it at exit
        return 0
