"""nbval runs each chapter cell; this checks what the cell showed (tests/chapter_outputs.py):
figures as pictures, no stderr unless the cell is tagged `a800lab-stderr`."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from chapter_outputs import output_problems  # noqa: E402


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    result = yield
    outputs, cell = getattr(item, "test_outputs", None), getattr(item, "cell", None)
    if outputs is not None and cell is not None:
        problems = output_problems(cell, outputs)
        if problems:
            raise AssertionError(f"{item.name}: " + " | ".join(problems))
    return result
