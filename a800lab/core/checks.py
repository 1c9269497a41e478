"""The value checks every spec shares: a positive int, a positive finite number, each refusal
one line naming the value and an example of what to give.

    positive_int("batch_size", 0, "32")   # ValueError: batch_size=0 must be a positive int, ...
"""

import math
import numbers


def positive_int(name: str, value, example: str = "") -> int:
    """`value` as an int when it is a positive integer (numpy ints too, bools not)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name}={value!r} must be a positive int"
                         + (f", e.g. {example}" if example else ""))
    return int(value)


def positive_float(name: str, value, example: str = "") -> float:
    """`value` as a float when it is a finite number > 0."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or \
            not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name}={value!r} must be a finite number > 0"
                         + (f", e.g. {example}" if example else ""))
    return float(value)
