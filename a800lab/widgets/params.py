"""Parameter specs for panels: what a user may vary, the control each one becomes, and the
checks of typed or given values (each refusal names the parameter and what is allowed).

    params = {"precision": ["fp32", "bf16"],                      # a list -> Choice
              "batch_size": Range(1, 256, default=32, scale="pow2"),  # slider over 1, 2, 4 ...
              "lr": Range(1e-5, 1e-1, scale="log"),                # a logarithmic slider
              "seq_len": 128}                                      # a plain value -> Fixed
"""

import inspect
import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass

import ipywidgets as widgets

_TOGGLE_MAX_OPTIONS = 6  # more options than this read better as a dropdown
SCALES = ("linear", "pow2", "log", "typed")
SUPPLIED_ARGUMENTS = ("device", "cancel")  # what a sweep fills in when the workload takes them


def format_param(value) -> str:
    """A parameter value as the panel shows and parses it (floats in %g)."""
    return f"{value:g}" if isinstance(value, float) else str(value)


@dataclass(frozen=True)
class Choice:
    """One of a fixed set of values; `check_with(name, value)`: a spec field's own check."""

    values: tuple
    default: object = None
    check_with: Callable | None = None

    def __post_init__(self) -> None:
        if not self.values:
            raise ValueError("a Choice needs at least one value")
        if self.default is not None and self.default not in self.values:
            raise ValueError(f"default {self.default!r} is not one of {list(self.values)}")

    @property
    def initial(self):
        return self.values[0] if self.default is None else self.default

    def control(self, name: str) -> widgets.ValueWidget:
        options = [(format_param(v), v) for v in self.values]
        if len(options) <= _TOGGLE_MAX_OPTIONS and all(len(t) <= 8 for t, _ in options):
            return widgets.ToggleButtons(options=options, value=self.initial, description=name,
                                         style={"button_width": "auto"})
        return widgets.Dropdown(options=options, value=self.initial, description=name)

    def sweep_values(self) -> list:
        return list(self.values)

    def show(self, control: widgets.ValueWidget, value) -> None:
        control.value = value

    def check(self, name: str, value):
        if self.check_with is not None:
            return self.check_with(name, value)
        if value not in self.values:
            raise ValueError(f"{name}: {value!r} is not a valid value; choose from "
                             f"{', '.join(format_param(v) for v in self.values)}")
        return value

    def parse(self, name: str, text: str) -> list:
        by_text = {format_param(v): v for v in self.values}
        return [self.check(name, by_text.get(token, token)) for token in _tokens(name, text)]


def _finite(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


@dataclass(frozen=True)
class Range:
    """A number in lo..hi, an integer when lo, hi and step are ints. `scale`: "linear" (steps
    of `step`), "pow2" (a slider over the powers of two) or "log"; typed sweep values may be
    any number in the range. "typed": a box to type a number in, which clamps nothing (a slider
    silently clamps a typed 0 to its minimum): Run refuses a value outside lo..hi.
    `check_with(name, value)`: a spec field's own check instead."""

    lo: float
    hi: float
    step: float = 1
    default: float | None = None
    scale: str = "linear"
    check_with: Callable | None = None

    def __post_init__(self) -> None:
        for name in ("lo", "hi", "step"):
            if not _finite(getattr(self, name)):
                raise ValueError(f"Range {name}={getattr(self, name)!r} must be a finite number; "
                                 "give the smallest and largest values to allow, e.g. "
                                 "Range(1, 4096)")
        if self.default is not None and not _finite(self.default):
            raise ValueError(f"Range default={self.default!r} must be a finite number")
        if self.scale not in SCALES:
            raise ValueError(f"Range scale={self.scale!r}: use one of {SCALES}")
        if self.scale == "pow2" and not (self.is_int and self.lo >= 1):
            raise ValueError(f"scale='pow2' needs integer bounds from 1 up, got "
                             f"{self.lo}..{self.hi}")
        if self.scale == "log" and not self.lo > 0:
            raise ValueError(f"scale='log' needs lo > 0, got lo={self.lo}")
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
        if self.scale == "pow2":
            options = sorted({*self._powers_of_two(), self.initial})
            return widgets.SelectionSlider(options=[(str(v), v) for v in options],
                                           value=self.initial, description=name,
                                           continuous_update=False)
        if self.scale == "log":
            return widgets.FloatLogSlider(value=self.initial, base=10, min=math.log10(self.lo),
                                          max=math.log10(self.hi), step=0.1, description=name,
                                          continuous_update=False)
        if self.scale == "typed":
            cls = widgets.IntText if self.is_int else widgets.FloatText
            return cls(value=self.initial, description=name)
        cls = widgets.IntSlider if self.is_int else widgets.FloatSlider
        return cls(value=self.initial, min=self.lo, max=self.hi, step=self.step,
                   description=name, continuous_update=False)

    def show(self, control: widgets.ValueWidget, value) -> None:
        """Set the control to `value`; a pow2 slider gains a stop for a value between powers."""
        if self.scale == "pow2":
            stops = [v for _, v in control.options]
            if value not in stops:
                control.options = [(str(v), v) for v in sorted({*stops, value})]
        control.value = value

    def _powers_of_two(self) -> list[int]:
        first = math.ceil(math.log2(self.lo))
        return [2**e for e in range(first, int(math.log2(self.hi)) + 1)]

    def sweep_values(self) -> list:
        """The powers of two in the range for positive ints, else five (log-)even steps."""
        if self.is_int and self.lo >= 1:
            powers = self._powers_of_two()
            if len(powers) >= 2:
                return powers
        if self.scale == "log":
            ratio = self.hi / self.lo
            return sorted({self._snap(self.lo * ratio ** (i / 4)) for i in range(5)})
        return sorted({self._snap(self.lo + i * (self.hi - self.lo) / 4) for i in range(5)})

    def _snap(self, value: float):
        return int(round(value)) if self.is_int else round(value, 12)

    def check(self, name: str, value):
        if self.check_with is not None:
            return self.check_with(name, value)
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise ValueError(f"{name}: {value!r} is not {self._kind}")
        if not math.isfinite(value):
            raise ValueError(f"{name}={value!r} is not a finite number; pick values inside "
                             f"{format_param(self.lo)}..{format_param(self.hi)}")
        if self.is_int and value != int(value):
            raise ValueError(f"{name}: {value!r} is not {self._kind}")
        if not self.lo <= value <= self.hi:
            bounds = f"{format_param(self.lo)}..{format_param(self.hi)}"
            raise ValueError(f"{name}={format_param(value)} is outside the allowed range "
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
    """A value passed through unchanged (shown, not varied)."""

    value: object

    def control(self, name: str) -> widgets.ValueWidget:
        return widgets.Text(value=format_param(self.value), description=name, disabled=True)

    def show(self, control: widgets.ValueWidget, value) -> None:
        pass  # a fixed value is always what its control shows

    def check(self, name: str, value):
        return value


def as_param(spec, name: str = ""):
    """A list/tuple -> Choice, a Choice/Range/Fixed as is, any other value -> Fixed."""
    if isinstance(spec, (Choice, Range, Fixed)):
        return spec
    if isinstance(spec, (list, tuple)):
        if not spec:
            raise ValueError(f"parameter {name!r} has an empty list of choices; give at least "
                             f"one value, e.g. params={{{name!r}: [1, 2]}}")
        return Choice(tuple(spec))
    return Fixed(spec)


def spec_params(spec_class, device: str, names, *, fixed=None, initial=None) -> dict:
    """The panel's params for a spec's fields `names` on `device`: a Choice of the field's
    choices there, or a Range up to its panel top, each checked by the spec's own check, at the
    `initial` value given or the field's default there; `fixed` values shown, not varied."""
    from ..core.knobs import knobs

    declared, fixed, initial = knobs(spec_class), fixed or {}, initial or {}
    params = {}
    for name in names:
        field = declared[name]
        given = initial.get(name)  # None: the field's default on `device`
        default = field.default_for(device) if given is None else given
        if name in fixed:
            params[name] = Fixed(fixed[name])
        elif field.choices or field.available:
            params[name] = Choice(field.choices_for(device), default, field.check)
        else:
            low = field.lo if field.panel_lo is None else field.panel_lo
            params[name] = Range(low, field.panel_hi, default=default, scale=field.scale,
                                 check_with=field.check)
    return params


def plan_run(params: dict, current: dict, axis: str, typed_values: str, overrides: dict, *,
             no_sweep: str) -> tuple[dict, dict]:
    """What a Run measures, (axes, fixed): each parameter at its override, else its control's
    value in `current`; `axis` over its override or `typed_values` (one point if `no_sweep`)."""
    unknown = set(overrides) - set(params)
    if unknown:
        raise ValueError(f"unknown parameter(s) {sorted(unknown)}; this panel has "
                         f"{list(params)}")
    fixed = {}
    for key, spec in params.items():
        if key != axis:
            value = overrides.get(key, spec.value if isinstance(spec, Fixed) else current[key])
            fixed[key] = spec.check(key, value)
    if axis == no_sweep:
        first = next(iter(fixed))
        return {first: [fixed.pop(first)]}, fixed
    values = axis_values(params[axis], axis, overrides.get(axis), typed_values)
    if not values:  # an empty list given (parse refuses a box without values)
        raise ValueError(f"the sweep over {axis} has no values; give at least one")
    return {axis: values}, fixed


def axis_values(spec, name: str, given, typed: str) -> list:
    """A swept parameter's values: `given` (a value or a list) when not None, else `typed`."""
    if given is None:
        return spec.parse(name, typed)
    return [spec.check(name, v) for v in (given if isinstance(given, (list, tuple)) else [given])]


def check_signature(workload, names) -> None:
    """Refuse a workload whose arguments do not match the parameter names (a function without
    a readable signature passes)."""
    try:
        signature = inspect.signature(workload)
    except (TypeError, ValueError):
        return
    named = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    arguments = signature.parameters.values()
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in arguments)
    accepted = {p.name for p in arguments if p.kind in named}
    unknown = [] if takes_any else [n for n in names if n not in accepted]
    missing = [p.name for p in arguments if p.default is inspect.Parameter.empty
               and p.name not in names and p.name not in SUPPLIED_ARGUMENTS
               and p.kind in (*named, inspect.Parameter.POSITIONAL_ONLY)]
    problems = []
    if unknown:
        problems.append(f"it takes no argument(s) {unknown}: rename them in params to match "
                        f"the function, or add them to it")
    if missing:
        problems.append(f"it needs argument(s) {missing} that params does not give: add them, "
                        f"e.g. params={{{missing[0]!r}: ...}}, or give them defaults")
    if problems:
        fn_name = getattr(workload, "__name__", type(workload).__name__)
        raise ValueError(f"the workload {fn_name}{signature} does not match params "
                         f"{list(names)}: {'; '.join(problems)}")


def _tokens(name: str, text: str) -> list[str]:
    tokens = [t.strip() for t in text.replace(";", ",").split(",") if t.strip()]
    if not tokens:
        raise ValueError(f"the sweep over {name} has no values; type some, e.g. "
                         "'8, 16, 32', or choose another sweep axis")
    return tokens
