"""Parameter specs: controls, sweep proposals and checks that name the parameter."""

import math

import pytest

from a800lab.widgets.params import Choice, Range, as_param, check_signature


def test_pow2_range_slides_over_powers_of_two():
    spec = Range(8, 512, default=64, scale="pow2")
    control = spec.control("batch_size")
    assert type(control).__name__ == "SelectionSlider"
    assert [v for _, v in control.options] == [8, 16, 32, 64, 128, 256, 512]
    assert control.value == 64
    assert spec.sweep_values() == [8, 16, 32, 64, 128, 256, 512]
    assert spec.check("batch_size", 24) == 24  # typed sweep values need not be powers of two
    odd = Range(3, 40, default=5, scale="pow2").control("n")
    assert [v for _, v in odd.options] == [4, 5, 8, 16, 32]  # the default is kept reachable
    assert odd.value == 5


def test_log_range_is_a_log_slider_with_geometric_sweep():
    spec = Range(1e-4, 1.0, 0.0001, scale="log")
    control = spec.control("lr")
    assert type(control).__name__ == "FloatLogSlider"
    assert (control.min, control.max) == pytest.approx((-4.0, 0.0))
    assert spec.sweep_values() == pytest.approx([1e-4, 1e-3, 1e-2, 1e-1, 1.0])


def test_linear_is_the_default():
    assert type(Range(1, 16).control("accum_steps")).__name__ == "IntSlider"
    assert type(Range(0.0, 1.0, 0.1).control("p")).__name__ == "FloatSlider"


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"lo": 1, "hi": math.inf}, "Range hi=inf must be a finite number"),
    ({"lo": -math.inf, "hi": 1}, "Range lo=-inf must be a finite number"),
    ({"lo": math.nan, "hi": 1}, "Range lo=nan must be a finite number"),
    ({"lo": 1, "hi": 4, "step": math.nan}, "Range step=nan must be a finite number"),
    ({"lo": 1, "hi": 4, "default": math.inf}, "Range default=inf must be a finite number"),
    ({"lo": 0, "hi": 64, "scale": "pow2"}, "scale='pow2' needs integer bounds from 1 up"),
    ({"lo": 0.0, "hi": 1.0, "step": 0.1, "scale": "log"}, "scale='log' needs lo > 0"),
    ({"lo": 1, "hi": 4, "scale": "exp"}, "scale='exp': use one of"),
    ({"lo": 4, "hi": 1}, "lo <= hi"),
])
def test_bad_ranges_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        Range(**kwargs)


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan])
def test_checks_refuse_non_finite_values_by_name(value):
    with pytest.raises(ValueError, match=f"x={value!r} is not a finite number"):
        Range(1, 64).check("x", value)
    with pytest.raises(ValueError, match="x=.* is not a finite number"):
        Range(0.0, 1.0, 0.1).parse("x", f"0.5, {value}")
    with pytest.raises(ValueError, match="x: '.*' is not an integer"):
        Range(1, 64).parse("x", f"1, {value}")
    with pytest.raises(ValueError, match="x: .* is not a valid value; choose from 1, 2"):
        Choice((1, 2)).check("x", value)


def test_empty_choices_name_the_parameter():
    with pytest.raises(ValueError, match="parameter 'x' has an empty list of choices"):
        as_param([], "x")


def step(batch_size, precision, *, lr=0.1, device="cpu"):
    return {}


def test_signature_check():
    check_signature(step, ["batch_size", "precision"])
    check_signature(step, ["batch_size", "precision", "lr", "device"])
    with pytest.raises(ValueError, match=r"takes no argument\(s\) \['seq_len'\]"):
        check_signature(step, ["batch_size", "precision", "seq_len"])
    with pytest.raises(ValueError, match=r"needs argument\(s\) \['precision'\]"):
        check_signature(step, ["batch_size"])
    check_signature(lambda n, cancel: {}, ["n"])  # the sweep passes its cancel token
