"""Parameter specs for panels: what a user may vary, and the control each one becomes.

    params = {
        "precision": ["fp32", "bf16"],         # a list -> Choice: toggle buttons or a dropdown
        "batch_size": Range(1, 256, default=32),  # -> a slider; swept over powers of two
        "accum_steps": Range(1, 16),
        "seq_len": 128,                        # a plain value -> Fixed, shown but not varied
    }

Each spec builds its ipywidgets control, proposes values for a sweep, and parses the values a
user types for a sweep ("8, 16, 32"), rejecting anything outside the spec with a message that
names the parameter, the value and what is allowed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import ipywidgets as widgets

_TOGGLE_MAX_OPTIONS = 6  # more options than this read better as a dropdown


def format_value(value) -> str:
    """A parameter value as the panel shows and parses it (floats in %g)."""
    return f"{value:g}" if isinstance(value, float) else str(value)


@dataclass(frozen=True)
class Choice:
    """One of a fixed set of values."""

    values: tuple
    default: object = None

    def __post_init__(self) -> None:
        if not self.values:
            raise ValueError("a Choice needs at least one value")
        if self.default is not None and self.default not in self.values:
            raise ValueError(f"default {self.default!r} is not one of {list(self.values)}")

    @property
    def initial(self):
        return self.values[0] if self.default is None else self.default

    def control(self, name: str) -> widgets.ValueWidget:
        options = [(format_value(v), v) for v in self.values]
        short = all(len(label) <= 8 for label, _ in options)
        if len(options) <= _TOGGLE_MAX_OPTIONS and short:
            return widgets.ToggleButtons(options=options, value=self.initial, description=name,
                                         style={"button_width": "auto"})
        return widgets.Dropdown(options=options, value=self.initial, description=name)

    def sweep_values(self) -> list:
        return list(self.values)

    def check(self, name: str, value):
        """`value` itself if it is one of the choices, else a ValueError naming them."""
        if value not in self.values:
            raise ValueError(f"{name}: {value!r} is not a valid value; choose from "
                             f"{', '.join(format_value(v) for v in self.values)}")
        return value

    def parse(self, name: str, text: str) -> list:
        by_text = {format_value(v): v for v in self.values}
        out = []
        for token in _tokens(name, text):
            if token not in by_text:
                raise ValueError(f"{name}: {token!r} is not a valid value; choose from "
                                 f"{', '.join(by_text)}")
            out.append(by_text[token])
        return out


@dataclass(frozen=True)
class Range:
    """A number between `lo` and `hi` (inclusive); integer when all three bounds are ints."""

    lo: float
    hi: float
    step: float = 1
    default: float | None = None

    def __post_init__(self) -> None:
        if not self.lo <= self.hi:
            raise ValueError(f"Range needs lo <= hi, got lo={self.lo}, hi={self.hi}")
        if self.step <= 0:
            raise ValueError(f"Range needs a positive step, got {self.step}")
        if self.default is not None and not self.lo <= self.default <= self.hi:
            raise ValueError(f"default {self.default} is outside {self.lo}..{self.hi}")

    @property
    def is_int(self) -> bool:
        return all(isinstance(v, int) for v in (self.lo, self.hi, self.step))

    @property
    def initial(self):
        return self.lo if self.default is None else self.default

    def control(self, name: str) -> widgets.ValueWidget:
        cls = widgets.IntSlider if self.is_int else widgets.FloatSlider
        return cls(value=self.initial, min=self.lo, max=self.hi, step=self.step,
                   description=name, continuous_update=False)

    def sweep_values(self) -> list:
        """Powers of two inside the range for positive ints, else five even steps."""
        if self.is_int and self.lo >= 1:
            first = math.ceil(math.log2(self.lo))
            powers = [2**e for e in range(first, int(math.log2(self.hi)) + 1)]
            if len(powers) >= 2:
                return powers
        count = 5
        return sorted({self._snap(self.lo + i * (self.hi - self.lo) / (count - 1))
                       for i in range(count)})

    def _snap(self, value: float):
        return int(round(value)) if self.is_int else round(value, 12)

    def check(self, name: str, value):
        """`value` as a number inside the range, else a ValueError saying what is allowed."""
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"{name}: {value!r} is not {self._kind}")
        if self.is_int and value != int(value):
            raise ValueError(f"{name}: {value!r} is not {self._kind}")
        if not self.lo <= value <= self.hi:
            bounds = f"{format_value(self.lo)}..{format_value(self.hi)}"
            raise ValueError(f"{name}={format_value(value)} is outside the allowed range "
                             f"{bounds}; pick values inside it")
        return int(value) if self.is_int else float(value)

    @property
    def _kind(self) -> str:
        return "an integer" if self.is_int else "a number"

    def parse(self, name: str, text: str) -> list:
        out = []
        for token in _tokens(name, text):
            try:
                value = int(token) if self.is_int else float(token)
            except ValueError:
                raise ValueError(f"{name}: {token!r} is not {self._kind}") from None
            out.append(self.check(name, value))
        return out


@dataclass(frozen=True)
class Fixed:
    """A value the panel passes through unchanged (shown, not varied)."""

    value: object

    @property
    def initial(self):
        return self.value

    def control(self, name: str) -> widgets.ValueWidget:
        return widgets.Text(value=format_value(self.value), description=name, disabled=True)


ParamSpec = Choice | Range | Fixed


def as_param(spec) -> ParamSpec:
    """A list/tuple -> Choice, a Choice/Range/Fixed as is, any other value -> Fixed."""
    if isinstance(spec, (Choice, Range, Fixed)):
        return spec
    if isinstance(spec, (list, tuple)):
        return Choice(tuple(spec))
    return Fixed(spec)


def _tokens(name: str, text: str) -> list[str]:
    tokens = [t.strip() for t in text.replace(";", ",").split(",") if t.strip()]
    if not tokens:
        raise ValueError(f"the sweep over {name} has no values; type some, e.g. "
                         "'8, 16, 32', or choose another sweep axis")
    return tokens
