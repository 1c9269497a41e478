"""Resume, command by command: every command that appends points to --out (the sweeps and the
comm runs) run twice with fixed parameters measures nothing the second time and leaves the same
records, byte for byte."""

import pytest

from a800lab.cli import main
from a800lab.cli.main import _commands, build_parser
from a800lab.core import sweep
from a800lab.core.results import read_records
from a800lab.workloads.comm import runs

# each resumable command with small fixed parameters (two points each, on the CPU)
COMMANDS = {
    ("sweep", "matmul"): "--size 16 32 --budget-s 0.01",
    ("sweep", "tiles"): "--size 32 --block-m 16 32 --budget-s 0.01",
    ("sweep", "train"): "--model mlp --batch-size 2 4 --train-steps 1 --budget-s 0.01",
    ("sweep", "serve"): "--model mlp --batch-size 1 2 --requests 100 --budget-s 0.01",
    ("sweep", "decode"): "--batch-size 1 2 --prompt-tokens 2 --new-tokens 2 --budget-s 0.01",
    ("sweep", "load"): "--model mlp --rate 500 1000 --duration-s 0.25",
    ("sweep", "generate"): "--rate 50 --scheduler static continuous --duration-s 0.3 "
                           "--prompt-tokens 4 --output-tokens 2 --max-batch 2 --model-size tiny",
    ("sweep", "concurrency"): "--model mlp --streams 1 2 --batch-size 1 --requests 100",
    ("comm", "collectives"): "--op all_reduce --size 1K 2K --budget-s 0.01",
    ("comm", "ddp"): "--hook allreduce fp16_compress --train-steps 1 --budget-s 0.01",
}


def test_every_command_that_resumes_has_a_resume_case():
    """A new command with --no-resume gets its own case above, or this fails."""
    resumable = {words for words, parser in _commands(build_parser())
                 if any(action.dest == "no_resume" for action in parser._actions)}
    assert resumable == set(COMMANDS)


@pytest.mark.parametrize("words", list(COMMANDS), ids=" ".join)
def test_run_again_measures_nothing_and_keeps_the_records(words, tmp_path, capsys, monkeypatch):
    out = tmp_path / "runs.jsonl"
    args = [*words, *COMMANDS[words].split(), "--device", "cpu", "--threads", "1",
            "--out", str(out)]
    assert main(args) == 0, capsys.readouterr().err
    first = out.read_text()
    records = read_records(out)
    assert len(records) == 2 and all(r.outcome == "ok" for r in records), \
        [(r.outcome, r.message) for r in records]
    capsys.readouterr()

    measured = []

    def refuse(*args, **kwargs):
        measured.append(args)
        raise AssertionError("a finished point was measured again")

    monkeypatch.setattr(sweep, "measure_point", refuse)   # every sweep's points
    monkeypatch.setattr(runs, "start_ranks", refuse)      # the comm runs' ranks
    assert main(args) == 0
    assert measured == []
    assert out.read_text() == first
    assert f"0 points measured, 2 already in {out}" in capsys.readouterr().err
