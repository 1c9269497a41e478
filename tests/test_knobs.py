"""core.knobs: a spec field declared once checks itself (powers of two, required fields)."""

from dataclasses import MISSING, dataclass

import pytest

from a800lab.core.knobs import check_knobs, knob, knobs, tuner_axes


def _refuse(device):
    raise AssertionError(f"asked what {device} runs for a field with nothing to try")


@dataclass(frozen=True)
class Shape:
    rows: int = knob(MISSING, "rows", integer=True, lo=1, example="1024")
    block: int | None = knob(None, "tile rows", integer=True, lo=16, pow2=True, example="64",
                             tune=(32, 64))
    warps: int = knob(4, "warps", integer=True, lo=1, hi=16, pow2=True, example="4")
    kind: str = knob("a", "kind", choices=("a", "b"), available=_refuse)

    def __post_init__(self):
        check_knobs(self)


@pytest.mark.parametrize("given, says", [
    ({"block": 48}, "block=48 must be a power of two >= 16, e.g. 64"),
    ({"block": 8}, "block=8 must be a power of two >= 16"),
    ({"warps": 3}, "warps=3 must be a power of two from 1 to 16, e.g. 4"),
    ({"warps": 32}, "warps=32 must be a power of two from 1 to 16"),
    ({"warps": True}, "warps=True must be a power of two"),
    ({"rows": None}, "rows=None must be a positive int, e.g. 1024"),
])
def test_powers_of_two_and_required_fields_are_checked(given, says):
    with pytest.raises(ValueError, match=says.replace("(", r"\(")):
        Shape(**{"rows": 8, **given})


def test_a_required_field_has_no_default_and_says_none():
    with pytest.raises(TypeError):
        Shape()  # rows is required
    assert Shape(8, 64, 16).block == 64 and Shape(8).block is None
    assert knobs(Shape)["rows"].describe() == "rows"


def test_tuner_axes_ask_the_device_only_for_fields_with_values_to_try():
    assert tuner_axes(Shape, "cuda:0") == {"block": [32, 64]}
