"""core/knobs.py: a Knob's bounds other than the default rule, and a spec at a device's defaults."""

from dataclasses import dataclass

import pytest

from a800lab.core.knobs import Knob, check_knobs, knob, on_device


def test_bounds_say_which_end_is_open():
    percentile = Knob(99.0, "percentile", lo=0, hi=100, bounds="()", example="99")
    assert percentile.check("percentile", 99.9) == 99.9
    for bad in (0, 100, 101.0):
        with pytest.raises(ValueError, match=rf"percentile={bad!r} must be a finite number in "
                                             r"\(0, 100\), e.g. 99"):
            percentile.check("percentile", bad)
    delay = Knob(0.0, "delay", lo=0, bounds="[", example="2")
    assert delay.check("delay", 0) == 0.0  # a float range from 0 that includes it
    with pytest.raises(ValueError, match="delay=-1 must be a finite number >= 0, e.g. 2"):
        delay.check("delay", -1)


@dataclass(frozen=True)
class _Spec:
    batch: int = knob(8, "batch", integer=True, lo=1, gpu=64)
    steps: int = knob(4, "steps", integer=True, lo=1)

    def __post_init__(self):
        check_knobs(self)


def test_on_device_fills_what_is_not_given_with_the_device_default():
    assert on_device(_Spec, "cpu") == _Spec(8, 4)
    assert on_device(_Spec, "cuda:0", steps=None) == _Spec(64, 4)
    assert on_device(_Spec, "cuda", steps=2) == _Spec(64, 2)
    with pytest.raises(ValueError, match="steps=0 must be a positive int"):
        on_device(_Spec, "cpu", steps=0)
