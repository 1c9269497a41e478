"""The redraw rate at its boundaries: after a draw of d seconds the next one waits the rest
factor times d (2 on a GPU panel, 4 on a CPU one), or the minimum interval when that is longer.

The draws are instant; a clock that jumps by d inside each draw makes it look d seconds long,
so the wait measured on that clock is the Redrawer's own arithmetic plus the thread's wake-up
delay (the upper bounds leave 0.4 s for that)."""

import time
import types

import pytest

from a800lab.widgets import Explorer, Range
from a800lab.widgets import redraw as redraw_module
from a800lab.widgets.redraw import Redrawer


def timed_pair(monkeypatch, drawer: Redrawer, draw_s: float) -> tuple[float, float]:
    """Two plain requests, the second right after the first draw ends: (the first draw's
    length, the wait from its end to the second draw's start), on the jumping clock."""
    offset = [0.0]
    monkeypatch.setattr(redraw_module, "time",
                        types.SimpleNamespace(monotonic=lambda: time.monotonic() + offset[0]))
    spans = []

    def draw():
        start = redraw_module.time.monotonic()
        offset[0] += draw_s  # a draw_s-long draw, in no time
        spans.append((start, redraw_module.time.monotonic()))

    drawer._draw = draw
    drawer.request()
    assert drawer.flush(5)  # the first draw runs at once
    drawer.request()
    deadline = time.monotonic() + 10
    while len(spans) < 2:
        assert time.monotonic() < deadline, "the second draw never came"
        time.sleep(0.005)
    (first_start, first_end), (second_start, _) = spans
    return first_end - first_start, second_start - first_end


@pytest.mark.parametrize("device, draw_s, rest_s", [
    ("gpu", 0.5, 1.0),    # a slow draw: rest 2 x 0.5 s, longer than the 0.3 s interval
    ("cpu", 0.5, 2.0),    # a CPU panel rests 4 x 0.5 s
    ("gpu", 0.05, 0.25),  # a quick draw: the 0.3 s interval from its start governs
    ("cpu", 0.1, 0.9),    # the CPU's 1 s interval from its start
])
def test_the_next_draw_waits_the_rest_factor_times_the_last_draw(monkeypatch, device, draw_s,
                                                                 rest_s):
    if device == "cpu":  # the drawer a CPU panel makes for itself
        drawer = Explorer(lambda n: {"throughput": 1.0}, params={"n": Range(1, 4)},
                          device="cpu")._drawer
    else:
        drawer = Redrawer(lambda: None)
    took, rested = timed_pair(monkeypatch, drawer, draw_s)
    assert took == pytest.approx(draw_s, abs=0.05)
    assert rest_s - 0.01 <= rested < rest_s + 0.4, (took, rested)


def test_an_urgent_request_skips_the_rest(monkeypatch):
    drawer = Redrawer(lambda: None)
    took, _ = timed_pair(monkeypatch, drawer, 0.5)
    started = time.monotonic()
    drawer.request(urgent=True)  # a view change: drawn at once, not 1 s later
    assert drawer.flush(5) and time.monotonic() - started < 0.5
